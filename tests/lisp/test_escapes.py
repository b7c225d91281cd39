"""Escape attempts: each fails with a language error and leaves the host untouched."""

from __future__ import annotations

import builtins
import os
import sys

import pytest

from svit.lisp.context import LispLimits
from svit.lisp.errors import BudgetExhausted, CompileError, EvalError, LimitError, LispError, ReadError
from svit.lisp.interpreter import Interpreter, evaluate

LIMITS = LispLimits(max_steps=2_000_000, max_execution_millis=10_000)

# (source, expected error class, text the message must contain)
ATTEMPTS = [
    ('(__import__ "os")', CompileError, "unbound name `__import__`"),
    ('(eval "1 + 1")', CompileError, "unbound name `eval`"),
    ('(exec "import os")', CompileError, "unbound name `exec`"),
    ('(open "/etc/passwd")', CompileError, "unbound name `open`"),
    ('(getattr 1 "__class__")', CompileError, "unbound name `getattr`"),
    ("__builtins__", CompileError, "unbound name `__builtins__`"),
    ("(_type 1)", CompileError, "unbound name `_type`"),
    ("_K", CompileError, "unbound name `_K`"),
    ("(_tick)", CompileError, "unbound name `_tick`"),
    ("(_deep)", CompileError, "unbound name `_deep`"),
    ("(globals)", CompileError, "unbound name `globals`"),
    ("(.__class__ 1)", CompileError, "unbound name `.__class__`"),
    ('(. "abc" "__class__")', CompileError, "unbound name `.`"),
    ("(list.append (list 1) 2)", CompileError, "unbound name `list.append`"),
    ('(apply __import__ (list "os"))', CompileError, "unbound name `__import__`"),
    ('(macro (m) (__import__ "os")) (m)', EvalError, "unbound name `__import__`"),
    ("(use os)", CompileError, "module not found"),
    ("(use random)", CompileError, "module not found"),
    ("(^ 2 100000)", LimitError, "integer bits"),
    ("(<< 1 100000000)", LimitError, "integer bits"),
    ("(* 99999999999999999999 99999999999999999999)", LimitError, "integer bits"),
    ("(" * 100_000 + ")" * 100_000, LimitError, "syntax depth"),
    ('(define (bomb s) (bomb (concat s s))) (bomb "xxxxxxxx")', LimitError, "guest memory"),
    ("(define (bomb l) (bomb (concat l l))) (bomb (list 1 2))", LimitError, "guest memory"),
    ('(define (bomb s n) (if (= n 0) s (bomb (join s s s s) (- n 1)))) (bomb "ab" 40)', LimitError, "guest memory"),
    ("(define (r n) (+ 1 (r n))) (r 0)", LimitError, "call stack"),
    ("(define (a n) (b n)) (define (b n) (+ 1 (a n))) (a 0)", LimitError, "call stack"),
    ("(define (spin) (spin)) (spin)", BudgetExhausted, "execution limit exceeded"),
    ("(define _s 100000000) (define (spin) (spin)) (spin)", BudgetExhausted, "execution limit exceeded"),
    ("(define _d -100000) (define (r n) (+ 1 (r n))) (r 0)", LimitError, "call stack"),
    ('(format "~1000000000a" 1)', EvalError, "formatting"),
    ('(define (grow s) (grow (format "~a~a" s s))) (grow "ab")', LimitError, "guest memory"),
    ('(slice "abc" 0 1000000000000)', EvalError, ""),
    ("(elt (list 1) 10000000000000)", EvalError, ""),
    ('(format "{0.__class__}" 1) (panic (format "~a" (lambda (x) x)))', EvalError, "#<lambda"),
    ('(panic (format "~s" +))', EvalError, "#<function +>"),
    ('(define (f) (f)) (id (f))', BudgetExhausted, ""),
    ('(struct Evil ((x integer)))', CompileError, "not supported"),
    ('"\\u{110000}"', ReadError, "invalid unicode escape"),
]


def host_fingerprint() -> tuple:
    return (sorted(vars(builtins)), dict(os.environ), sorted(sys.modules), os.getcwd())


@pytest.mark.parametrize("source,error_type,text", ATTEMPTS, ids=[str(i) for i in range(len(ATTEMPTS))])
def test_escape_attempt_fails_inside_the_language(source: str, error_type: type, text: str) -> None:
    before = host_fingerprint()
    with pytest.raises(error_type) as caught:
        evaluate(source, LIMITS)
    assert isinstance(caught.value, LispError)
    assert text in caught.value.message
    assert "Traceback" not in caught.value.message
    assert host_fingerprint() == before


def test_there_are_at_least_thirty_attempts() -> None:
    assert len(ATTEMPTS) >= 30


def test_guest_globals_shadow_nothing_of_the_host() -> None:
    result = evaluate('(define __import__ 1) (define open "o") (define _type 3) (list __import__ open _type)', LIMITS)
    assert result == (1, "o", 3)
    assert builtins.__import__ is not None and builtins.open is open


def test_names_that_look_alike_stay_distinct() -> None:
    assert evaluate("(define a_b 1) (define a-b 2) (define a.b 3) (list a_b a-b a.b)", LIMITS) == (1, 2, 3)


def test_functions_are_opaque_values() -> None:
    assert evaluate("(type-of +)", LIMITS).name == "function"
    assert evaluate("(type-of (lambda (x) x))", LIMITS).name == "lambda"


def test_generated_code_has_no_builtins() -> None:
    # Generated code's builtins are the language's own shared helpers: no name of
    # Python's builtins, nothing a run can add to, and the same for every namespace.
    import builtins

    interp = Interpreter(LIMITS)
    shared = interp.globals["__builtins__"]
    before = dict(shared)
    assert not set(shared) & set(dir(builtins))
    assert all(name.startswith("_") and not name.startswith("__") for name in shared)
    interp.run("(define x 1) (define (f y) y) (define _type 3) (f x)")
    assert shared == before and shared is Interpreter(LIMITS).globals["__builtins__"]


def test_path_and_bytes_literals_are_inert() -> None:
    assert evaluate('(type-of #p"/etc/passwd")', LIMITS).name == "path"
    assert evaluate('(len #b"abc")', LIMITS) == 3


def test_errors_never_carry_host_paths() -> None:
    with pytest.raises(LispError) as caught:
        evaluate('(define (f x) (panic "boom")) (f 1)', LIMITS)
    message = caught.value.message
    assert "boom" in message
    assert os.path.dirname(__file__) not in message and ".py" not in message
