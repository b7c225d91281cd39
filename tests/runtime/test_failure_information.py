"""A script failure carries the Lisp call stack and the error kind to the host; a failure of
the host's own code inside a guest function is an internal error chained to its cause."""

from __future__ import annotations

import pytest

from svit import Process
from svit.activation import WorkingState
from svit.errors import InternalError, ScriptFailed

ADDR = "svit://local/test/failures"
NESTED = """(define (f x)
  (+ x "a"))
(define (main input)
  (f 1))"""


def frames(error: ScriptFailed) -> list[tuple[str, int | None]]:
    return [(frame.function, frame.line) for frame in error.stack]


def test_a_runtime_failure_carries_the_lisp_call_stack_and_kind() -> None:
    p = Process.builder(ADDR).build()
    with pytest.raises(ScriptFailed) as info:
        p.exec_inline(NESTED)
    assert frames(info.value) == [("main", 4), ("f", 2)]
    assert info.value.kind == "runtime error"
    assert "type error" in info.value.message


def test_a_library_script_failure_keeps_its_stack_through_the_script_prefix() -> None:
    p = Process.builder(ADDR).library("nested", NESTED).build()
    with pytest.raises(ScriptFailed) as info:
        p.exec("/lib/nested")
    assert info.value.message.startswith("script failed: /lib/nested.svit-script:")
    assert frames(info.value) == [("main", 4), ("f", 2)] and info.value.kind == "runtime error"


def test_a_compile_failure_has_its_kind_and_no_stack() -> None:
    p = Process.builder(ADDR).build()
    with pytest.raises(ScriptFailed) as info:
        p.exec_inline("(define (main input) (read 1 2 3))")
    assert info.value.kind == "compile error" and info.value.stack == []


def broken_stat(self: WorkingState, path: object) -> object:
    return {"path": path} + 1  # type: ignore[operator]  # a bug: TypeError inside the host


def test_a_host_function_bug_is_an_internal_error_chained_to_its_cause(monkeypatch) -> None:
    p = Process.builder(ADDR).memory("count", 0).build()
    monkeypatch.setattr(WorkingState, "fn_stat", broken_stat)
    with pytest.raises(InternalError) as info:
        p.exec_inline('(define (main input) (stat "/memory"))')
    error = info.value
    assert error.code == "internal_error" and not isinstance(error, ScriptFailed)
    assert isinstance(error.__cause__, TypeError)
    assert "type error" not in error.message and "stat" in error.message
    assert p.version == 0


def test_a_host_function_bug_is_not_captured_by_safe_call(monkeypatch) -> None:
    p = Process.builder(ADDR).memory("count", 0).build()
    monkeypatch.setattr(WorkingState, "fn_stat", broken_stat)
    with pytest.raises(InternalError):
        p.exec_inline('(define (main input) (safe-call (lambda () (stat "/memory"))))')


def test_a_guest_failure_inside_a_helper_callback_stays_the_guests() -> None:
    p = Process.builder(ADDR).build()
    activation = p.exec_inline('(define (main input) (safe-call (lambda (a b) a) 1))')
    assert activation.output["ok"] is False and "wrong number of arguments" in activation.output["error"]
    with pytest.raises(ScriptFailed) as info:
        p.exec_inline('(define (main input) (dispatch (dispatch-table "go" (lambda (x) (/ x 0))) "go" 1))')
    assert "divide by zero" in info.value.message
