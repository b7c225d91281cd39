"""Runs the Lisp case files: small programs with their expected result.

A case file holds blocks::

    ;; case: name
    (forms ...)
    ;; => debug rendering of the last form's value
    (or ``;; error: text`` / ``;; limit: name`` / ``;; compile-error: text``)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from svit.lisp.context import LispLimits
from svit.lisp.errors import CompileError, LimitError, LispError, ReadError
from svit.lisp.interpreter import evaluate
from svit.lisp.render import debug_repr

# Values are rendered (and system functions called) outside a run, under a host context.
pytestmark = pytest.mark.usefixtures("host_context")

HERE = Path(__file__).parent
CASE_FILES = sorted((HERE / "cases").glob("*.svl")) + sorted((HERE / "forms").glob("*.svl"))


def load_cases() -> list:
    cases = []
    for path in CASE_FILES:
        name, body, expect = None, [], None
        for line in path.read_text(encoding="utf-8").splitlines():
            stripped = line.strip()
            if stripped.startswith(";; case:"):
                name, body, expect = stripped[len(";; case:"):].strip(), [], None
            elif stripped.startswith(";; =>") or stripped.startswith(";; error:") or stripped.startswith(";; limit:") or stripped.startswith(";; compile-error:"):
                kind, _, text = stripped[3:].partition(":") if not stripped.startswith(";; =>") else ("=>", "", stripped[5:])
                expect = (kind.strip(), text.strip())
                if name is None:
                    raise ValueError(f"{path.name}: expectation without a case header")
                cases.append(pytest.param("\n".join(body), expect, id=f"{path.stem}:{name}"))
                name = None
            elif name is not None:
                body.append(line)
    return cases


CASES = load_cases()


def test_there_are_many_cases() -> None:
    assert len(CASES) >= 60


@pytest.mark.parametrize("source,expect", CASES)
def test_case(source: str, expect: tuple[str, str]) -> None:
    kind, text = expect
    limits = LispLimits(max_steps=5_000_000, max_execution_millis=20_000)
    if kind == "=>":
        assert debug_repr(evaluate(source, limits)) == text
        return
    with pytest.raises(LispError) as caught:
        evaluate(source, limits)
    error = caught.value
    if kind == "limit":
        assert isinstance(error, LimitError) and error.limit == text, error.message
    elif kind == "compile-error":
        assert isinstance(error, (CompileError, ReadError)), error.message
        assert text in error.message
    else:
        assert text in error.message
