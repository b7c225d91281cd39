"""Runaway work, memory blow-ups and budget escapes in the Lisp engine.

Each test pins one way a guest could get work done without paying for it: work it
can trigger without the step budget (or the wall-clock backstop) ever being consulted,
memory built before the limit is checked, or compile-time values that escape the
run's budget.
"""

from __future__ import annotations

import time
import tracemalloc

import pytest

from svit.lisp.budget import Budget
from svit.lisp.context import LispLimits
from svit.lisp.errors import BudgetExhausted, CompileError, LimitError, LispError
from svit.lisp.interpreter import Interpreter, evaluate
from svit.lisp.values import Foreign


def run(source: str, **limits: int):
    limits.setdefault("max_execution_millis", 60_000)
    return evaluate(source, LispLimits(**limits))


def interp(**limits: int) -> Interpreter:
    limits.setdefault("max_execution_millis", 60_000)
    lim = LispLimits(**limits)
    return Interpreter(lim, Budget(lim.max_steps, lim.max_execution_millis))


# --- format -----------------------------------------------------------------------


def test_format_backward_jump_in_iteration_is_stopped_by_steps() -> None:
    # ~[ picks a clause by argument; clause 1 jumps back two arguments: 0 -> 1 -> 0 -> ...
    # This used to loop forever without ever consulting the budget or the clock.
    with pytest.raises(BudgetExhausted) as caught:
        run('(format "~@{~[~;~2:*~]~}" 0 1)', max_steps=10_000)
    assert caught.value.what == "steps"


def test_format_iteration_over_shared_lists_charges_steps() -> None:
    # 100 x 100 x 100 iterations that emit nothing, over a list shared at every level.
    source = """
    (define (rep n x acc) (if (= n 0) acc (rep (- n 1) x (append acc x))))
    (define a (rep 100 0 ()))
    (define b (rep 100 a ()))
    (define c (rep 100 b ()))
    (format "~{~{~{~*~}~}~}" c)
    """
    with pytest.raises(BudgetExhausted):
        run(source, max_steps=20_000)


def test_format_string_parsing_is_charged() -> None:
    # "~<newline>" directives produce no output and no directive, but parsing them is work.
    it = interp(max_steps=20_000)
    it.define_value("fmt", "~\n" * 200_000)
    with pytest.raises(BudgetExhausted):
        it.run("(define (f n) (if (= n 0) 0 (do (format fmt) (f (- n 1))))) (f 100)")


def test_format_tabulate_is_not_quadratic() -> None:
    it = interp(max_steps=10_000_000)
    it.define_value("fmt", "~t" * 200_000)
    started = time.monotonic()
    assert len(it.run("(format fmt)")) == 200_000
    assert time.monotonic() - started < 5


def test_format_column_after_case_conversion() -> None:
    assert run('(format "~(AB~%CD~)~5tx")') == "ab\ncd   x"
    assert run('(format "~:@(ß~)~5tx")') == "SS   x"


def test_format_digit_grouping_is_not_quadratic() -> None:
    it = interp(max_steps=10_000_000, max_integer_bits=4096)
    it.define_value("nums", tuple([(1 << 4096) - 1] * 900))
    started = time.monotonic()
    text = it.run("(format \"~{~,,'-,1:b~}\" nums)")
    assert len(text) == 900 * (4096 + 4095)
    assert time.monotonic() - started < 1.5


def test_format_digit_grouping_matches_reference() -> None:
    assert run('(format "~:d" 1234567)') == "1,234,567"
    assert run('(format "~:d" 123)') == "123"
    assert run("(format \"~,,'.,2:d\" -12345)") == "-1.23.45"


# --- quasiquote, concat, chars ---------------------------------------------------------


def test_quasiquote_many_splices_refused_before_building() -> None:
    it = interp(max_steps=10_000_000)
    it.define_value("z", tuple(range(100_000)))
    source = "`(" + " ,@z" * 300 + ")"
    started = time.monotonic()
    with pytest.raises(LimitError) as caught:
        it.run(source)
    assert caught.value.limit == "guest memory"
    assert time.monotonic() - started < 2


def test_quasiquote_splices_still_work() -> None:
    assert run("(let ((x (list 1 2))) `(0 ,@x ,@() ,(+ 1 2) ,@x))") == (0, 1, 2, 3, 1, 2)


def test_path_concat_refused_before_building() -> None:
    it = interp(max_steps=10_000_000)
    it.define_value("p", "a" * 20_000)
    tracemalloc.start()
    try:
        with pytest.raises(LimitError) as caught:
            it.run("(let ((q (path p))) (apply concat (list " + "q " * 1000 + ")))")
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.limit == "guest memory"
    assert peak < 40_000_000


