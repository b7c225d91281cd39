"""Activations on several threads at once: on different processes in parallel, on one
process one at a time (its lock), each deep run keeping the raised recursion limit until
the last run anywhere has ended, and the host's own limit back afterwards."""

from __future__ import annotations

import sys
import threading

from svit import Limits, Process
from svit.lisp.interpreter import RUN_RECURSION_LIMIT

#: A guest recursion 3,000 calls deep: far past Python's default limit of 1,000 frames,
#: so it runs only while the run guard's raised limit holds.
DEEP = (
    "(define (depth n) (if (= n 0) 0 (+ 1 (depth (- n 1)))))"
    ' (define (main input) (let ((n (+ (read "/memory/count") (map-get input "by"))))'
    ' (do (write "/memory/count" n) (+ n (depth 3000)))))'
)
LIMITS = Limits(max_call_stack=4_096, max_steps=1_000_000, max_execution_millis=60_000)


def deep_process(address: str) -> Process:
    return Process.builder(address).memory("count", 0).library("deep", DEEP).limits(LIMITS).build()


def test_deep_activations_on_many_threads_keep_the_raised_limit_and_restore_the_hosts() -> None:
    own = [deep_process(f"svit://local/test/threads/own{i}") for i in range(4)]
    shared = deep_process("svit://local/test/threads/shared")
    runs = 12
    failures: list[BaseException] = []
    outputs: dict[int, list[int]] = {}
    start = threading.Barrier(6)

    def work(index: int, process: Process) -> None:
        seen: list[int] = []
        try:
            start.wait()
            for i in range(runs):
                seen.append(process.exec("/lib/deep", {"by": i + 1}).output)
        except BaseException as exc:  # reported below, with the others
            failures.append(exc)
        outputs[index] = seen

    before_limit, before_switch = sys.getrecursionlimit(), sys.getswitchinterval()
    sys.setrecursionlimit(1_000)
    sys.setswitchinterval(1e-5)  # switch threads often, so runs start and end inside others
    try:
        threads = [threading.Thread(target=work, args=(i, p)) for i, p in enumerate(own)]
        threads += [threading.Thread(target=work, args=(4 + i, shared)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads)
        after = sys.getrecursionlimit()
    finally:
        sys.setswitchinterval(before_switch)
        sys.setrecursionlimit(before_limit)
    assert not failures, failures
    assert after == 1_000 < RUN_RECURSION_LIMIT
    total = sum(range(1, runs + 1))
    for index in range(4):
        # Each process counts its own inputs, in order: 1, 1+2, 1+2+3, ... (plus 3,000 deep).
        assert outputs[index] == [sum(range(1, i + 2)) + 3000 for i in range(runs)]
        assert own[index].read("/memory/count") == total
        assert own[index].version == runs
    # The shared process ran both threads' activations one at a time: every one committed.
    assert shared.read("/memory/count") == 2 * total
    assert shared.version == 2 * runs
    assert sorted(outputs[4] + outputs[5])[-1] == 2 * total + 3000
