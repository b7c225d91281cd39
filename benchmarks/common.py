"""What the runtime and store benchmarks share: the counter process and a median timer."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from svit import Limits, Process

__all__ = ["COUNTER", "BIG_LIMITS", "build", "median_time", "paired_medians"]

COUNTER = """
(define (main input)
  (let ((next (+ (read "/memory/count") 1)))
    (do (write "/memory/count" next) next)))
"""

#: Room for the large processes the benchmarks build (100,000-node memories).
BIG_LIMITS = Limits(max_value_entries=1_000_000, max_tree_nodes=2_000_000, max_text_bytes=64 * 1024 * 1024,
                    max_tree_text_bytes=128 * 1024 * 1024)


def build(address: str, data: dict[str, Any] | None = None) -> Process:
    """A counter process at ``address``, with ``data`` at /memory/data when given."""
    builder = Process.builder(address).memory("count", 0).library("counter", COUNTER).limits(BIG_LIMITS)
    if data is not None:
        builder.memory("data", data)
    return builder.build()


def median_time(fn: Callable[[], Any], repeat: int) -> float:
    """Median seconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def paired_medians(first: Callable[[], Any], second: Callable[[], Any], repeat: int,
                   budget_seconds: float = float("inf"), minimum: int = 3) -> tuple[float, float]:
    """Median seconds of ``first`` and of ``second``, called alternately so both see the same
    machine conditions: ``repeat`` pairs, or fewer (never under ``minimum``) once the pairs
    have taken ``budget_seconds``, so a slow case cannot stretch the whole run."""
    first_times: list[float] = []
    second_times: list[float] = []
    began = time.perf_counter()
    for done in range(repeat):
        if done >= minimum and time.perf_counter() - began > budget_seconds:
            break
        for fn, times in ((first, first_times), (second, second_times)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(first_times), statistics.median(second_times)
