"""Run-time errors name the line (and column) of the Lisp form that failed, in every frame."""

from __future__ import annotations

import pytest

from svit.lisp.context import LispLimits
from svit.lisp.errors import BudgetExhausted, EvalError, Frame, LimitError, LispError
from svit.lisp.interpreter import Interpreter

SOURCE = "/lib/checks.svit-script"


def failure(source: str, call: tuple[str, ...] | None = None, **limits: int) -> LispError:
    """The error running ``source`` (then calling ``call``, if given) raises."""
    interp = Interpreter(LispLimits(**limits), filename=SOURCE)
    with pytest.raises(LispError) as caught:
        interp.run(source)
        if call is not None:
            interp.call(*call)
    return caught.value


def frames(error: LispError) -> list[tuple[str, int | None]]:
    return [(frame.function, frame.line) for frame in error.stack]


BRANCHES = """(define (main which)
  (if (= which 1)
      (panic "first check failed")
      (if (= which 2)
          (panic "second check failed")
          which)))
"""


@pytest.mark.parametrize(("which", "line", "detail"), [(1, 3, "first check failed"), (2, 5, "second check failed")])
def test_panic_in_each_branch_reports_its_own_line(which: int, line: int, detail: str) -> None:
    error = failure(BRANCHES, ("main", which))
    assert isinstance(error, EvalError)
    assert error.message == f"{SOURCE}:{line}: panic: {detail}"
    assert frames(error) == [("main", line)]


def test_panics_in_a_do_sequence_report_their_lines() -> None:
    source = """(define (check x)
  (do
    (if (< x 0) (panic "negative") ())
    (if (> x 9) (panic "too big") ())
    x))
"""
    assert failure(source, ("check", -1)).message == f"{SOURCE}:3: panic: negative"
    assert failure(source, ("check", 10)).message == f"{SOURCE}:4: panic: too big"


def test_type_error_deep_in_a_nested_expression() -> None:
    source = """(define (total xs)
  (let ((base 10))
    (* 2
       (+ base
          (+ 1 "a")))))
(total ())
"""
    error = failure(source)
    assert error.message.startswith(f"{SOURCE}:5: type error")
    assert frames(error) == [("top level", 6), ("total", 5)]


def test_column_of_the_failing_form_is_recorded() -> None:
    source = "(define (f x)\n  (list x   (+ x \"a\")))\n(f 1)\n"
    error = failure(source)
    assert error.stack[-1] == Frame("f", 2, 13)
    assert error.stack[0] == Frame("top level", 3, 1)
    # The message keeps its line-only form for run-time errors.
    assert error.message.startswith(f"{SOURCE}:2: type error")


def test_each_frame_of_a_helper_chain_names_its_calling_line() -> None:
    source = """(define (parse x)
  (if (= x 0)
      (panic "zero")
      x))
(define (validate x)
  (let ((y (* x 2)))
    (+ 1
       (parse y))))
(define (main)
  (do (validate 1)
      (validate 0)))
"""
    error = failure(source, ("main",))
    assert error.message == f"{SOURCE}:3: panic: zero"
    assert frames(error) == [("main", 11), ("validate", 8), ("parse", 3)]


def test_top_level_frame_names_the_line_of_its_call() -> None:
    source = """(define (boom) (panic "no"))
(define x 1)
(list 1
      2
      (boom))
"""
    error = failure(source)
    assert frames(error) == [("top level", 5), ("boom", 1)]


def test_tail_loop_failing_on_a_later_iteration() -> None:
    source = """(define (walk n acc)
  (if (= n 0)
      acc
      (walk (- n 1)
            (+ acc
               (if (= n 3) "bad" n)))))
(walk 10 0)
"""
    error = failure(source)
    assert error.message.startswith(f"{SOURCE}:5: type error")
    assert frames(error) == [("top level", 7), ("walk", 5)]


def test_error_inside_a_lambda_passed_to_map() -> None:
    source = """(define (main xs)
  (map
    (lambda (x)
      (if (= x 2)
          (panic "two")
          (* x x)))
    xs))
"""
    error = failure(source, ("main", (1, 2, 3)))
    assert error.message == f"{SOURCE}:5: panic: two"
    assert frames(error) == [("main", 2), ("lambda", 5)]


