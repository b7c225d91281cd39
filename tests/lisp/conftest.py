"""Fixtures for tests that call system functions or render values outside a script run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from svit.lisp.budget import Budget
from svit.lisp.context import Context, LispLimits, enter, leave


@pytest.fixture
def host_context() -> Iterator[Context]:
    """A run context entered by the test, as a host does before calling Lisp code directly.

    Outside a run there is no context (system code refuses to run); tests that call
    system functions or render results themselves enter this one, under the default
    limits and a budget large enough never to be the point of the test.
    """
    context = Context(LispLimits(), Budget(max_steps=1_000_000_000, max_millis=None))
    previous = enter(context)
    try:
        yield context
    finally:
        leave(previous)
