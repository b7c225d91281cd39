"""SIGTERM while a commit holds the store lock: the final export must still happen.

Python runs a signal handler on the main thread between two bytecodes, so a SIGTERM
often lands inside a commit that holds the store lock. A handler that waited there for
an export needing that lock would wait out the whole stop budget and export nothing.
"""

# RocksDB only: the archive's final export on SIGTERM is a host-side file test (the store engine does not matter).

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from svit import Process
from svit.store import ProcessStore
from svit.store.archive import MemoryArchive, install_sigterm_handler

HERE = os.path.dirname(os.path.abspath(__file__))
DRILL = "svit://local/archive/drill"
RUNS = 30


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(HERE)) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _newest_drill_version(archive_path: str) -> int:
    generation = MemoryArchive(archive_path).newest_valid()[0]
    assert generation is not None
    return Process.restore(generation.processes[DRILL].process_snapshot).version


def test_sigterm_to_a_busy_writer_always_exports_the_last_acknowledged_version(tmp_path):
    started = time.monotonic()
    proc = subprocess.run([sys.executable, os.path.join(HERE, "archive_sigterm.py"), "--runs", str(RUNS),
                           str(tmp_path), "13"], capture_output=True, text=True, env=_env(), timeout=150)
    assert proc.returncode == 0, proc.stderr
    codes = dict(line.split()[1:3] for line in proc.stdout.splitlines() if line.startswith("run "))
    assert len(codes) == RUNS, proc.stdout
    acknowledged_runs = 0
    for index in range(RUNS):
        directory = tmp_path / f"run{index}"
        stderr = (directory / "err").read_text()
        assert codes[str(index)] == "143", (index, codes[str(index)], stderr[-2000:])
        assert "final export written" in stderr, (index, stderr[-2000:])
        acks = [int(line.split()[1]) for line in (directory / "out").read_text().splitlines()
                if line.startswith("ack ")]
        exported = _newest_drill_version(str(directory / "archive"))
        if acks:
            acknowledged_runs += 1
            assert exported >= acks[-1], (index, acks[-1], exported)
        with ProcessStore.open(str(directory / "store")) as store:
            assert store.resume(DRILL).version >= exported
    # check on the check: the signal really landed among commits, not before the first one
    assert acknowledged_runs >= RUNS // 2, acknowledged_runs
    assert time.monotonic() - started < 150


def test_sigterm_inside_a_commit_on_the_main_thread_exports_after_it(tmp_path, capfd):
    """Deterministic: the signal arrives while this (main) thread holds the store lock."""
    store = ProcessStore.open(str(tmp_path / "store"))
    archive = MemoryArchive(str(tmp_path / "archive"), stop_timeout_seconds=2)
    handle = store.create(Process.builder(DRILL).memory("x", "start").build())
    previous = signal.getsignal(signal.SIGTERM)
    install_sigterm_handler(archive, store, exit_code=None)
    try:
        with store.engine.lock:  # what a commit in progress holds
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, on this thread
            time.sleep(0.3)  # the handler returned at once; the export waits for the lock
            assert archive.metrics()["export_written"] == 0
            handle.write("/memory/x", "inside the interrupted commit")
        deadline = time.monotonic() + 10
        while archive.metrics()["export_written"] == 0 and archive.metrics()["export_incomplete"] == 0 \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        assert archive.metrics()["export_written"] == 1 and archive.metrics()["export_incomplete"] == 0
        generation = archive.newest_valid()[0]
        assert generation is not None
        restored = Process.restore(generation.processes[DRILL].process_snapshot)
        assert restored.read("/memory/x") == "inside the interrupted commit"
        assert "final export written" in capfd.readouterr().err
    finally:
        signal.signal(signal.SIGTERM, previous)
        store.close()
