"""Ketos's own test suite (``tests/core.rs`` and ``tests/restrict.rs``) run as data.

Each case in ``core.json`` / ``restrict.json`` (written by ``extract.py``) names the
Ketos helper it came from, and the helper decides how the result is compared:

* ``eval``: one expression; its value printed as Ketos's ``format_value`` prints it
  (strings quoted, chars as ``#'c'``: our ``debug_repr``);
* ``eval_str``: one expression whose value must be a string, compared as is;
* ``run``: every top-level form in turn, each value printed like ``eval``.

An expected error names Ketos's error kind; ``ERROR_CHECKS`` says what that kind is
in this interpreter. ``restrict`` cases run under Ketos's permissive configuration
with the named fields changed; everything else runs under the permissive
configuration itself (no integer, memory or namespace limits worth mentioning).
Cases marked ``excluded`` exercise what Svit Lisp removes from Ketos; they are
reported as skipped with their reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from svit.lisp.context import LispLimits
from svit.lisp.errors import BudgetExhausted, CompileError, EvalError, LimitError, LispError, ReadError
from svit.lisp.interpreter import Interpreter
from svit.lisp.reader import Program, read
from svit.lisp.render import debug_repr

# Values are rendered (and system functions called) outside a run, under a host context.
pytestmark = pytest.mark.usefixtures("host_context")

HERE = Path(__file__).parent

#: Ketos's ``RestrictConfig::permissive()`` in our limits. Ketos integers are unbounded;
#: 4,096 bits is the most any literal may have here and more than any case needs.
PERMISSIVE = dict(
    max_call_stack=1024,
    max_value_stack=4096,
    max_namespace_entries=1_000_000,
    max_syntax_depth=150,
    max_integer_bits=4096,
    max_guest_memory=1 << 40,
    max_steps=50_000_000,
    max_execution_millis=60_000,
)

#: Ketos's restriction fields and the limit each one is here.
RESTRICT_FIELDS = {
    "execution_time": "max_execution_millis",
    "call_stack_size": "max_call_stack",
    "value_stack_size": "max_value_stack",
    "namespace_size": "max_namespace_entries",
    "memory_limit": "max_guest_memory",
    "max_integer_size": "max_integer_bits",
    "max_syntax_nesting": "max_syntax_depth",
}


def _limit(name: str) -> Callable[[LispError], bool]:
    return lambda e: isinstance(e, LimitError) and e.limit == name


def _runtime(*texts: str) -> Callable[[LispError], bool]:
    return lambda e: isinstance(e, EvalError) and any(t in e.detail for t in texts)


def _compile(*texts: str) -> Callable[[LispError], bool]:
    return lambda e: isinstance(e, (CompileError, ReadError)) and all(t in e.detail for t in texts)


ERROR_CHECKS: dict[str, Callable[[LispError], bool]] = {
    "ExecError": lambda e: isinstance(e, EvalError),
    "ExecError::FormatError": _runtime("error in string formatting"),
    "ExecError::OutOfBounds": _runtime("index out of bounds"),
    "ExecError::Overflow": _runtime("integer overflow"),
    "ExecError::DivideByZero": _runtime("attempt to divide by zero"),
    "ExecError::CompareNaN": _runtime("attempt to compare NaN value"),
    "ExecError::CannotCompare": _runtime("cannot compare"),
    "ExecError::NotCharBoundary": _runtime("not on char boundary"),
    "ExecError::Panic": _runtime("panic"),
    "ExecError::TypeError": _runtime("type error"),
    "CompileError": _compile(),
    "CompileError::SyntaxError": _compile(),
    "CompileError::NotConstant": _compile(),
    "CompileError::MacroRecursionExceeded": _compile("macro expansion does not terminate"),
    "RestrictError::ExecutionTimeExceeded": lambda e: isinstance(e, BudgetExhausted),
    "RestrictError::CallStackExceeded": _limit("call stack"),
    "RestrictError::ValueStackExceeded": _limit("value stack"),
    "RestrictError::NamespaceSizeExceeded": _limit("guest namespace"),
    "RestrictError::MemoryLimitExceeded": _limit("guest memory"),
    "RestrictError::IntegerLimitExceeded": _limit("integer bits"),
    "RestrictError::MaxSyntaxNestingExceeded": _limit("syntax depth"),
}


#: Cases where this interpreter knowingly differs from Ketos (each listed, with its
#: reason, under "Choices and differences" in docs/lisp.md).
DIFFERENCES = {
    "test_macro:1": "`quote`, `quasiquote`, `comma` and `comma-at` are reserved names: no macro may take them",
    # The resolver refuses a literal non-boolean condition before anything runs; Ketos
    # reports the same mistake as a type error when the form is evaluated.
    "test_and:5": "a literal non-boolean condition is a compile error",
    "test_or:5": "a literal non-boolean condition is a compile error",
    "test_not:3": "a literal non-boolean condition is a compile error",
    "test_if:7": "a literal non-boolean condition is a compile error",
}



def load(name: str) -> list[Any]:
    cases = json.loads((HERE / name).read_text(encoding="utf-8"))
    params = []
    for case in cases:
        marks = [pytest.mark.skip(reason=case["excluded"])] if "excluded" in case else []
        if case["id"] in DIFFERENCES:
            marks.append(pytest.mark.xfail(strict=True, reason=DIFFERENCES[case["id"]]))
        params.append(pytest.param(case, id=case["id"], marks=marks))
    return params


CORE = load("core.json")
RESTRICT = load("restrict.json")


def limits_for(case: dict[str, Any]) -> LispLimits:
    values = dict(PERMISSIVE)
    for field, value in case.get("restrict", {}).items():
        values[RESTRICT_FIELDS[field]] = value
    return LispLimits(**values)


def run_forms(source: str, limits: LispLimits) -> list[Any]:
    """The value of every top-level form, as Ketos's ``run`` helper collects them."""
    program = read(source)
    values = []
    for count in range(1, len(program.forms) + 1):
        prefix = Program(program.forms[:count], program.spans, program.depth, program.integer_bits)
        values.append(Interpreter(limits).run(prefix))
    return values


def outcome(case: dict[str, Any]) -> Any:
    limits = limits_for(case)
    helper = case["helper"]
    if helper == "run":
        if "values" in case["expect"]:
            return [debug_repr(v) for v in run_forms(case["source"], limits)]
        return Interpreter(limits).run(case["source"])
    value = Interpreter(limits).run(case["source"])
    if helper == "eval_str":
        assert type(value) is str, f"eval_str expects a string, found {debug_repr(value)}"
        return value
    return debug_repr(value)


def check(case: dict[str, Any]) -> None:
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(LispError) as caught:
            outcome(case)
        error = caught.value
        assert ERROR_CHECKS[expect["error"]](error), f"{expect['error']} expected, got {type(error).__name__}: {error.detail}"
        if "expected" in expect:
            assert f"expected {expect['expected']}" in error.detail and expect["found"] in error.detail, error.detail
        if "type" in expect:
            assert expect["type"] in error.detail, error.detail
        return
    result = outcome(case)
    if "ok" in expect:
        return
    if "values" in expect:
        assert result == expect["values"]
    else:
        assert result == expect["value"]


def test_the_data_holds_every_case() -> None:
    # Ketos's core.rs makes 616 assertions and restrict.rs 11.
    assert len(CORE) == 616
    assert len(RESTRICT) == 11


@pytest.mark.parametrize("case", CORE)
def test_core(case: dict[str, Any]) -> None:
    check(case)


@pytest.mark.parametrize("case", RESTRICT)
def test_restrict(case: dict[str, Any]) -> None:
    check(case)
