"""A renewed namespace stands in for running a definitions-only top level it ran before:
the run's value, error, steps and the namespace it leaves are those of running it.

Each case runs one sequence of (program, input, budget) in a sealed namespace renewed
before every run, once with reuse on and once with it off, and compares every outcome.
Top levels charge no steps as the compiler stands, so the sequences also run with every
form charging a step (``FORMS_PER_STEP = 1``): a reused top level must charge what it
charged, and a budget too small for it must fail where running it fails.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lisp import compiler
from lisp.budget import Budget
from lisp.context import LispLimits
from lisp.errors import LispError
from lisp.interpreter import Interpreter, definitions_only
from lisp.reader import read

#: Programs run in one namespace, one after another in any order. The comment tells each
#: step charge apart in the compile cache (which does not key on it).
PROGRAMS = (
    # Definitions only: functions, a lambda, quoted and literal constants, a const and a macro.
    "(define k '(1 2 3)) (define s \"text\") (const c 5) (macro (twice x) (list '+ x x))"
    " (define (f x) (+ x c)) (define g (lambda (y) (* y 2))) (define (main input) (twice (f (g input))))",
    # main defines a global and rebinds one the top level bound: neither may outlive the run.
    "(define n 10) (define (main input) (do (define n (+ n input)) (define fresh input) n))",
    # main rebinds main itself.
    "(define (main input) (do (define main 0) input))",
    # Reads a global no program binds at top level (only the one above, in main): unbound.
    "(define (main input) fresh)",
    # Impure top level: it calls the host, so it runs every time.
    "(define start (host-next)) (define (main input) (+ start input))",
    # Definitions only, over a host function and a host value.
    "(define (host-next) 100) (define input 2) (define (main x) (+ (host-next) input x))",
    # Definitions only, but typed: a self-calling function with its typed entry.
    "(define (fib n) (if (< n 2) n (+ (fib (- n 1)) (fib (- n 2))))) (define (main input) (fib (+ 3 input)))",
    # Many definitions: past max_namespace_entries under the tight limits below.
    " ".join(f"(define d{i} {i})" for i in range(12)) + " (define (main input) (+ d11 input))",
    # A top-level expression: not definitions only.
    "(define (main input) input) (main 1)",
)

LIMITS = (LispLimits(), LispLimits(max_namespace_entries=12))


class Counter:
    """A host function with an effect: each call answers one more."""

    def __init__(self) -> None:
        self.calls = 0

    def next(self) -> int:
        self.calls += 1
        return self.calls


def sealed(limits: LispLimits, counter: Counter) -> Interpreter:
    interp = Interpreter(limits, Budget(10**6, None), filename="/lib/reuse.svit-script")
    interp.define_value("input", None)
    interp.define_function("host-next", counter.next, 0, 0)
    interp.seal()
    return interp


@contextmanager
def reuse(on: bool) -> Iterator[None]:
    saved = Interpreter.reuse_top_levels
    Interpreter.reuse_top_levels = on
    try:
        yield
    finally:
        Interpreter.reuse_top_levels = saved


def plain(value: Any) -> Any:
    """A global's value, with functions as what they are named (a reused one is the same object)."""
    return ("function", getattr(value, "__name__", "")) if callable(value) else value


def activate(interp: Interpreter, source: str, value: int, steps: int) -> tuple[Any, ...]:
    budget = Budget(steps, None)
    interp.renew(budget, None, {"input": value})
    try:
        outcome: tuple[Any, ...] = ("ok", *interp.run_and_call(source, "main", value, compile_budget=budget))
    except LispError as error:
        outcome = ("error", type(error).__name__, error.message, error.stack)
    state = (sorted(interp.defined), sorted(interp.pending),
             [(name, plain(v)) for name, v in interp.globals.items() if name != "__builtins__"])
    interp.vacate()
    return outcome, budget.used, state


def cost(limits: LispLimits, source: str) -> int:
    """The steps one run of ``source`` takes in a fresh namespace (at least 1: a failing run's too)."""
    with reuse(False):
        _outcome, used, _state = activate(sealed(limits, Counter()), source, 1, 10**6)
    return max(used, 1)


def sequences(data: st.DataObject, forms_per_step: int) -> None:
    marked = [f"{source} ; forms per step {forms_per_step}" for source in PROGRAMS]
    limits = data.draw(st.sampled_from(LIMITS))
    # A few programs at a time, so the same one comes back to a namespace often.
    chosen = data.draw(st.lists(st.integers(0, len(marked) - 1), min_size=1, max_size=3, unique=True))
    runs = data.draw(st.lists(st.tuples(st.sampled_from(chosen), st.integers(-3, 3), st.integers(-3, 3),
                                        st.booleans()), min_size=1, max_size=12))
    counters = Counter(), Counter()
    spaces = sealed(limits, counters[0]), sealed(limits, counters[1])
    for index, value, offset, short in runs:
        source = marked[index]
        # Budgets at and around the whole run's cost, or below it by a little.
        steps = max(0, cost(limits, source) + offset - (5 if short else 0))
        with reuse(True):
            reused = activate(spaces[0], source, value, steps)
        with reuse(False):
            run = activate(spaces[1], source, value, steps)
        assert reused == run
        assert counters[0].calls == counters[1].calls


@given(data=st.data())
@settings(max_examples=150, deadline=None)
def test_a_reused_top_level_runs_as_running_it_does(data: st.DataObject) -> None:
    sequences(data, compiler.FORMS_PER_STEP)


