"""Comparing many values pays for every comparison, so the step and time limits stop it."""

from __future__ import annotations

import pytest

from svit.lisp.budget import Budget
from svit.lisp.context import LispLimits
from svit.lisp.errors import BudgetExhausted
from svit.lisp.interpreter import Interpreter
from tests.bounds import assert_steps_within, assert_time_within, measure

DISTINCT = "(apply /= (range {n}))"


def interp(**limits: int) -> Interpreter:
    lim = LispLimits(**limits)
    return Interpreter(lim, Budget(lim.max_steps, lim.max_execution_millis))


def test_not_equal_still_answers() -> None:
    it = interp()
    assert it.run("(/= 1 2 3)") is True
    assert it.run("(/= 1 2 1)") is False
    assert it.run("(/= 1 1.0)") is False
    assert it.run('(/= "a" "b" "c" "a")') is False
    assert it.run("(ne 1 \"a\" 2)") is True


def test_not_equal_charges_a_step_per_pair() -> None:
    it = interp(max_steps=1_000_000, max_execution_millis=60_000)
    before = it.budget.used
    assert it.run(DISTINCT.format(n=200)) is True
    used = it.budget.used - before
    pairs = 200 * 199 // 2
    assert used >= pairs
    assert_steps_within(used, pairs + 1_000)


def test_not_equal_over_many_arguments_runs_out_of_steps() -> None:
    it = interp(max_steps=100_000, max_execution_millis=60_000)
    with pytest.raises(BudgetExhausted) as caught:
        it.run(DISTINCT.format(n=1_000))
    assert caught.value.what == "steps"
    assert_steps_within(it.budget.used, 100_000)


def test_not_equal_over_many_arguments_stops_at_the_time_limit() -> None:
    it = interp(max_steps=1_000_000_000, max_execution_millis=100)
    cost = measure(lambda: it.run(DISTINCT.format(n=3_000)))
    assert isinstance(cost.error, BudgetExhausted) and cost.error.what == "time"
    assert_time_within(cost, 100)
