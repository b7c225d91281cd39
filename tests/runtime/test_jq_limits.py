"""The jq worker runs within the calling activation's limits: its time is what the
activation has left, its memory follows the activation's guest memory limit."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from svit import Limits, Process
from svit.errors import SvitError
from svit.stdlib import run_jq
from tests.bounds import Cost, assert_memory_within, assert_time_within, measure, unchanged

ADDRESS = "svit://local/test/jq-limits"
#: Six nested loops over 30 items: 729 million iterations, constant memory.
ENDLESS = ".[] as $a | .[] as $b | .[] as $c | .[] as $d | .[] as $e | .[] as $f | empty"
#: An array of twenty million numbers: far more memory than the limit allows.
HUGE = '"x" * 20000000 | explode | length'


def process(limits: Limits) -> Process:
    source = "(define (main input) (jq (map-get input \"f\") (map-get input \"v\")))"
    return Process.builder(ADDRESS).memory("x", 0).library("run", source).limits(limits).build()


def _workers() -> list[int]:
    pids: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            pids.extend(int(pid) for pid in (task / "children").read_text().split())
        except OSError:
            pass
    return pids


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@pytest.fixture()
def worker_peak() -> Iterator[Callable[[], int]]:
    """Samples the resident size of this process's children (the jq workers) while a
    test runs; yields a function giving the highest growth over an idle worker seen."""
    if not Path(f"/proc/{os.getpid()}/task").is_dir():
        pytest.skip("needs /proc")
    assert run_jq(".", 1) == [1]  # an idle, started worker
    idle = max((_rss(pid) for pid in _workers()), default=0)
    peak = [idle]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.002):
            for pid in _workers():
                peak[0] = max(peak[0], _rss(pid))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield lambda: peak[0] - idle
    finally:
        stop.set()
        thread.join(5)


def test_endless_jq_stops_with_a_short_activation() -> None:
    p = process(Limits(max_execution_millis=100))
    assert run_jq(".", 1) == [1]  # the worker is started outside the measured call
    with unchanged(p):
        cost = measure(lambda: p.exec("/lib/run", {"f": ENDLESS, "v": list(range(30))}))
    assert isinstance(cost.error, SvitError) and cost.error.code == "execution_limit_exceeded", cost.error
    assert_time_within(cost, 100)
    assert run_jq(". + 1", 1) == [2]  # a fresh worker takes over


def test_jq_gets_only_the_time_the_activation_has_left(monkeypatch: pytest.MonkeyPatch) -> None:
    import svit.stdlib as stdlib

    given: list[float] = []
    real = stdlib.run_jq

    def recording(filter_text: str, value: object, **options: float) -> list:
        given.append(options["timeout_seconds"])
        return real(filter_text, value, **options)

    monkeypatch.setattr(stdlib, "run_jq", recording)
    source = (
        "(define (spin n) (if (= n 0) 0 (spin (- n 1))))"
        "(define (main input) (do (spin (map-get input \"n\")) (if (map-get input \"jq\") (jq \".\" 1) 0)))"
    )
    p = Process.builder(ADDRESS).library("run", source).limits(Limits(max_execution_millis=2_000, max_steps=10**9)).build()
    started = time.monotonic()
    p.exec("/lib/run", {"n": 500_000, "jq": False})
    spin = time.monotonic() - started
    p.exec("/lib/run", {"n": 500_000, "jq": True})
    assert len(given) == 1
    # What jq may use is the limit less the time already spent (some of the spin's time,
    # allowing for the spin running faster the second time).
    assert 0 < given[0] <= 2.0 - spin / 3, (given, spin)


def test_huge_jq_array_is_stopped_by_the_memory_bound(worker_peak: Callable[[], int]) -> None:
    memory = 16 * 1024 * 1024
    p = process(Limits(max_execution_millis=5_000, max_guest_memory=memory))
    with unchanged(p):
        cost = measure(lambda: p.exec("/lib/run", {"f": HUGE, "v": [1, 2, 3, 4]}))
    assert_memory_within(Cost(cost.wall, cost.cpu, worker_peak()), memory)
    assert isinstance(cost.error, SvitError) and cost.error.code == "resource_limit_exceeded", cost.error
    assert "jq memory" in cost.error.message
    assert_time_within(cost, 5_000)
    assert run_jq(". + 1", 1) == [2]


def test_jq_input_within_the_limits_still_fits() -> None:
    # The memory bound leaves room for the input itself: a large but allowed input works.
    p = process(Limits(max_execution_millis=5_000, max_guest_memory=8 * 1024 * 1024))
    rows = [{"id": i, "name": f"row {i}", "tags": ["a", "b"]} for i in range(1_000)]
    value = {"rows": rows, "blob": "y" * 900_000}
    assert p.exec("/lib/run", {"f": "[(.rows | length), (.blob | length)]", "v": value}).output == [[1_000, 900_000]]
