"""Typed bodies and fast loops change nothing but speed.

The compiler generates, besides the generic code, a typed copy of small functions
(tried when their integer parameters hold small ints) and an integer fast path for
self tail loops (see lisp/fast_loop.py). Turned off (``compiler.SPECIALISE``), only
the generic code runs: that is the reference. Random programs of arithmetic, ``let``,
``if``/``cond``/``and``/``or``/``not``, self tail calls and plain recursion, run on random
inputs (small and huge ints, floats, bools, texts) under random step budgets, must give
the same value or the same error (kind, message, Lisp stack) and use the same steps
either way. The adversarial cases below pin exhaustion at exactly the budget, overflow
at exactly the iteration that overflows, and fuel bounding deep recursion and growth.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from svit.lisp import compiler, interpreter
from svit.lisp.budget import Budget
from svit.lisp.context import LispLimits
from svit.lisp.errors import BudgetExhausted, LimitError, LispError
from svit.lisp.interpreter import Interpreter

PARAMS = ("a", "b", "c")
LITERALS = (0, 1, 2, 3, -1, -2, 7, 100, 2**30 - 2, 2**30, 2**62, 2**64 - 2, -(2**64 - 2))
INPUTS = st.one_of(
    st.integers(-5, 40),
    st.sampled_from([2**29, 2**30 - 2, 2**30 - 1, 2**30, -(2**30), 2**63, 2**64 - 3, -(2**64 - 3)]),
    st.sampled_from([1.5, -0.0, True, False, "s"]),
)


@pytest.fixture(autouse=True)
def fresh_compiles() -> Iterator[None]:
    """Compiled programs are cached by source: each mode must compile its own."""
    interpreter._compile_cache.clear()
    yield
    interpreter._compile_cache.clear()


def outcome(source: str, args: tuple[Any, ...], limits: LispLimits, specialise: bool) -> tuple[Any, ...]:
    """(value or error details, steps used), compiled with or without the specialised code."""
    interpreter._compile_cache.clear()
    saved = compiler.SPECIALISE
    compiler.SPECIALISE = specialise
    try:
        budget = Budget(limits.max_steps, 60_000)
        interp = Interpreter(limits, budget)
        try:
            # Compiled under a budget of its own: the specialised copies make more code,
            # and compiling costs steps for its size (the run's steps are what is compared).
            interp.run(source, compile_budget=Budget(10**9, 60_000))
            value = interp.call("f", *args)
            result: tuple[Any, ...] = ("value", type(value).__name__, value)
        except LispError as error:
            result = ("error", type(error).__name__, str(error), error.stack)
        return result, budget.used
    finally:
        compiler.SPECIALISE = saved


def same_both_ways(source: str, args: tuple[Any, ...], limits: LispLimits) -> tuple[Any, ...]:
    reference = outcome(source, args, limits, specialise=False)
    specialised = outcome(source, args, limits, specialise=True)
    assert specialised == reference, source
    return specialised


# ---------------------------------------------------------------- random programs


@st.composite
def expressions(draw: st.DrawFn, names: tuple[str, ...], depth: int) -> str:
    leaf = st.one_of(st.sampled_from(names), st.sampled_from(LITERALS).map(str))
    if depth <= 0:
        return draw(leaf)
    kind = draw(st.sampled_from(["leaf", "leaf", "arith", "arith", "step", "if", "let", "call"]))
    sub = expressions(names, depth - 1)
    if kind == "arith":
        return f"({draw(st.sampled_from('+-*'))} {draw(sub)} {draw(sub)})"
    if kind == "step":
        return f"({draw(st.sampled_from('+-'))} {draw(st.sampled_from(names))} {draw(st.sampled_from(['1', '2', '3']))})"
    if kind == "if":
        return f"(if {draw(conditions(names, depth - 1))} {draw(sub)} {draw(sub)})"
    if kind == "let":
        return f"(let ((x {draw(sub)})) {draw(expressions(names + ('x',), depth - 1))})"
    if kind == "call":  # plain (non-tail) recursion
        return f"(f {' '.join(draw(sub) for _ in PARAMS)})"
    return draw(leaf)


@st.composite
def conditions(draw: st.DrawFn, names: tuple[str, ...], depth: int) -> str:
    sub = expressions(names, max(depth - 1, 0))
    kind = draw(st.sampled_from(["compare", "compare", "compare", "not", "and", "or"]))
    if kind == "compare" or depth <= 0:
        return f"({draw(st.sampled_from(['=', '<', '>', '<=', '>=']))} {draw(sub)} {draw(sub)})"
    inner = conditions(names, depth - 1)
    if kind == "not":
        return f"(not {draw(inner)})"
    return f"({kind} {draw(inner)} {draw(inner)})"


@st.composite
def tails(draw: st.DrawFn, names: tuple[str, ...], depth: int) -> str:
    kind = draw(st.sampled_from(["if", "if", "cond", "let", "loop", "loop", "return"] if depth > 0 else ["loop", "return"]))
    if kind == "if":
        return f"(if {draw(conditions(names, 1))} {draw(tails(names, depth - 1))} {draw(tails(names, depth - 1))})"
    if kind == "cond":
        return (
            f"(cond ({draw(conditions(names, 1))} {draw(tails(names, depth - 1))}) "
            f"(else {draw(tails(names, depth - 1))}))"
        )
    if kind == "let":
        return f"(let ((x {draw(expressions(names, 1))})) {draw(tails(names + ('x',), depth - 1))})"
    if kind == "loop":
        # Mostly `p ± k` (the fast path's own case), sometimes anything.
        args = []
        for param in PARAMS:
            choice = draw(st.sampled_from(["same", "step", "step", "other", "any"]))
            if choice == "same":
                args.append(param)
            elif choice == "step":
                args.append(f"({draw(st.sampled_from('+-'))} {param} {draw(st.sampled_from(['1', '2', '5']))})")
            elif choice == "other":
                args.append(draw(st.sampled_from(names)))
            else:
                args.append(draw(expressions(names, 1)))
        return f"(f {' '.join(args)})"
    return draw(expressions(names, 2))


PROGRAMS = tails(PARAMS, 3).map(lambda body: f"(define (f {' '.join(PARAMS)}) {body})")
LIMITS = st.builds(
    LispLimits,
    max_steps=st.integers(1, 400),
    max_call_stack=st.sampled_from([4, 32]),
    max_integer_bits=st.sampled_from([64, 64, 40]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(PROGRAMS, st.tuples(INPUTS, INPUTS, INPUTS), LIMITS)
def test_random_programs_give_the_same_outcome_and_steps(source: str, args: tuple[Any, ...], limits: LispLimits) -> None:
    same_both_ways(source, args, limits)


BODIES = expressions(PARAMS, 4).map(lambda body: f"(define (f {' '.join(PARAMS)}) {body})")


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(BODIES, st.tuples(INPUTS, INPUTS, INPUTS), LIMITS)
def test_random_typed_bodies_give_the_same_outcome_and_steps(source: str, args: tuple[Any, ...], limits: LispLimits) -> None:
    # No tail loop here: plain recursion, nested arithmetic and lets in typed bodies.
    same_both_ways(source, args, limits)


@pytest.mark.parametrize("args", [(0, 0, 0), (5, 1, 2), (2**30 - 2, 0, 0), (1.5, 0, 0), (True, 0, 0)])
def test_a_computed_int_operand_is_evaluated_before_the_other_is_tested(args: tuple[Any, ...]) -> None:
    # (+ a a) is a known int in the typed body; the let beside it is not.
    same_both_ways("(define (f a b c) (+ (+ a a) (let ((x b)) (- x c))))", args, LispLimits(max_steps=10))
    same_both_ways("(define (f a b c) (< (let ((x b)) x) (* a 3)))", args, LispLimits(max_steps=10))


def test_a_loop_summing_a_parameter_keeps_its_overflow_test() -> None:
    source = "(define (f n acc) (if (= n 0) acc (f (- n 1) (+ acc n))))"
    result, used = same_both_ways(source, (10_000, 0), LispLimits(max_steps=20_000))
    assert result == ("value", "int", 50_005_000) and used == 10_001
    result, used = same_both_ways(source, (10, 2**64 - 30), LispLimits(max_steps=20_000))
    # 2**64 - 30 + 10 + 9 + 8 stays below 2**64; adding 7 in the fourth iteration does not.
    assert result[:2] == ("error", "LimitError") and used == 4


# ---------------------------------------------------------------- the fast paths are taken


def test_the_specialised_code_is_generated_for_the_benchmark_shapes() -> None:
    interp = Interpreter(LispLimits())
    interp.run("(define (loop n acc) (if (= n 0) acc (loop (- n 1) (+ acc 1))))"
               "(define (fib n) (if (< n 2) n (+ (fib (- n 1)) (fib (- n 2)))))")
    assert interp.compiled is not None
    source = interp.compiled.python_source
    assert "_f = _s" in source  # the loop's local fuel counter
    assert "v1_n - 1, v2_acc + 1" in source  # rebinding with no check
    assert f"-{compiler.TYPED_PARAM_BOUND} < " in source  # fib's typed body guard


def test_checked_arithmetic_tests_compact_results_first() -> None:
    # CPython 3.11 compares ints on its fast path only when both are below 2**30 in magnitude.
    interp = Interpreter(LispLimits())
    interp.run("(define (f a b) (+ a b))")
    assert interp.compiled is not None
    assert f"< {compiler.COMPACT_INT} and " in interp.compiled.python_source


@pytest.mark.parametrize("bits", [64, 40, 31, 30, 29, 20])
@pytest.mark.parametrize("op", ["+", "-", "*"])
def test_the_integer_bound_is_exact_around_the_compact_range(bits: int, op: str) -> None:
    # The compact test decides most results, the exact bound the rest: the verdict at and
    # next to 2**30 and 2**bits must be that of the bound alone, in every kind of body.
    bound = 2**bits
    apply = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}[op]
    edges = {2**30 - 1, 2**30, 2**30 + 1, bound - 1, bound, bound + 1}
    limits = LispLimits(max_steps=100, max_integer_bits=bits)
    sources = (
        f"(define (f a b) ({op} a b))",  # generic operands
        f"(define (f a b) (if (< a 5) ({op} a b) ({op} (* a 1) (* b 1))))",  # typed operands
    )
    for target in edges:
        for sign in (1, -1):
            want = sign * target
            a = {"+": want - 7, "-": want + 7, "*": want}[op]
            b = {"+": 7, "-": 7, "*": 1}[op]
            if op == "*" and abs(a) >= bound:
                continue  # an operand that big cannot be passed in
            if abs(a) >= bound:
                continue
            assert apply(a, b) == want
            for source in sources:
                result, _used = same_both_ways(source, (a, b), limits)
                if abs(want) >= bound:
                    assert result[:2] == ("error", "LimitError"), (source, a, b)
                else:
                    assert result == ("value", "int", want), (source, a, b)


# ---------------------------------------------------------------- adversarial cases

LOOP = "(define (f n acc) (if (= n 0) acc (f (- n 1) (+ acc 1))))"


@pytest.mark.parametrize("max_steps", [1, 2, 3, 1023, 1024, 1025, 5_000])
def test_a_fast_loop_stops_at_exactly_the_budget(max_steps: int) -> None:
    result, used = same_both_ways(LOOP, (10**9, 0), LispLimits(max_steps=max_steps))
    assert result[1] == "BudgetExhausted"
    assert used == max_steps


def test_a_fast_loop_that_finishes_charges_one_step_per_iteration() -> None:
    result, used = same_both_ways(LOOP, (10_000, 5), LispLimits(max_steps=20_000))
    assert result == ("value", "int", 10_005)
    assert used == 10_001


@pytest.mark.parametrize("start", [2**64 - 50, 2**64 - 1_000_001, 2**64 - 10**9])
def test_an_accumulator_near_the_integer_bound_overflows_at_the_same_iteration(start: int) -> None:
    # Too close to the bound for the fast path's guard: the generic loop runs it, and
    # the overflow is reported where and when the generic loop reports it.
    result, used = same_both_ways(LOOP, (10**6, start), LispLimits(max_steps=2_000_000))
    if start + 10**6 >= 2**64:
        assert result[:2] == ("error", "LimitError")
        assert used == 2**64 - start
    else:
        assert result == ("value", "int", start + 10**6)


def test_a_huge_budget_turns_the_fast_loop_off_instead_of_risking_overflow() -> None:
    # With 2**63 steps a loop could step past 2**64: the guard refuses, the generic loop runs.
    limits = LispLimits(max_steps=2**63)
    budget = Budget(limits.max_steps, 60_000)
    interp = Interpreter(limits, budget)
    interp.run("(define (f n acc) (if (= n 0) acc (f (- n 1) (+ acc 2))))")
    assert interp.call("f", 1000, 2**64 - 3000) == 2**64 - 1000
    with pytest.raises(LimitError) as caught:
        interp.call("f", 1000, 2**64 - 1000)
    assert caught.value.limit == "integer bits"


def test_a_deoptimising_loop_still_counts_each_iteration_once() -> None:
    # Every other iteration leaves the fast path (a float); the steps are those of the generic loop.
    source = "(define (f n acc) (if (= n 0) acc (if (> n 500) (f (- n 1) acc) (f (- n 1) (+ acc 0.5)))))"
    result, used = same_both_ways(source, (1_000, 0), LispLimits(max_steps=5_000))
    assert result == ("value", "float", 250.0)
    assert used == 1_001


def test_fuel_bounds_deep_non_tail_recursion_in_a_typed_body() -> None:
    source = "(define (f n) (if (= n 0) 0 (+ 1 (f (- n 1)))))"
    result, used = same_both_ways(source, (10**6,), LispLimits(max_steps=50, max_call_stack=4_096))
    assert result[1] == "BudgetExhausted"
    assert used == 50
    result, _used = same_both_ways(source, (10**6,), LispLimits(max_steps=10**6, max_call_stack=64))
    assert result[1] == "LimitError" and "call stack" in result[2]


def test_fuel_bounds_big_integer_growth() -> None:
    # Doubling in a typed body and in a loop: the overflow check stops both at 64 bits.
    grow = "(define (f x) (if (> x 0) (f (* x 2)) x))"
    result, used = same_both_ways(grow, (3,), LispLimits(max_steps=1_000))
    # Calls with x = 3 * 2**k for k = 0..62; the last computes 3 * 2**63, past 64 bits.
    assert result[:2] == ("error", "LimitError") and used == 63
    exploding = "(define (f x k) (if (= k 0) x (f (* x x) (- k 1))))"
    result, _used = same_both_ways(exploding, (3, 100), LispLimits(max_steps=1_000))
    assert result[:2] == ("error", "LimitError")


@pytest.mark.parametrize("factor", [15, 16, 17, 100])
def test_a_typed_body_checks_overflow_its_bounds_do_not_exclude(factor: int) -> None:
    # a < 2**30 - 1, so a * a < 2**60 needs no check, but a * a * factor may pass 2**64.
    source = f"(define (f a) (* (* a a) {factor}))"
    for a in (2**30 - 2, -(2**30 - 2), 2**29, 12345):
        result, _used = same_both_ways(source, (a,), LispLimits(max_steps=100))
        if (a * a * factor).bit_length() > 64:
            assert result[:2] == ("error", "LimitError")
        else:
            assert result == ("value", "int", a * a * factor)


LOWER = ["(> n {-K})", "(>= n {1 - K})", "(< {-K} n)", "(not (<= n {-K}))", "(not (< n {1 - K}))", "(<= {1 - K} n)"]
UPPER = ["(< n {K})", "(<= n {K - 1})", "(> {K} n)", "(not (>= n {K}))", "(not (> n {K - 1}))", "(>= {K - 1} n)"]


@pytest.mark.parametrize("K", [2**20 - 1, 2**20, 2**20 + 1])
@pytest.mark.parametrize("test", LOWER + UPPER)
def test_conditions_narrow_intervals_by_exactly_what_they_prove(K: int, test: str) -> None:
    # Under 40 bits, n * n overflows from |n| = 2**20. Within |n| < K the typed body leaves
    # the overflow test out when K <= 2**20 and must keep it when K = 2**20 + 1: an interval
    # narrowed by one too many, or the wrong way, would let 2**20 * 2**20 through.
    test = test.replace("{-K}", str(-K)).replace("{1 - K}", str(1 - K)).replace("{K}", str(K)).replace("{K - 1}", str(K - 1))
    upper = test in [u.replace("{K}", str(K)).replace("{K - 1}", str(K - 1)) for u in UPPER]
    anchor = "(>= n 0)" if upper else "(<= n 0)"  # the other side, tight
    limits = LispLimits(max_steps=100, max_integer_bits=40)
    for n in (K - 1, K, K + 1, 1 - K, -K, -K - 1, 0):
        inside = (0 <= n <= K - 1) if upper else (1 - K <= n <= 0)
        square = ("error", "LimitError") if (n * n).bit_length() > 40 else ("value", "int", n * n)
        on_anchor = n >= 0 if upper else n <= 0
        for source, want in (
            (f"(define (f n) (if {anchor} (if {test} (* n n) 0) 0))", square if inside else ("value", "int", 0)),
            (f"(define (f n) (cond ((not {anchor}) 0) ((not {test}) 0) (else (* n n))))", square if inside else ("value", "int", 0)),
            (f"(define (f n) (if {test} (if {anchor} (* n n) 0) 0))", square if inside else ("value", "int", 0)),
            # Where the test fails: an interval narrowed the wrong way would prove too much.
            (f"(define (f n) (if {anchor} (if {test} 0 (* n n)) 0))", square if on_anchor and not inside else ("value", "int", 0)),
        ):
            result, _used = same_both_ways(source, (n,), limits)
            assert result[: len(want)] == want, (source, n)


def test_a_loop_over_non_integers_is_unchanged() -> None:
    source = "(define (f n acc) (if (< n 1) acc (f (- n 1) (+ acc n))))"
    for args in [(10, 0), (10.5, 0), (10, 0.25), (True, 0), ("x", 0), (10, "y")]:
        same_both_ways(source, args, LispLimits(max_steps=1_000))


def test_errors_inside_a_typed_body_keep_their_positions_and_stack() -> None:
    source = "(define (f n)\n  (if (< n 1)\n      (+ n \"x\")\n      (+ 1 (f (- n 1)))))"
    result, _used = same_both_ways(source, (3,), LispLimits(max_steps=1_000))
    assert result[:2] == ("error", "EvalError")
    stack = result[3]
    assert len(stack) == 4 and stack[-1].line == 3


def test_exhaustion_inside_a_loop_reports_the_same_stack() -> None:
    source = "(define (g n) (f n 0))\n(define (f n acc)\n  (if (= n 0) acc (f (- n 1) (+ acc 1))))"
    result, used = same_both_ways(source, (10**6, 0), LispLimits(max_steps=777))
    assert result[1] == "BudgetExhausted" and used == 777
    assert [frame.function for frame in result[3]] == ["f"]


def test_a_budget_shared_with_a_host_function_stays_exact() -> None:
    # The loop's local fuel counter is written back before the host function runs.
    budget = Budget(10_000, 60_000)
    interp = Interpreter(LispLimits(), budget)
    calls: list[int] = []
    interp.define_function("note", lambda n: calls.append(n) or n, 1, 1)
    interp.run("(define (f n) (if (= n 0) (note n) (f (- n 1))))")
    used_before = budget.used
    assert interp.call("f", 100) == 0
    assert calls == [0]
    assert budget.used - used_before == 101 + 1  # 101 iterations, one host call
    with pytest.raises(BudgetExhausted):
        interp.call("f", 10**7)
    assert budget.remaining == 0


# ---------------------------------------------------------------- typed entries

FIB = "(define (fib n) (if (< n 2) n (+ (fib (- n 1)) (fib (- n 2)))))"


def test_a_function_calling_only_itself_gets_a_typed_entry() -> None:
    interp = Interpreter(LispLimits())
    interp.run(FIB)
    assert interp.compiled is not None
    source = interp.compiled.python_source
    assert source.count("def g_fib(") == 3  # the ranked copy, the typed entry and the function
    assert "_typed" in source and "_ranked" in source and "_self_get('g_fib') is _self" in source
    assert interp.call("fib", 20) == 6765


@pytest.mark.parametrize("n", [0, 1, 2, 15, 2**30 - 2, -3, 1.5, True, "x"])
def test_a_typed_entry_gives_the_same_outcome_and_steps(n: Any) -> None:
    same_both_ways(FIB.replace("fib", "f"), (n,), LispLimits(max_steps=5_000, max_call_stack=64))


def test_a_typed_entry_overflows_where_the_generic_code_does() -> None:
    source = "(define (f n) (if (< n 1) 1 (* 3 (f (- n 1)))))"
    result, used = same_both_ways(source, (60,), LispLimits(max_steps=5_000, max_call_stack=128))
    assert result[:2] == ("error", "LimitError")  # 3**41 passes 64 bits
    assert [frame.function for frame in result[3]].count("f") == len(result[3]) > 1
    assert used == 61


def test_a_redefined_function_is_called_late_bound_not_through_its_typed_entry() -> None:
    interp = Interpreter(LispLimits())
    interp.run(FIB)
    assert interp.call("fib", 10) == 55
    interp.run("(define (fib n) (* n 100))")
    assert interp.call("fib", 10) == 1000
    # The old function, kept as a value, calls whatever `fib` names now.
    interp.run(FIB.replace("(define (fib n)", "(define (old n)").replace("(fib (-", "(fib (-"))
    assert interp.call("old", 10) == 900 + 800


def runs_in_one_namespace(sources: list[str], call: str, specialise: bool) -> tuple[Any, ...]:
    """The outcome of ``call`` after running ``sources`` one after another in one namespace."""
    interpreter._compile_cache.clear()
    saved = compiler.SPECIALISE
    compiler.SPECIALISE = specialise
    try:
        interp = Interpreter(LispLimits())
        for source in sources:
            interp.run(source)
        try:
            return ("value", interp.run(call))
        except LispError as error:
            return ("error", type(error).__name__, str(error))
    finally:
        compiler.SPECIALISE = saved


@pytest.mark.parametrize("call", ['(old 2 "xyz")', "(old 2 (list 1 2))", "(old 3 4)"])
def test_a_later_program_cannot_replace_the_typed_entry_of_an_earlier_one(call: str) -> None:
    # Two programs of the same shape number their generated globals alike. The old `f`,
    # kept as a value, types only `a`; the new `f` types `a` and `b`. The old function's
    # self calls must reach its own typed entry (or none), never the new one, which would
    # run Python `+` on a text or a list with no type test.
    first = "(define (f a b) (if (< a 1) 0 (+ 1 (f (- a 1) b)))) (define old f)"
    second = "(define (f a b) (if (< a 1) 0 (+ b (f (- a 1) b))))"
    specialised = runs_in_one_namespace([first, second], call, specialise=True)
    assert specialised == runs_in_one_namespace([first, second], call, specialise=False)


@pytest.mark.parametrize("specialise", [False, True])
def test_a_closure_made_by_an_earlier_program_is_its_own(specialise: bool) -> None:
    # Closures are made by module-level factories, numbered per program: the second
    # program's factory must not replace the one the first program's `mk` calls.
    first = "(define (mk x) (lambda () x)) (define old mk)"
    second = "(define (mk2 y) (lambda () (+ y 100)))"
    assert runs_in_one_namespace([first, second], "((old 1))", specialise) == ("value", 1)


@pytest.mark.parametrize("specialise", [False, True])
def test_a_function_whose_name_the_host_replaced_fails_where_it_calls_it(specialise: bool) -> None:
    # The host installs a function of the same name: until a run names it, the global is
    # unbound. The old function, kept as a value, fails only where it calls `fib`.
    saved = compiler.SPECIALISE
    compiler.SPECIALISE = specialise
    try:
        interp = Interpreter(LispLimits())
        interp.run(FIB + " (define keep fib)")
        interp.define_function("fib", lambda n: n, 1, 1)
        old = interp.globals["g_keep"]
        with interp._guard(interp.compiled):
            assert old(1, 1) == 1  # no call of fib on this path
        with pytest.raises(LispError) as caught:
            with interp._guard(interp.compiled):
                old(1, 5)
        assert "unbound name `fib`" in str(caught.value)
    finally:
        compiler.SPECIALISE = saved


def test_a_function_that_calls_other_guest_code_gets_no_typed_entry() -> None:
    interp = Interpreter(LispLimits())
    interp.run("(define (g n) n) (define (f n) (if (< n 2) (g n) (+ (f (- n 1)) (f (- n 2)))))")
    assert interp.compiled is not None
    assert "_typed" not in interp.compiled.python_source


@pytest.mark.parametrize("offset", [-129, -128, -64, -1, 0, 1, 64, 127, 128, 129])
def test_typed_entries_take_no_guest_memory(offset: int) -> None:
    # The typed entry is a second function object: the guest is not charged for it, so
    # the memory limit is reached at exactly the same size either way.
    source = FIB.replace("fib", "f") + " (define (g k) (range k)) (define xs (g 2000))"
    base = LispLimits(max_guest_memory=16_257 + offset)  # 16_257: the least that runs it
    outcomes = []
    for specialise in (False, True):
        interpreter._compile_cache.clear()
        saved = compiler.SPECIALISE
        compiler.SPECIALISE = specialise
        try:
            interp = Interpreter(base, Budget(base.max_steps, 60_000))
            try:
                interp.run(source, compile_budget=Budget(10**9, 60_000))
                outcomes.append("ran")
            except LispError as error:
                outcomes.append(str(error))
        finally:
            compiler.SPECIALISE = saved
    assert outcomes[0] == outcomes[1]
    assert (outcomes[0] == "ran") == (offset >= 0)


# ---------------------------------------------------------------- ranked copies


def counting_ranked_runs(interp: Interpreter) -> dict[str, int]:
    """Count the ranked copies started (``mark``) and stopped by an error (``rewind``)."""
    counts = {"mark": 0, "rewind": 0}
    mark, rewind = interp.globals["_fuel_mark"], interp.globals["_fuel_rewind"]

    def counted_mark() -> None:
        counts["mark"] += 1
        mark()

    def counted_rewind() -> None:
        counts["rewind"] += 1
        rewind()

    interp.globals["_fuel_mark"], interp.globals["_fuel_rewind"] = counted_mark, counted_rewind
    return counts


def ranked_run(source: str, args: tuple[Any, ...], limits: LispLimits) -> tuple[Any, dict[str, int]]:
    """The outcome of ``f`` (specialised) and how its ranked copy ran."""
    interpreter._compile_cache.clear()
    interp = Interpreter(limits, Budget(limits.max_steps, 60_000))
    interp.run(source, compile_budget=Budget(10**9, 60_000))
    counts = counting_ranked_runs(interp)
    try:
        return ("value", interp.call("f", *args)), counts
    except LispError as error:
        return ("error", str(error)), counts


def test_fib_runs_its_ranked_copy_and_charges_the_same_steps() -> None:
    interp = Interpreter(LispLimits(max_steps=10**6), Budget(10**6, 60_000))
    interp.run(FIB)
    assert interp.compiled is not None and "_ranked" in interp.compiled.python_source
    counts = counting_ranked_runs(interp)
    before = interp.budget.used
    assert interp.call("fib", 20) == 6765
    assert counts == {"mark": 1, "rewind": 0}
    assert interp.budget.used - before == 21_891  # one step per call: 2 * fib(21) - 1


@pytest.mark.parametrize(
    ("source", "max_call_stack"),
    [
        ("(define (f n) (if (< n 1) 0 (+ 1 (f (- n 1)))))", 6),
        ("(define (f n) (if (< n 1) 0 (+ 1 (f (- n 1)))))", 32),
        ("(define (f n) (if (>= n 3) (+ 1 (f (- n 3))) n))", 32),
        ("(define (f n) (if (< n 2) n (+ (f (- n 1)) (f (- n 2)))))", 6),
        ("(define (f n) (if (< n 2) n (+ (f (- n 1)) (f (- n 2)))))", 12),
        ("(define (f n) (if (<= n -5) 0 (+ 1 (f (- n 2)))))", 32),
    ],
)
def test_a_ranked_copy_runs_exactly_up_to_the_call_stack_limit(source: str, max_call_stack: int) -> None:
    # The ranking bound is tight: the deepest input that fits runs the ranked copy (and
    # needs no error to stop it); one deeper leaves it to the typed body, which fails
    # with the same error at the same depth as the generic code.
    limits = LispLimits(max_steps=100_000, max_call_stack=max_call_stack)
    deepest = None
    for n in range(-8, 3 * max_call_stack + 8):
        result, _used = same_both_ways(source, (n,), limits)
        if result[0] == "value":
            deepest = n
        else:
            assert result[:2] == ("error", "LimitError") and "call stack" in result[2]
            break
    assert deepest is not None
    outcome_, counts = ranked_run(source, (deepest,), limits)
    assert outcome_[0] == "value" and counts == {"mark": 1, "rewind": 0}
    outcome_, counts = ranked_run(source, (deepest + 1,), limits)
    assert outcome_[0] == "error" and "call stack" in outcome_[1] and counts["rewind"] == 0


def test_a_ranked_copy_keeps_the_value_stack_limit() -> None:
    # Three parameters and a let per frame: the depth argument tracks the values held,
    # and the value stack runs out long before the call depth.
    source = "(define (f n a b) (if (< n 1) (+ a 1) (let ((x (f (- n 1) a b))) (+ x b))))"
    limits = LispLimits(max_steps=10_000, max_call_stack=64, max_value_stack=64)
    deepest = -1
    for n in range(40):
        result, _used = same_both_ways(source, (n, 1, 2), limits)
        if result[0] == "error":
            assert result[:2] == ("error", "LimitError") and "value stack" in result[2]
            break
        assert result == ("value", "int", 2 + 2 * n)
        deepest = n
    assert 0 < deepest < 30
    outcome_, counts = ranked_run(source, (deepest, 1, 2), limits)
    assert outcome_[0] == "value" and counts == {"mark": 1, "rewind": 0}
    outcome_, counts = ranked_run(source, (deepest + 1, 1, 2), limits)
    assert "value stack" in outcome_[1] and counts["rewind"] == 0


FIB_STEPS_15 = 1_973  # 2 * fib(16) - 1 calls


@pytest.mark.parametrize("max_steps", [1, 2, 3, 4, 5, 17, 100, 1_023, 1_024, 1_025, 1_500, 1_972, 1_973, 1_974])
def test_a_ranked_copy_stops_at_exactly_the_budget(max_steps: int) -> None:
    # The ranked copy charges a statement's calls before it, ahead of the typed body; a run
    # that exhausts the budget is run again by the typed body from the same fuel.
    result, used = same_both_ways(FIB.replace("fib", "f"), (15,), LispLimits(max_steps=max_steps))
    if max_steps < FIB_STEPS_15:
        assert result[1] == "BudgetExhausted" and used == max_steps
        assert len(result[3]) > 1  # the Lisp stack at the call that ran out
    else:
        assert result == ("value", "int", 610) and used == FIB_STEPS_15
    outcome_, counts = ranked_run(FIB.replace("fib", "f"), (15,), LispLimits(max_steps=max_steps))
    assert counts == {"mark": 1, "rewind": 1 if max_steps < FIB_STEPS_15 else 0}


def test_a_ranked_copy_overflows_where_the_generic_code_does() -> None:
    source = "(define (f n) (if (< n 2) n (+ (f (- n 1)) (* 100 (f (- n 2))))))"
    limits = LispLimits(max_steps=100_000, max_integer_bits=20)
    values = []
    for n in range(12):
        result, _used = same_both_ways(source, (n,), limits)
        values.append(result)
    assert values[3] == ("value", "int", 101)
    assert values[-1][:2] == ("error", "LimitError")
    outcome_, counts = ranked_run(source, (11,), limits)
    assert "integer bits" in outcome_[1] and counts == {"mark": 1, "rewind": 1}


CONDITIONAL = [
    "(define (f n b) (if (< n 1) (+ b 1)"
    " (if (and (> n 3) (< (f (- n 3) b) 5)) (let ((x (f (- n 1) b))) (+ x 1)) (* 2 (f (- n 2) b)))))",
    "(define (f n b) (if (< n 1) (+ b 1)"
    " (if (or (< n 3) (< (f (- n 3) b) 5) (= b 7)) (+ 1 (f (- n 1) b)) (* 2 (f (- n 2) b)))))",
]


@pytest.mark.parametrize("max_steps", [*range(1, 40), 100, 500, 1_000, 10_000])
@pytest.mark.parametrize("n", [6, 12])
@pytest.mark.parametrize("source", CONDITIONAL)
def test_a_self_call_that_may_not_run_is_charged_when_it_runs(source: str, max_steps: int, n: int) -> None:
    # The calls in the `and` and `or` run only when the tests before them let them: they are
    # charged when their operand runs, the others with their statement (or with the branch
    # of a call written out). Every budget gives the generic code's outcome.
    interp = Interpreter(LispLimits())
    interp.run(source)
    assert interp.compiled is not None and "or _tick() or True" in interp.compiled.python_source
    result, used = same_both_ways(source, (n, 1), LispLimits(max_steps=max_steps))
    if result[0] == "value":
        _outcome, counts = ranked_run(source, (n, 1), LispLimits(max_steps=max_steps))
        assert counts == {"mark": 1, "rewind": 0}


@pytest.mark.parametrize(
    "source",
    [
        "(define (f n) (if (< n 1) 0 (+ 1 (f n))))",  # no decrease
        "(define (f n) (if (< n 1) 0 (+ 1 (f (+ n -1)))))",  # not written (- n c)
        "(define (f n) (if (< n 1) 0 (+ (f (- n 1)) (f (- n 0)))))",  # one call steps by 0
        "(define (f n m) (if (< m 1) (+ n 0) (+ 1 (f (- m 1) (+ n 0)))))",  # m steps down into n's place
    ],
)
def test_no_ranked_copy_without_a_proved_bound(source: str) -> None:
    # A typed entry, but no parameter every self call steps down.
    interp = Interpreter(LispLimits())
    interp.run(source)
    assert interp.compiled is not None
    assert "_typed" in interp.compiled.python_source and "_ranked" not in interp.compiled.python_source


@st.composite
def ranked_calls(draw: st.DrawFn, depth: int) -> str:
    """An integer expression of self calls, mostly stepping ``a`` down."""
    kind = draw(st.sampled_from(["call", "call", "call", "arith", "arith", "let", "leaf"] if depth > 0 else ["call", "leaf"]))
    sub = ranked_calls(depth - 1)
    if kind == "call":
        first = draw(st.sampled_from(["(- a 1)", "(- a 1)", "(- a 1)", "(- a 2)", "(- a 2)", "(- a 3)", "(- a 1)", "a", "(+ a 1)", "b"]))
        rest = [draw(st.sampled_from(["b", "c", "0", "1", "(- a 1)"])) for _ in PARAMS[1:]]
        return f"(f {first} {' '.join(rest)})"
    if kind == "arith":
        return f"({draw(st.sampled_from('+-*'))} {draw(sub)} {draw(sub)})"
    if kind == "let":
        return f"(let ((x {draw(sub)})) (+ x {draw(sub)}))"
    return draw(st.sampled_from(["a", "b", "c", "1", "2"]))


@st.composite
def ranked_tails(draw: st.DrawFn, depth: int) -> str:
    """A tail that returns integers, with self calls in tests that may not run."""
    kind = draw(st.sampled_from(["return", "if", "if", "let"] if depth > 0 else ["return"]))
    sub, tail = ranked_calls(2), ranked_tails(depth - 1)
    if kind == "if":
        test = draw(st.sampled_from([
            "(< {0} 3)", "(and (> a 3) (< {0} 5))", "(or (= b 1) (> {0} 0))", "(not (< {0} 2))", "(and (< {0} 9) (> {0} 2))", "(or (= b 1) (> {0} 0) (< a 2))",
        ])).format(draw(sub))
        return f"(if {test} {draw(tail)} {draw(tail)})"
    if kind == "let":
        return f"(let ((y {draw(sub)})) (+ y {draw(tail)}))"
    return f"(+ {draw(sub)} 0)"  # not a tail call (that would make a loop)


@st.composite
def ranked_programs(draw: st.DrawFn) -> str:
    k = draw(st.integers(-3, 3))
    guard = draw(st.sampled_from([
        f"(< a {k})", f"(<= a {k})", f"(> {k} a)", f"(not (>= a {k}))",  # where it fails, a >= k (or k + 1)
        f"(= a {k})", f"(< b {k})",  # prove nothing of a
    ]))
    base = draw(st.sampled_from(["a", "1", "(+ b c)", "(- a 1)"]))
    recursive = draw(ranked_tails(2))
    if draw(st.booleans()):
        body = f"(if {guard} {base} {recursive})"
    else:
        body = f"(if (not {guard}) {recursive} {base})"
    return f"(define (f {' '.join(PARAMS)}) {body})"


RANKED_LIMITS = st.builds(
    LispLimits,
    max_steps=st.one_of(st.integers(1, 60), st.integers(1, 2_000)),
    max_call_stack=st.sampled_from([4, 8, 32, 32]),
    max_value_stack=st.sampled_from([4_096, 40]),
    max_integer_bits=st.sampled_from([64, 20]),
)
RANKED_INPUTS = st.one_of(st.integers(-4, 12), st.integers(-4, 12), st.sampled_from([2**30 - 2, 2**19, 30, 1.5, "s"]))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(ranked_programs(), st.tuples(RANKED_INPUTS, st.integers(-3, 5), st.integers(-3, 5)), RANKED_LIMITS)
def test_random_ranked_recursion_gives_the_same_outcome_and_steps(source: str, args: tuple[Any, ...], limits: LispLimits) -> None:
    # Decreasing self recursion, with guards that prove a bound and guards that do not,
    # calls that may not run, overflow, exhaustion and both stack limits.
    same_both_ways(source, args, limits)
