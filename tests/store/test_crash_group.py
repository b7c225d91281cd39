"""SIGKILL a store with several threads committing concurrently (group commit) at random
moments; every commit a thread acknowledged must be there after reopening.

Each round starts ``crash_group_writer.py`` (6 threads, one address each, 7 rounds) on the same
store, kills it with SIGKILL at a random moment, then reopens the store here: it must
open, every address must resume (replaying and checking its chain), and each resumed
version must be at least the highest version its thread printed. The control runs the
same harness against writers that print before committing and must see a loss.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

from svit.store import ProcessStore

WRITER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crash_group_writer.py")
THREADS = 6


def address(n: int) -> str:
    return f"svit://local/crash/group{n}"


def run_and_kill(path: str, rng: random.Random, *extra: str) -> dict[int, int]:
    """Start the writer, kill it at a random moment once ready; the highest acked version per thread."""
    proc = subprocess.Popen([sys.executable, WRITER, path, str(THREADS), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    ready = threading.Event()

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("ready"):
                ready.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        assert ready.wait(30), f"writer did not start: {proc.stderr.read() if proc.poll() is not None else ''}"
        time.sleep(rng.uniform(0.05, 0.3))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        thread.join(10)
        assert proc.stderr is not None
        proc.stderr.close()
    acked: dict[int, int] = {}
    for line in lines:
        parts = line.split()
        if line.endswith("\n") and len(parts) == 2 and all(p.isdigit() for p in parts):
            n, version = int(parts[0]), int(parts[1])
            acked[n] = max(acked.get(n, 0), version)
    return acked


def resumed_versions(path: str) -> dict[int, int]:
    store = ProcessStore.open(path)
    try:
        return {n: store.resume(address(n)).version for n in range(THREADS)}
    finally:
        store.close()


def test_sigkill_with_concurrent_writers_loses_no_acknowledged_commit(store_location):
    # On PostgreSQL the kill ends the writer's connection mid-transaction: the server
    # rolls back what was not committed, and every acknowledged commit is there.
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    path = store_location
    started = time.monotonic()
    total = 0
    for _round in range(7):
        acked = run_and_kill(path, rng)
        versions = resumed_versions(path)
        assert acked, "the writer acknowledged nothing before the kill"
        for n, version in acked.items():
            assert versions[n] >= version, (n, versions[n], version)
        total += len(acked)
    assert total >= 7
    assert time.monotonic() - started < 60


# The harness itself is checked once, on RocksDB (it does not depend on the engine).
def test_harness_sees_a_lost_acknowledgement_with_concurrent_writers(tmp_path):
    """Anti-vacuity: writers that acknowledge before committing must be caught."""
    rng = random.Random(2)
    path = str(tmp_path / "store")
    for _round in range(6):
        acked = run_and_kill(path, rng, "--ack-early")
        versions = resumed_versions(path)
        if any(versions[n] < version for n, version in acked.items()):
            return
    raise AssertionError("the harness never observed a lost acknowledgement from the broken writers")
