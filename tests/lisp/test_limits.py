"""Every language limit is hit by a test, and the failure names the limit."""

from __future__ import annotations

import resource

import pytest

from svit.lisp.budget import Budget
from svit.lisp.context import LispLimits
from svit.lisp.errors import BudgetExhausted, LimitError
from svit.lisp.interpreter import Interpreter, evaluate


def run(source: str, **limits: int):
    return evaluate(source, LispLimits(**limits))


def limit_of(source: str, **limits: int) -> str:
    with pytest.raises(LimitError) as caught:
        run(source, **limits)
    return caught.value.limit


DEPTH = "(define (depth n) (if (= n 0) 0 (+ 1 (depth (- n 1))))) "


def test_call_stack_allows_up_to_the_limit() -> None:
    assert run(DEPTH + "(depth 7)", max_call_stack=8) == 7


def test_call_stack_limit() -> None:
    assert limit_of(DEPTH + "(depth 100)", max_call_stack=8) == "call stack"


def test_call_stack_limit_through_apply_and_lambdas() -> None:
    source = "(define (f n) (if (= n 0) 0 (+ 1 (apply (lambda (m) (f m)) (list (- n 1)))))) (f 5000)"
    # A generous wall clock: under load the deep run must still stop on the call stack, not on time.
    assert limit_of(source, max_call_stack=4096, max_execution_millis=60_000) == "call stack"


def test_call_stack_at_hard_maximum_does_not_crash_the_host() -> None:
    assert run(DEPTH + "(depth 4000)", max_call_stack=4096, max_steps=100_000, max_execution_millis=60_000) == 4000


def test_step_budget_stops_an_infinite_loop() -> None:
    with pytest.raises(BudgetExhausted) as caught:
        run("(define (spin n) (spin n)) (spin 0)", max_steps=10_000, max_execution_millis=60_000)
    assert caught.value.what == "steps"


def test_wall_clock_backstop_stops_a_long_run() -> None:
    with pytest.raises(BudgetExhausted) as caught:
        run("(define (spin n) (spin n)) (spin 0)", max_steps=1_000_000_000, max_execution_millis=50)
    assert caught.value.what == "time"


def exhaust_steps(max_steps: int, millis: int) -> int:
    budget = Budget(max_steps, millis)
    interp = Interpreter(LispLimits(max_steps=max_steps), budget)
    source = "(define (walk n acc) (if (= n 0) acc (walk (- n 1) (+ acc (g n))))) (define (g n) (* n 2)) (walk 1000000 0)"
    with pytest.raises(BudgetExhausted):
        interp.run(source)
    return budget.used


def test_fuel_is_deterministic_across_runs_and_wall_clock_budgets() -> None:
    first = exhaust_steps(12_345, 60_000)
    second = exhaust_steps(12_345, 60_000)
    third = exhaust_steps(12_345, 30_000)
    assert first == second == third == 12_345


def test_same_program_uses_the_same_steps() -> None:
    def steps() -> int:
        interp = Interpreter(LispLimits())
        interp.run("(define (fib n) (if (< n 2) n (+ (fib (- n 1)) (fib (- n 2))))) (fib 15)")
        return interp.steps_used()

    assert steps() == steps() > 1000


def test_budget_is_shared_with_nested_runs() -> None:
    budget = Budget(5_000, 60_000)
    outer = Interpreter(LispLimits(), budget)

    def nested(n):
        inner = Interpreter(LispLimits(), budget)
        inner.run("(define (spin n) (if (= n 0) 0 (spin (- n 1))))")
        return inner.call("spin", n)

    outer.define_function("nested", nested, 1, 1)
    assert outer.run("(nested 100)") == 0
    used_once = budget.used
    with pytest.raises(BudgetExhausted):
        outer.run("(define (again k) (if (= k 0) 0 (do (nested 100) (again (- k 1))))) (again 1000)")
    assert budget.remaining == 0
    assert used_once < 5_000


def test_ten_million_self_tail_calls_in_bounded_memory() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run(
        "(define (loop n) (if (= n 0) \"done\" (loop (- n 1)))) (loop 10000000)",
        max_steps=20_000_000,
        max_execution_millis=60_000,
    )
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert result == "done"
    assert after - before < 64 * 1024  # kilobytes: no per-iteration growth


def test_integer_bits_at_run_time() -> None:
    assert limit_of("(* 4294967296 4294967296)") == "integer bits"
    assert run("(* 4294967296 4294967295)") == 4294967296 * 4294967295


def test_integer_bits_power_is_refused_before_computing() -> None:
    assert limit_of("(^ 10 100000)") == "integer bits"


def test_integer_bits_literal_at_compile_time() -> None:
    assert limit_of("65536", max_integer_bits=8) == "integer bits"
    assert run("255", max_integer_bits=8) == 255


def test_integer_bits_limit_applies_to_additions() -> None:
    assert limit_of("(+ 200 100)", max_integer_bits=8) == "integer bits"
    assert run("(+ 100 100)", max_integer_bits=8) == 200


def test_syntax_depth() -> None:
    nested = "(list " * 10 + "1" + ")" * 10
    assert limit_of(nested, max_syntax_depth=4) == "syntax depth"
    assert run(nested, max_syntax_depth=10) is not None


def test_syntax_depth_of_a_huge_nesting_is_rejected_without_crashing() -> None:
    nested = "(" * 200_000 + ")" * 200_000
    assert limit_of(nested) == "syntax depth"


def test_guest_memory_string_doubling() -> None:
    source = "(define (grow s) (grow (concat s s))) (grow \"abcdefgh\")"
    assert limit_of(source, max_steps=10_000_000, max_execution_millis=60_000) == "guest memory"