@given(data=st.data())
@settings(max_examples=150, deadline=None)
def test_a_reused_top_level_charges_the_steps_it_charged(data: st.DataObject) -> None:
    saved = compiler.FORMS_PER_STEP
    compiler.FORMS_PER_STEP = 1  # every form a step: top levels cost something
    try:
        sequences(data, 1)
    finally:
        compiler.FORMS_PER_STEP = saved


def top_level_runs(interp: Interpreter, source: str, steps: int) -> tuple[int, Any]:
    """How often the program's top level ran in one activation, and the outcome."""
    runs = [0]

    def profile(frame: Any, event: str, _arg: Any) -> None:
        if event == "call" and frame.f_code.co_name == "<module>" and frame.f_code.co_filename == interp.filename:
            runs[0] += 1

    sys.setprofile(profile)
    try:
        outcome = activate(interp, source, 2, steps)
    finally:
        sys.setprofile(None)
    return runs[0], outcome


def test_the_second_run_of_a_program_binds_its_definitions_without_running_them() -> None:
    source = PROGRAMS[0]
    interp = sealed(LispLimits(), Counter())
    interp.compile(source)  # compiled beforehand: its const and macro run in namespaces of their own
    # Run twice (recorded at the second run: a program run once is never recorded), then reused.
    runs = [top_level_runs(interp, source, 10**6) for _ in range(3)]
    assert [ran for ran, _outcome in runs] == [1, 1, 0]
    assert runs[0][1] == runs[1][1] == runs[2][1]
    with reuse(False):
        assert top_level_runs(interp, source, 10**6)[0] == 1
    # An impure top level runs every time.
    impure = PROGRAMS[4]
    assert [top_level_runs(interp, impure, 10**6)[0] for _ in range(3)] == [1, 1, 1]
    # It did not displace the one kept, nor does a program run once; one run twice does.
    assert top_level_runs(interp, source, 10**6)[0] == 0
    assert top_level_runs(interp, PROGRAMS[2], 10**6)[0] == 1
    assert top_level_runs(interp, source, 10**6)[0] == 0
    assert [top_level_runs(interp, PROGRAMS[1], 10**6)[0] for _ in range(3)] == [1, 1, 0]
    assert [top_level_runs(interp, source, 10**6)[0] for _ in range(3)] == [1, 1, 0]


def test_a_budget_smaller_than_the_top_level_runs_it_and_fails_where_it_fails() -> None:
    saved = compiler.FORMS_PER_STEP
    compiler.FORMS_PER_STEP = 1
    try:
        source = PROGRAMS[0] + " ; a budget smaller than the top level"
        interp = sealed(LispLimits(), Counter())
        compiling = Budget(10**6, None)
        interp.compile(source, compiling)
        top_level = Budget(10**6, None)  # compiling and running the top level, no main
        interp.renew(top_level, None, {"input": 0})
        with reuse(False):
            interp.run(source, compile_budget=top_level)
        interp.vacate()
        top = top_level.used - compiling.used
        assert top >= 2
        for _ in range(2):  # recorded at the second run
            ran, (outcome, used, _state) = top_level_runs(interp, source, 10**6)
            assert ran == 1 and outcome[0] == "ok"
        # Reused: the same steps, the top level's included.
        ran, (again, reused, _state) = top_level_runs(interp, source, 10**6)
        assert (ran, again, reused) == (0, outcome, used)
        # Enough for compiling and part of the top level: it runs, and fails in it.
        ran, (short, _used, _state) = top_level_runs(interp, source, compiling.used + top - 1)
        assert ran == 1 and short[:2] == ("error", "BudgetExhausted")
        assert any(frame.function == "top level" for frame in short[3])
        # Just enough for it: it is reused, and the run fails in main.
        ran, (exact, _used, _state) = top_level_runs(interp, source, compiling.used + top)
        assert ran == 0 and exact[:2] == ("error", "BudgetExhausted")
        assert not any(frame.function == "top level" for frame in exact[3])
    finally:
        compiler.FORMS_PER_STEP = saved


def test_a_top_level_binding_a_global_to_the_value_it_held_binds_it_again() -> None:
    # Run (and recorded) with input 2, the program's own `(define input 2)` leaves the
    # global as it was; reused with input 3, it must still bind it (main sees 2, not 3).
    source = PROGRAMS[5]
    interp = sealed(LispLimits(), Counter())
    assert [activate(interp, source, 2, 10**6)[0] for _ in range(2)] == [("ok", True, 104)] * 2
    assert top_level_runs(interp, source, 10**6)[0] == 0
    assert activate(interp, source, 3, 10**6)[0] == ("ok", True, 105)


@pytest.mark.parametrize(("source", "expected"), [
    ("(define (f x) x) (define g (lambda () 1)) (define k '(a b)) (define s \"s\") (define n 1.5)", True),
    ("(define d \"documented\" 5) (const c (+ 1 2)) (macro (m x) x) (define (main input) (m c))", True),
    ("(define x (+ 1 2))", False),  # calls a function
    ("(define x y)", False),  # another global's value
    ("(define x `(1 ,y))", False),  # a quasiquote reads y
    ("(define (f) 1) (f)", False),  # a top-level expression
    ("(do (define x 1))", False),
    ("(define x ()) (define t true)", True),  # unit and bool are literals
])
def test_definitions_only_accepts_definitions_alone(source: str, expected: bool) -> None:
    assert definitions_only(read(source).forms) is expected
