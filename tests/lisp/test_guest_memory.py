"""Guest memory holds for what a run keeps at once, and names do not outlive their use."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from lisp.context import LispLimits
from lisp.errors import LimitError, LispError
from lisp.interpreter import evaluate
from lisp.values import Keyword, Name
from tests.bounds import MEMORY_SLACK_BYTES, assert_memory_within, measure

MIB = 1024 * 1024


# --- names -----------------------------------------------------------------------------


def _names_source(round_: int, count: int = 400, width: int = 1000) -> str:
    """A script of many long names, each unbound, so compiling it fails after reading them."""
    names = " ".join(f"n{round_}-{i}-" + "x" * width for i in range(count))
    keywords = " ".join(f":k{round_}-{i}-" + "y" * width for i in range(count // 4))
    return f"(list {names} {keywords})"


def test_names_from_failed_scripts_are_released() -> None:
    # 60 scripts, each reading ~0.5 MB of fresh names and keywords, fail to compile: nothing
    # keeps those names, so the memory they took returns.
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for round_ in range(60):
            with pytest.raises(LispError):
                evaluate(_names_source(round_))
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert retained <= MEMORY_SLACK_BYTES, f"{retained / MIB:.1f} MiB retained after 60 runs"


def test_names_alive_at_once_are_one_object() -> None:
    a = Name("some-name")
    assert Name("some-name") is a
    assert Keyword("some-name") is Keyword("some-name")
    assert Keyword("some-name") is not a
    held = evaluate("'(some-name some-name)")
    assert held[0] is held[1] is a


def test_a_name_read_again_after_it_died_equals_itself() -> None:
    first = evaluate("'a-name-that-dies")
    name_id = id(first)
    del first
    gc.collect()
    again = evaluate("'a-name-that-dies")
    assert again is Name("a-name-that-dies")
    assert evaluate("(= 'a-name-that-dies x)", x=again) is True
    del name_id
