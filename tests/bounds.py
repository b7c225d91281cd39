"""Measuring what an operation really cost, for tests that a limit holds.

A limit holds when the work it lets through stays within a small factor of what it
allows. These helpers measure that work (wall time, CPU time of the calling thread,
peak traced Python memory) and check it against the configured limit, and check that
a refused operation left a process exactly as it was.

Time is measured in a run of its own, without memory tracing (tracing slows Python
several times over). The bounds are generous factors of the limit, never bare
seconds: a limit of 200 ms that lets 10 s of work through fails, a loaded machine
does not.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

#: The factor of a configured limit that measured work may reach.
FACTOR = 3
#: Fixed allowance for starting and ending a run (compiling, committing, cleanup).
TIME_SLACK_SECONDS = 0.25
MEMORY_SLACK_BYTES = 4 * 1024 * 1024


@dataclass
class Cost:
    """What one call cost, and how it ended."""

    wall: float
    cpu: float
    peak_bytes: int | None
    result: Any = None
    error: BaseException | None = None

    def raised(self, kind: type[BaseException]) -> bool:
        return isinstance(self.error, kind)


def measure(fn: Callable[[], Any], *, memory: bool = False) -> Cost:
    """Run ``fn`` once; any exception it raises is kept in the result, not raised.

    With ``memory=True`` the peak of traced Python allocations above the starting
    point is recorded (native allocations are not traced).
    """
    gc.collect()
    if memory:
        tracemalloc.start()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
    start_wall, start_cpu = time.perf_counter(), time.thread_time()
    result: Any = None
    error: BaseException | None = None
    try:
        result = fn()
    except Exception as exc:  # the caller asserts on the kind
        error = exc
    wall, cpu = time.perf_counter() - start_wall, time.thread_time() - start_cpu
    peak = None
    if memory:
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
    return Cost(wall, cpu, peak, result, error)


def assert_time_within(
    cost: Cost, millis: int, factor: float = FACTOR, slack: float = TIME_SLACK_SECONDS
) -> None:
    """The call took at most ``factor`` times the time limit (plus a fixed allowance)."""
    bound = factor * millis / 1000.0 + slack
    assert cost.wall <= bound, f"took {cost.wall:.2f} s wall ({cost.cpu:.2f} s CPU) under a {millis} ms limit"


def assert_memory_within(cost: Cost, limit_bytes: int, factor: float = FACTOR) -> None:
    """The call's traced peak stayed within ``factor`` times the memory limit."""
    assert cost.peak_bytes is not None, "measure(..., memory=True) first"
    bound = factor * limit_bytes + MEMORY_SLACK_BYTES
    assert cost.peak_bytes <= bound, (
        f"peak {cost.peak_bytes / 2**20:.1f} MiB under a {limit_bytes / 2**20:.1f} MiB limit"
    )


def assert_steps_within(used: int, max_steps: int, factor: float = FACTOR) -> None:
    assert used <= factor * max_steps, f"{used} steps under a limit of {max_steps}"


@dataclass(frozen=True)
class ProcessState:
    version: int
    root_hash: str
    snapshot: bytes


def state_of(process: Any) -> ProcessState:
    return ProcessState(process.version, process.root_hash, process.snapshot())


@contextmanager
def unchanged(process: Any) -> Iterator[ProcessState]:
    """Assert that the block leaves the process's version, root and snapshot bytes as they were."""
    before = state_of(process)
    yield before
    after = state_of(process)
    assert after.version == before.version, f"version moved {before.version} -> {after.version}"
    assert after.root_hash == before.root_hash, "the tree changed"
    assert after.snapshot == before.snapshot, "the snapshot bytes changed"
