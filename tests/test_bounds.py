"""The measuring helpers catch what they are meant to catch."""

from __future__ import annotations

import pytest

from svit import Process
from svit.errors import ScriptFailed
from tests.bounds import assert_memory_within, assert_time_within, measure, unchanged


def test_unchanged_notices_a_committed_write() -> None:
    p = Process.builder("svit://local/bounds/write").build()
    with pytest.raises(AssertionError):
        with unchanged(p):
            p.write("/memory/x", 1)


def test_unchanged_accepts_a_refused_write() -> None:
    p = Process.builder("svit://local/bounds/refused").build()
    with unchanged(p):
        with pytest.raises(ScriptFailed):
            p.exec_inline('(write "/memory/x" 1) (panic "no")')


def test_measure_keeps_the_error_and_the_peak() -> None:
    def grow() -> None:
        held = [bytes(1024) for _ in range(20_000)]
        raise ValueError(len(held))

    cost = measure(grow, memory=True)
    assert cost.raised(ValueError)
    assert cost.peak_bytes is not None and cost.peak_bytes > 20 * 1024 * 1024
    with pytest.raises(AssertionError):
        assert_memory_within(cost, 1024 * 1024)


def test_time_bound_fails_for_work_far_over_the_limit() -> None:
    cost = measure(lambda: sum(range(3_000_000)))
    with pytest.raises(AssertionError):
        assert_time_within(cost, 0, factor=0, slack=0.0)
