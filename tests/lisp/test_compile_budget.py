"""The compiler's own work is bounded: forms visited, code generated, and what compiled code does.

A macro can return a form whose parts are shared (each level refers to the previous
form twice): expanding it costs a few steps, but walking it as a tree doubles per
level. Every pass of the compiler charges the forms it visits to the compile budget,
and the code it generates counts against the step budget and guest memory, so such a
program is refused within the limits.
"""

from __future__ import annotations

import itertools

import pytest

from svit.lisp.budget import Budget
from svit.lisp.context import LispLimits
from svit.lisp.errors import BudgetExhausted, LimitError, LispError, ReadError
from svit.lisp.interpreter import Interpreter
from tests.bounds import assert_memory_within, assert_steps_within, assert_time_within, measure

_unique = itertools.count()


def shared_form_program(levels: int, op: str = "+") -> str:
    """A macro whose expansion is a DAG: each level names the previous form twice."""
    return (
        f"; {next(_unique)}\n"
        f"(define (grow n form) (if (= n 0) form (grow (- n 1) (list '{op} form form))))\n"
        "(macro (big n) (grow n 1))\n"
        f"(define (main input) (big {levels}))\n"
    )


def compile_with(source: str, limits: LispLimits, budget: Budget | None = None):
    return Interpreter(limits).compile(source, budget=budget) if budget is not None else Interpreter(limits).compile(source)


def refusal(fn) -> str:
    """The limit a refused compile names (fails if it was accepted or failed otherwise)."""
    with pytest.raises((LimitError, BudgetExhausted)) as caught:
        fn()
    error = caught.value
    return error.limit if isinstance(error, LimitError) else error.what


def test_shared_forms_are_refused_within_the_time_limit() -> None:
    limits = LispLimits(max_execution_millis=200)
    cost = measure(lambda: compile_with(shared_form_program(14), limits))
    assert isinstance(cost.error, (LimitError, BudgetExhausted)), cost.error or "accepted"
    assert_time_within(cost, limits.max_execution_millis)


def test_shared_forms_are_refused_within_guest_memory() -> None:
    limits = LispLimits(max_guest_memory=1024 * 1024)
    cost = measure(lambda: compile_with(shared_form_program(13), limits), memory=True)
    assert isinstance(cost.error, (LimitError, BudgetExhausted)), cost.error or "accepted"
    assert_memory_within(cost, limits.max_guest_memory)


def test_shared_forms_run_out_of_steps_deterministically() -> None:
    limits = LispLimits(max_steps=20_000, max_guest_memory=64 * 1024 * 1024, max_execution_millis=60_000)
    used = []
    for _ in range(2):
        budget = Budget(limits.max_steps, limits.max_execution_millis)
        assert refusal(lambda budget=budget: compile_with(shared_form_program(14), limits, budget)) == "steps"
        used.append(budget.used)
    assert used[0] == used[1]
    assert_steps_within(used[0], limits.max_steps)


def test_generated_code_is_bounded_by_guest_memory() -> None:
    # Far within the step budget, but the code of one expression outgrows guest memory.
    limits = LispLimits(max_steps=100_000_000, max_execution_millis=60_000, max_guest_memory=512 * 1024)
    assert refusal(lambda: compile_with(shared_form_program(12), limits)) == "guest memory"


def test_a_small_macro_expansion_still_compiles() -> None:
    interp = Interpreter(LispLimits())
    interp.run(shared_form_program(4))
    assert interp.call("main", None) == 16


def test_compiler_work_is_charged_to_the_budget_passed_in() -> None:
    budget = Budget(1_000_000, 60_000)
    Interpreter(LispLimits()).compile(shared_form_program(6), budget=budget)
    # 2**7 forms per pass at least, over expansion, resolution and code generation.
    assert budget.used >= 3 * 2**6


def test_compile_steps_are_the_same_from_the_cache() -> None:
    source = shared_form_program(6)
    first, second = Budget(1_000_000, 60_000), Budget(1_000_000, 60_000)
    Interpreter(LispLimits()).compile(source, budget=first)
    Interpreter(LispLimits()).compile(source, budget=second)
    assert first.used == second.used > 0


