"""What crosses between the interpreter and the host: process state, run context, host failures."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from svit.lisp import context as run_context
from svit.lisp.context import LispLimits
from svit.lisp.errors import EvalError, Frame, HostFunctionError, InternalError, LimitError, LispError
from svit.lisp.interpreter import Interpreter
from svit.lisp.render import debug_repr

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str) -> str:
    """Run ``code`` in a fresh interpreter (nothing imported yet) and return its output."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


# --- no process-wide side effects ----------------------------------------------------


def test_importing_the_language_leaves_the_recursion_limit_alone() -> None:
    out = _python(
        """
        import sys
        sys.setrecursionlimit(1234)
        import svit.lisp, svit.lisp.interpreter, svit.lisp.functions
        print(sys.getrecursionlimit())
        """
    )
    assert out == "1234"


def test_a_run_restores_the_recursion_limit_after_it_ends() -> None:
    out = _python(
        """
        import sys
        sys.setrecursionlimit(1000)
        from svit.lisp.interpreter import Interpreter
        from svit.lisp.errors import EvalError
        interp = Interpreter()
        interp.run("(define (f) 1) (f)")
        after_run = sys.getrecursionlimit()
        try:
            interp.run("(panic 1)")
        except EvalError:
            pass
        print(after_run, sys.getrecursionlimit())
        """
    )
    assert out == "1000 1000"


def test_deep_legal_recursion_runs_from_the_default_recursion_limit() -> None:
    out = _python(
        """
        import sys
        sys.setrecursionlimit(1000)
        from svit.lisp.context import LispLimits
        from svit.lisp.interpreter import evaluate
        limits = LispLimits(max_call_stack=4096, max_steps=100_000, max_execution_millis=60_000)
        source = "(define (depth n) (if (= n 0) 0 (+ 1 (depth (- n 1))))) (depth 4000)"
        print(evaluate(source, limits), sys.getrecursionlimit())
        """
    )
    assert out == "4000 1000"


def test_a_host_function_running_guest_code_keeps_the_raised_limit_for_the_outer_run() -> None:
    seen: list[int] = []
    interp = Interpreter(LispLimits(max_call_stack=4096, max_steps=1_000_000, max_execution_millis=60_000))

    def nested() -> int:
        inner = Interpreter()
        inner.run("(define (f) 1)")
        inner.call("f")
        seen.append(sys.getrecursionlimit())
        return 0

    interp.define_function("nested", nested, 0, 0)
    source = "(define (depth n) (if (= n 0) (nested) (+ 1 (depth (- n 1))))) (depth 3000)"
    assert interp.run(source) == 3000
    assert seen and seen[0] >= 3000


# --- no lenient context outside a run ------------------------------------------------


def test_system_code_outside_a_run_is_an_internal_error() -> None:
    assert run_context.active() is None
    with pytest.raises(InternalError) as caught:
        run_context.current()
    assert "outside a run" in caught.value.detail
    with pytest.raises(InternalError):
        debug_repr((1, 2))


def test_a_context_entered_by_the_host_is_current() -> None:
    context = run_context.Context(LispLimits(), Interpreter().budget)
    previous = run_context.enter(context)
    try:
        assert run_context.current() is context
        assert debug_repr((1, "a")) == '(1 "a")'
    finally:
        run_context.leave(previous)
    assert run_context.active() is None


# --- a host function's own failures --------------------------------------------------


def _failure(interp: Interpreter, source: str) -> LispError:
    with pytest.raises(LispError) as caught:
        interp.run(source)
    return caught.value


@pytest.mark.parametrize("exception", [TypeError("unsupported operand"), KeyError("k"), ValueError("v"), ZeroDivisionError()])
def test_a_host_functions_own_exception_is_an_internal_error_chained_to_it(exception: Exception) -> None:
    def broken(_value: object) -> object:
        raise exception

    interp = Interpreter()
    interp.define_function("broken", broken, 1, 1)
    error = _failure(interp, "(define (f x) (broken x))\n(f 1)")
    assert type(error) is HostFunctionError
    assert isinstance(error, InternalError)
    assert error.function == "broken"
    assert error.__cause__ is exception
    assert "type error" not in error.message
    assert "broken" in error.message
    assert error.stack == (Frame("top level", 2, 1), Frame("f", 1, 15))


def test_a_host_bug_inside_a_function_taking_the_call_depth_is_an_internal_error() -> None:
    def each(_depth: int, items: object) -> object:
        return items + 1  # type: ignore[operator]

    each.takes_depth = True  # type: ignore[attr-defined]
    interp = Interpreter()
    interp.define_function("each", each, 1, 1)
    error = _failure(interp, '(each "a")')
    assert type(error) is HostFunctionError
    assert isinstance(error.__cause__, TypeError)


def test_a_deliberate_lisp_error_from_a_host_function_stays_as_it_is() -> None:
    raised = EvalError("host says no")

    def refuse() -> object:
        raise raised

    interp = Interpreter()
    interp.define_function("refuse", refuse, 0, 0)
    error = _failure(interp, "(define (f) (refuse))\n(f)")
    assert error is raised
    assert error.detail == "host says no"
    assert error.stack == (Frame("top level", 2, 1), Frame("f", 1, 13))
    limit = LimitError("guest memory")

    def exhaust() -> object:
        raise limit

    interp.define_function("exhaust", exhaust, 0, 0)
    assert _failure(interp, "(exhaust)") is limit


def test_guest_failures_inside_a_host_callback_stay_the_guests() -> None:
    def call_with_two(depth: int, fn: object) -> object:
        return fn(depth + 1, 1, 2)  # type: ignore[operator]

    call_with_two.takes_depth = True  # type: ignore[attr-defined]
    interp = Interpreter()
    interp.define_function("call-with-two", call_with_two, 1, 1)
    wrong_arity = _failure(interp, "(call-with-two (lambda (x) x))")
    assert type(wrong_arity) is EvalError
    assert "wrong number of arguments" in wrong_arity.detail
    named = _failure(interp, "(define (g x) x) (call-with-two g)")
    assert type(named) is EvalError
    assert "`g` called with the wrong number of arguments" in named.detail
    not_callable = _failure(interp, "(call-with-two (lambda (a b) (a b)))")
    assert type(not_callable) is EvalError
    assert "expected function" in not_callable.detail


def test_a_host_exception_the_host_lets_through_is_not_converted() -> None:
    class HostRefusal(Exception):
        pass

    def refuse() -> object:
        raise HostRefusal("no")

    interp = Interpreter(passthrough=(HostRefusal,))
    interp.define_function("refuse", refuse, 0, 0)
    with pytest.raises(HostRefusal):
        interp.run("(refuse)")
