"""SIGKILL a durable writer at random moments; every acknowledged version must survive.

Each round starts ``crash_writer.py`` on the same store, lets it acknowledge
activations for a random time, kills it with SIGKILL, then reopens the store here: it
must open, resume must validate, and the resumed version must be at least every version
the writer acknowledged. (A SIGKILL leaves the page cache intact, so this proves
atomicity and recovery of the store, not the fsync itself; the fault-injection tests
in test_store.py cover the failed-sync path.) The anti-vacuity control runs the same
harness against a writer that acknowledges before committing and must see a loss.
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

WRITER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crash_writer.py")
ADDRESS = "svit://local/crash/counter"


def run_and_kill(path: str, rng: random.Random, *extra: str) -> list[int]:
    """Start the writer, kill it at a random moment after it is ready; return acked versions."""
    proc = subprocess.Popen([sys.executable, WRITER, path, *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    ready = threading.Event()

    def reader() -> None:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("ready"):
                ready.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    assert ready.wait(20), f"writer did not start: {proc.stderr.read() if proc.poll() is not None else ''}"
    time.sleep(rng.uniform(0.05, 0.6))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    thread.join(10)
    proc.stderr.close()
    # Only complete lines count as acknowledgements.
    return [int(line) for line in lines if line.endswith("\n") and line.strip().isdigit()]


def resumed_version(path: str) -> int:
    store = ProcessStore.open(path)
    try:
        return store.resume(ADDRESS).version
    finally:
        store.close()


def test_sigkill_never_loses_an_acknowledged_version(store_location):
    # On PostgreSQL the kill ends the writer's connection mid-transaction: the server
    # rolls back what was not committed, and every acknowledged commit is there.
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    path = store_location
    started = time.monotonic()
    total = 0
    for _round in range(8):
        acked = run_and_kill(path, rng)
        version = resumed_version(path)
        assert acked, "the writer acknowledged nothing before the kill"
        assert version >= max(acked), (version, max(acked))
        total += len(acked)
    assert total > 8
    assert time.monotonic() - started < 40


# The harness itself is checked once, on RocksDB (it does not depend on the engine).
def test_harness_sees_a_lost_acknowledgement(tmp_path):
    """Anti-vacuity: a writer that acknowledges before committing must be caught."""
    rng = random.Random(1)
    path = str(tmp_path / "store")
    for _round in range(6):
        acked = run_and_kill(path, rng, "--ack-early")
        if acked and resumed_version(path) < max(acked):
            return
    raise AssertionError("the harness never observed a lost acknowledgement from the broken writer")