def test_guest_memory_list_growth() -> None:
    source = "(define (grow l) (grow (concat l l))) (grow (list 1 2 3 4))"
    assert limit_of(source, max_steps=10_000_000, max_execution_millis=60_000) == "guest memory"


def test_guest_memory_small_limit() -> None:
    assert limit_of("(concat \"0123456789\" \"0123456789\")", max_guest_memory=16) == "guest memory"
    assert run("(concat \"01234\" \"56789\")", max_guest_memory=16) == "0123456789"


def test_namespace_limit() -> None:
    interp = Interpreter(LispLimits(max_namespace_entries=4))
    interp.define_value("input", 1)
    interp.run("(define a 1) (define b 2) (define c 3)")
    with pytest.raises(LimitError) as caught:
        interp.run("(define d 4)")
    assert caught.value.limit == "guest namespace"


def test_namespace_redefinition_does_not_count_twice() -> None:
    interp = Interpreter(LispLimits(max_namespace_entries=2))
    assert interp.run("(define a 1) (define a 2) (define b 3) b") == 3


def test_value_stack_for_a_call_with_many_arguments() -> None:
    args = " ".join(str(i) for i in range(64))
    assert limit_of(f"(+ {args})", max_value_stack=16) == "value stack"
    assert run(f"(+ {args})", max_value_stack=64) == sum(range(64))


def test_value_stack_for_apply() -> None:
    assert limit_of("(apply + (list 1 2 3 4 5 6 7 8 9 10))", max_value_stack=4) == "value stack"


def test_huge_decimal_literals_are_an_integer_bits_limit_not_an_internal_error() -> None:
    for source in ("9" * 5000, "(+ 1 " + "9" * 5000 + ")", "1/" + "3" * 5000, "-" + "7" * 4400):
        assert limit_of(source, max_integer_bits=4096) == "integer bits"
    assert run("-3/6") == __import__("fractions").Fraction(-1, 2)


# --- the value stack counts every active frame's parameters and let bindings -----------

WIDE = (
    "(define (wide n) (let ((a 1) (b 2) (c 3) (d 4) (e 5) (f 6) (g 7) (h 8) (i 9))"
    " (if (= n 0) 0 (+ a (wide (- n 1)))))) "
)


def test_value_stack_counts_bindings_of_active_frames() -> None:
    # ten values per frame (one parameter, nine bindings): 12 frames hold 120 > 100
    assert limit_of(WIDE + "(wide 12)", max_call_stack=64, max_value_stack=100) == "value stack"


def test_value_stack_allows_frames_within_the_limit() -> None:
    assert run(WIDE + "(wide 8)", max_call_stack=64, max_value_stack=100) == 8


def test_value_stack_through_mutual_recursion() -> None:
    source = WIDE + "(define (other n) (wide n)) (other 30)"
    assert limit_of(source, max_call_stack=1024, max_value_stack=100) == "value stack"


def test_tracked_value_stack_still_reports_the_call_stack() -> None:
    # `wide` makes the program track values, but the narrow recursion runs out of depth first
    assert limit_of(WIDE + DEPTH + "(depth 100)", max_call_stack=8, max_value_stack=1000) == "call stack"
    assert run(WIDE + DEPTH + "(depth 7)", max_call_stack=8, max_value_stack=1000) == 7


def test_a_frame_larger_than_the_value_stack_fails_at_entry() -> None:
    assert limit_of(WIDE + "(wide 0)", max_call_stack=64, max_value_stack=5) == "value stack"


# --- guest memory counts what a list holds, not only its own elements -------------------

def test_a_growing_nested_list_hits_guest_memory_not_the_step_budget() -> None:
    source = "(define (foo a) (foo (list () a))) (foo ())"
    assert limit_of(source, max_guest_memory=10_000, max_steps=10_000_000) == "guest memory"


def test_nested_growth_through_append_concat_and_quasiquote() -> None:
    for body in ("(append (list a) 1)", "(concat (list a) (list 1))", "`(1 ,a)", "(join (list 0) (list a) (list 1))"):
        source = f"(define (foo a) (foo {body})) (foo ())"
        assert limit_of(source, max_guest_memory=10_000, max_steps=10_000_000) == "guest memory", body


def test_a_shared_part_counts_each_time_it_occurs() -> None:
    # 2^n leaves reached through n doubly shared lists: tiny in host memory, huge as a tree
    source = "(define (f a n) (if (= n 0) 0 (f (list a a) (- n 1)))) (f 1 40)"
    assert limit_of(source) == "guest memory"


def test_strings_inside_a_list_count() -> None:
    source = '(let ((s (format "~100a" "x"))) (list s s s s s s s s s s s s))'
    assert limit_of(source, max_guest_memory=1_000) == "guest memory"
    assert len(run(source, max_guest_memory=2_000)) == 12


def test_nesting_within_the_limit_is_allowed() -> None:
    source = "(define (foo a n) (if (= n 0) (len a) (foo (list n a) (- n 1)))) (foo () 100)"
    assert run(source) == 2


def test_measuring_a_list_built_from_lists_is_constant_per_level() -> None:
    source = "(define (foo a n) (if (= n 0) 0 (foo (list n a) (- n 1)))) (foo () {n})"
    steps = []
    for n in (2_000, 4_000):
        interp = Interpreter(LispLimits(max_steps=10_000_000, max_call_stack=64))
        interp.run(source.format(n=n))
        steps.append(interp.steps_used())
    assert steps[1] < 2.2 * steps[0]


def test_a_list_not_built_in_this_run_is_measured_once() -> None:
    # a quoted constant is walked the first time it is wrapped, then remembered
    source = "(define (foo n) (if (= n 0) 0 (do (list '((1 2) (3 4)) n) (foo (- n 1))))) (foo 500)"
    assert run(source) == 0