def test_path_concat_still_joins() -> None:
    assert run('(concat #p"a" #p"b/" #p"c")') == run('#p"a/b/c"')
    assert run('(concat #p"a" #p"/b")') == run('#p"/b"')


def test_chars_refused_before_building() -> None:
    it = interp(max_steps=10_000_000)
    it.define_value("s", "x" * 2_000_000)
    tracemalloc.start()
    try:
        with pytest.raises(LimitError):
            it.run("(chars s)")
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 40_000_000


# --- O(n) scans of existing strings ------------------------------------------------------


def test_len_of_non_ascii_string_charges_steps() -> None:
    it = interp(max_steps=50_000)
    it.define_value("s", "é" * 1_000_000)
    with pytest.raises(BudgetExhausted):
        it.run("(define (f n) (if (= n 0) 0 (do (len s) (f (- n 1))))) (f 1000)")


def test_slice_of_non_ascii_string_charges_steps() -> None:
    it = interp(max_steps=50_000)
    it.define_value("s", "é" * 1_000_000)
    with pytest.raises(BudgetExhausted):
        it.run("(define (f n) (if (= n 0) 0 (do (slice s 0 2) (f (- n 1))))) (f 1000)")


def test_comparing_long_strings_charges_steps() -> None:
    it = interp(max_steps=200_000)
    it.define_value("a", tuple(["x" * 1_000_000] * 1000))
    it.define_value("b", tuple(["x" * 999_999 + "x"] * 1000))
    with pytest.raises(BudgetExhausted):
        it.run("(= a b)")
    it = interp(max_steps=200_000)
    it.define_value("a", tuple(["x" * 1_000_000] * 1000))
    it.define_value("b", tuple(["x" * 999_999 + "x"] * 1000))
    with pytest.raises(BudgetExhausted):
        it.run("(<= a b)")


class _Opaque(Foreign):
    __slots__ = ()


def test_error_rendering_of_huge_value_is_cut_before_escaping() -> None:
    # `eq` swallows the type error whose message renders the other operand.
    it = interp(max_steps=1_000_000)
    it.define_value("big", "\u0001" * 2_000_000)
    it.define_value("h", _Opaque())
    started = time.monotonic()
    assert it.run("(define (f n) (if (= n 0) true (and (not (eq h big)) (f (- n 1))))) (f 20)") is True
    assert time.monotonic() - started < 2


# --- compile time -------------------------------------------------------------------------


_SMUGGLE = """
(const loop (lambda (f n) (if (= n 0) 0 (f f (- n 1)))))
(define (drive n) (if (= n 0) 0 (do (loop loop 50) (drive (- n 1)))))
(define (main) (drive 200))
"""


def test_const_closure_cannot_escape_to_run_time() -> None:
    # A closure built at compile time runs on the compile-time helper's budget (and its
    # stale deadline, shared through the compile cache): it must not reach run time.
    with pytest.raises(CompileError):
        interp(max_steps=5_000).run(_SMUGGLE)


def test_macro_closure_cannot_escape_to_run_time() -> None:
    source = "(macro (mk) (lambda (x) x)) (define f (mk)) (f 1)"
    with pytest.raises(CompileError):
        run(source)


def test_compile_time_values_may_hold_system_functions() -> None:
    assert run("(const add +) (add 1 2)") == 3
    assert run("(const fs (list + -)) ((first fs) 1 2)") == 3


def test_compile_time_work_shares_one_budget() -> None:
    burn = "(let ((f (lambda (f n) (if (= n 0) 0 (f f (- n 1)))))) (f f 50))"
    source = "".join(f"(const c{i} {burn})" for i in range(100)) + " 1"
    with pytest.raises(BudgetExhausted):
        run(source, max_steps=1_000)


def test_same_program_stops_at_same_step_every_run() -> None:
    source = "(define (spin n) (if (= n 0) 0 (spin (- n 1)))) (spin 100000)"
    used = []
    for _ in range(3):
        it = interp(max_steps=5_000)
        with pytest.raises(BudgetExhausted):
            it.run(source)
        used.append(it.steps_used())
    assert used == [5_000, 5_000, 5_000]


def test_deep_but_allowed_nesting_is_not_an_internal_error() -> None:
    source = "(+ 1 " * 150 + "1" + ")" * 150
    try:
        assert run(source, max_syntax_depth=1024) == 151
    except LispError as exc:
        assert isinstance(exc, LimitError) and exc.limit == "syntax depth"