def test_type_error_inside_a_lambda_passed_to_map() -> None:
    source = """(define (main)
  (map (lambda (x)
         (+ x "a"))
       '(1 2)))
(main)
"""
    error = failure(source)
    assert error.message.startswith(f"{SOURCE}:3: type error")
    assert frames(error) == [("top level", 5), ("main", 2), ("lambda", 3)]


def test_macro_expanded_form_reports_the_line_of_the_macro_use() -> None:
    source = """(macro (must test message)
  `(if ,test () (panic ,message)))
(define (main x)
  (do (must (> x 0) "positive")
      (must (< x 10) "small")))
(main 1)
(main 20)
"""
    error = failure(source)
    assert error.message == f"{SOURCE}:5: panic: small"
    assert frames(error) == [("top level", 7), ("main", 5)]


def test_wrong_arity_of_a_dynamic_call_reports_the_call_line() -> None:
    source = """(define (apply-to f)
  (f 1
     2))
(define (one x) x)
(apply-to one)
"""
    error = failure(source)
    assert "wrong number of arguments" in error.message
    assert error.message.startswith(f"{SOURCE}:2: ")
    assert frames(error)[:2] == [("top level", 5), ("apply-to", 2)]


def test_calling_a_non_function_reports_the_call_line() -> None:
    source = """(define (run f)
  (list 1
        (f 2)))
(run 5)
"""
    error = failure(source)
    assert error.message == f"{SOURCE}:3: type error: expected function, found integer"


def test_call_stack_limit_names_the_recursive_call_line() -> None:
    source = """(define (down n)
  (+ 1
     (down (- n 1))))
(down 100)
"""
    error = failure(source, max_call_stack=8)
    assert isinstance(error, LimitError)
    lines = frames(error)
    assert lines[0] == ("top level", 4)
    assert all(line == 3 for _, line in lines[1:-1])


def test_fuel_exhaustion_reports_a_line_in_the_running_function() -> None:
    source = """(define (spin n)
  (spin (+ n 1)))
(spin 0)
"""
    error = failure(source, max_steps=1000)
    assert isinstance(error, BudgetExhausted)
    assert frames(error)[0] == ("top level", 3)
    assert frames(error)[-1][0] == "spin"
    assert frames(error)[-1][1] in (1, 2)


def test_error_on_a_later_line_of_a_long_top_level_form() -> None:
    lines = ["(list"] + [f"  (+ {i} 1)" for i in range(40)] + ['  (+ 1 "x"))']
    error = failure("\n".join(lines))
    assert error.message.startswith(f"{SOURCE}:42: type error")


def test_deep_nesting_within_the_default_syntax_depth_still_runs() -> None:
    depth = LispLimits().max_syntax_depth - 2
    source = "(define (f x) " + "(+ 1 " * depth + "x" + ")" * depth + ") (f 0)"
    interp = Interpreter(filename=SOURCE)
    try:
        assert interp.run(source) == depth
    except LimitError as error:  # CPython's own nesting limit, reported as the Lisp one
        assert error.limit == "syntax depth"


def test_non_boolean_condition_reports_the_condition_line() -> None:
    source = """(define (pick x)
  (cond
    ((= x 0) "zero")
    (x "truthy")
    (else "other")))
(pick 5)
"""
    error = failure(source)
    assert error.message == f"{SOURCE}:4: type error: expected bool, found integer"
    assert error.stack[-1] == Frame("pick", 4, 6)


def test_bad_unquote_splicing_reports_its_line() -> None:
    source = """(define (wrap x)
  `(begin
     ,@x))
(wrap 3)
"""
    error = failure(source)
    assert error.message.startswith(f"{SOURCE}:3: type error: unquote-splicing expects a list")


def test_failure_in_a_let_binding_reports_the_binding_line() -> None:
    source = """(define (f x)
  (let ((a (+ x 1))
        (b (+ x "b")))
    (+ a b)))
(f 1)
"""
    error = failure(source)
    assert error.message.startswith(f"{SOURCE}:3: type error")
    assert error.stack[-1] == Frame("f", 3, 12)


def test_unknown_keyword_argument_names_the_calling_line_in_the_caller() -> None:
    source = """(define (opt :key a) a)
(define (main)
  (list 1
        (opt :b 2)))
(main)
"""
    error = failure(source)
    assert frames(error)[:2] == [("top level", 5), ("main", 4)]