def test_a_cached_compile_still_runs_out_of_a_small_budget() -> None:
    source = shared_form_program(8)
    used = Budget(1_000_000, 60_000)
    Interpreter(LispLimits()).compile(source, budget=used)
    small = Budget(used.used // 2, 60_000)
    assert refusal(lambda: Interpreter(LispLimits()).compile(source, budget=small)) == "steps"


# ---------------------------------------------------------------------- fuel of compiled code


def balanced_sum(leaves: int) -> str:
    """``(+ (+ x x) (+ x x))`` and so on: ``leaves - 1`` inlined additions in one expression."""
    if leaves == 1:
        return "x"
    half = leaves // 2
    return f"(+ {balanced_sum(half)} {balanced_sum(leaves - half)})"


def steps_of_call(source: str, *args) -> int:
    interp = Interpreter(LispLimits(max_steps=10_000_000, max_execution_millis=60_000))
    interp.run(source)
    before = interp.budget.used
    interp.call("f", *args)
    return interp.budget.used - before


def test_a_big_straight_line_expression_charges_for_its_size() -> None:
    source = f"(define (f x) {balanced_sum(512)})"
    assert steps_of_call(source, 1) >= 511 // 16


def test_a_small_function_still_costs_one_step() -> None:
    assert steps_of_call("(define (f x) (+ (* x 2) (- x 1)))", 3) == 1


def test_a_big_loop_body_charges_for_its_size_every_iteration() -> None:
    body = balanced_sum(256)
    source = f"(define (f x n) (if (= n 0) 0 (do {body} (f x (- n 1)))))"
    assert steps_of_call(source, 1, 100) >= 100 * (255 // 16)


def test_a_big_top_level_expression_charges_for_its_size() -> None:
    interp = Interpreter(LispLimits(max_steps=10_000_000, max_execution_millis=60_000))
    interp.define_value("x", 1)
    interp.run(balanced_sum(512))
    assert interp.budget.used >= 511 // 16


# ---------------------------------------------------------------------- clear errors


def test_unicode_escape_without_braces_is_a_read_error() -> None:
    for source in (r'"\u41"', r'"\u"', r'"\x4"', r'"\x"'):
        with pytest.raises(ReadError) as caught:
            Interpreter().run(source)
        assert "escape" in caught.value.message


NEST = "(define (nest n form) (if (= n 0) form (nest (- n 1) (list 'if true form 0))))\n(macro (deep n) (nest n 1))\n"


@pytest.mark.parametrize("max_depth", [64, 1024])
def test_a_macro_expanding_to_deeply_nested_ifs_is_a_syntax_depth_error(max_depth: int) -> None:
    source = NEST + f"; {next(_unique)}\n(define (f) (deep 150))\n(f)"
    with pytest.raises(LimitError) as caught:
        Interpreter(LispLimits(max_syntax_depth=max_depth)).run(source)
    assert caught.value.limit == "syntax depth"


def test_a_macro_expansion_deeper_than_the_syntax_depth_is_refused() -> None:
    source = NEST + f"; {next(_unique)}\n(deep 70)"
    with pytest.raises(LimitError) as caught:
        Interpreter(LispLimits(max_syntax_depth=64)).run(source)
    assert caught.value.limit == "syntax depth"
    assert Interpreter(LispLimits(max_syntax_depth=200)).run(source) == 1


def test_no_compile_failure_is_an_internal_error() -> None:
    for source in (shared_form_program(12), NEST + "(define (f) (deep 150)) (f)"):
        try:
            Interpreter(LispLimits(max_execution_millis=300)).run(source)
        except LispError as error:
            assert error.kind != "internal error", error.message


# ---------------------------------------------------------------------- the compile cache


def big_const(levels: int) -> str:
    """A const of 16**levels characters, built by repeated concatenation."""
    body = "a"
    for _ in range(levels):
        body = f"(let ((a {body})) (concat a a a a a a a a a a a a a a a a))"
    return f'; {next(_unique)}\n(const big (let ((a "x")) {body}))\n(define (main input) (len big))\n'


def test_the_cache_never_reuses_a_compile_done_under_more_guest_memory() -> None:
    source = big_const(6)  # 16 M characters
    large = LispLimits(max_guest_memory=64 * 1024 * 1024, max_steps=10_000_000)
    Interpreter(large).compile(source)
    with pytest.raises(LimitError) as caught:
        Interpreter(LispLimits()).compile(source)
    assert caught.value.limit == "guest memory"


def test_the_cache_never_reuses_a_compile_done_under_more_steps() -> None:
    source = (
        f"; {next(_unique)}\n(define (spin n) (if (= n 0) 0 (spin (- n 1))))\n"
        "(macro (burn) (do (spin 300000) 0))\n(define (main input) (burn))\n"
    )
    Interpreter(LispLimits(max_steps=10_000_000, max_execution_millis=60_000)).compile(source)
    with pytest.raises(BudgetExhausted) as caught:
        Interpreter(LispLimits(max_steps=100_000, max_execution_millis=60_000)).compile(source)
    assert caught.value.what == "steps"


# ---------------------------------------------------------------------- generated attacks

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

#: How a level of the generated macro combines the previous form with itself.
SHAPES = {
    "add": "(list '+ form form)",
    "list": "(list 'list form form)",
    "if": "(list 'if true form form)",
    "do": "(list 'do form form form)",
    "let": "(list 'let (list (list 'y form)) form)",
    "lambda": "(list (list 'lambda (list 'y) form) form)",
    "quasi": "(list 'quasiquote (list (list 'unquote form) (list 'unquote form)))",
}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes=st.lists(st.sampled_from(sorted(SHAPES)), min_size=1, max_size=3), levels=st.integers(1, 24))
def test_generated_shared_forms_stay_within_the_limits(shapes: list[str], levels: int) -> None:
    steps = " ".join(f"(if (= (rem n {len(shapes)}) {i}) {SHAPES[s]} " for i, s in enumerate(shapes)) + "form" + ")" * len(shapes)
    source = (
        f"; {next(_unique)}\n"
        f"(define (grow n form) (if (= n 0) form (grow (- n 1) {steps})))\n"
        "(macro (big n) (grow n 1))\n"
        f"(define (main input) (big {levels}))\n"
    )
    limits = LispLimits(max_execution_millis=100, max_guest_memory=1024 * 1024, max_syntax_depth=1024)
    budget = Budget(limits.max_steps, limits.max_execution_millis)
    cost = measure(lambda: Interpreter(limits).compile(source, budget=budget))
    if cost.error is not None:
        assert isinstance(cost.error, (LimitError, BudgetExhausted)), cost.error
    assert_time_within(cost, limits.max_execution_millis)
    assert_steps_within(budget.used, limits.max_steps)
