"""``reuse_logs``: the RocksDB store reuses its obsolete write-ahead logs, and loses nothing by it.

A log sync that overwrites bytes an old log already holds costs ext4 no metadata journal
commit, so a writer opened with ``reuse_logs=True`` has RocksDB keep obsolete logs to reuse
(``recycle_log_file_num``) and caps the logs' size (``max_total_wal_size``) so that they
become obsolete at all (every column family holding data in a log must be flushed first).
These tests check that RocksDB kept those options (it silently drops some combinations),
that a store whose log rolled over really writes into a reused file, that a writer killed
while writing over a reused log's old contents loses no acknowledged commit, and that a
reader, which RocksDB cannot make follow such a writer, is refused instead of looping or
reading an old log's records.
"""

from __future__ import annotations

import glob
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from svit import Process
from svit.errors import PersistenceUnavailable
from svit.store import ProcessStore
from svit.store.rocksdb import REUSED_LOG_BYTES, REUSED_LOGS, RocksDBEngine, writer_reuses_logs
from tests.store.log_roll_writer import ADDRESS, blob, log_files

ROOT = str(Path(__file__).resolve().parents[2])
WRITER = str(Path(__file__).with_name("log_roll_writer.py"))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def reusing(path: Path | str) -> ProcessStore:
    return ProcessStore.over(RocksDBEngine.open(path, reuse_logs=True))


def written_options(path: Path) -> dict[str, dict[str, str]]:
    """The options RocksDB recorded in the store's newest OPTIONS file, by section: what it
    runs with after its own sanitizing, not what was asked for."""
    newest = max(glob.glob(str(path / "OPTIONS-*")), key=lambda name: int(name.rsplit("-", 1)[1]))
    sections: dict[str, dict[str, str]] = {}
    section: dict[str, str] = {}
    for line in Path(newest).read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = sections.setdefault(line, {})
        elif "=" in line:
            key, _, value = line.partition("=")
            section[key] = value
    return sections


def roll_onto_reused_logs(handle, path: Path, times: int, first: int = 1) -> int:
    """Commit large versions until the log rolled over onto a reused file ``times`` times
    (the newest log, holding one commit, is far larger: an old log's bytes follow it);
    return the last version committed."""
    logs, reused = log_files(str(path)), 0
    for version in range(first, first + 400):
        handle.write("/memory/blob", blob(version))
        now = log_files(str(path))
        if now.keys() != logs.keys() and now[max(now)] > REUSED_LOG_BYTES // 2:
            reused += 1
            if reused == times:
                return version
        logs = now
    raise AssertionError(f"the log was reused {reused} times in 400 commits of {len(blob(1))} bytes")


def test_rocksdb_runs_a_reusing_writer_with_log_reuse_a_log_cap_and_point_in_time_recovery(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = ProcessStore.open(path, reuse_logs=True)
    assert "reused" in store.statement()["write"]
    store.close()
    db = written_options(path)["[DBOptions]"]
    assert db["recycle_log_file_num"] == str(REUSED_LOGS) != "0"  # RocksDB zeroes it beside some recovery modes
    assert db["wal_recovery_mode"] == "kPointInTimeRecovery"
    assert db["max_total_wal_size"] == str(REUSED_LOG_BYTES) != "0"
    assert writer_reuses_logs(path)
    # the default writer reuses nothing, and says so
    store = ProcessStore.open(path)
    assert "reused" not in store.statement()["write"]
    store.close()
    assert written_options(path)["[DBOptions]"]["recycle_log_file_num"] == "0"
    assert not writer_reuses_logs(path)


def test_a_rolled_over_log_is_written_into_a_reused_file_and_everything_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = reusing(path)
    handle = store.create(Process.builder(ADDRESS).memory("blob", "").build())
    last = roll_onto_reused_logs(handle, path, 3)
    view = store.resume(ADDRESS)
    assert (view.version, view.read("/memory/blob")) == (last, blob(last))
    assert [view.at(version).read("/memory/blob") for version in (1, last // 2, last - 1)] == \
        [blob(1), blob(last // 2), blob(last - 1)]
    store.close()
    again = reusing(path)  # reopening replays nothing stale
    view = again.resume(ADDRESS)
    assert (view.version, view.read("/memory/blob")) == (last, blob(last))
    again.close()


FOLLOWER = """
import sys
from svit.errors import PersistenceUnavailable
from svit.store import ProcessStore
reader = ProcessStore.open(sys.argv[1], read_only=True)
print("opened", reader.resume(sys.argv[2]).version, flush=True)
sys.stdin.readline()  # meanwhile a writer that reuses its logs took over the store
try:
    reader.follow()
    print("followed", reader.resume(sys.argv[2]).version, flush=True)
except PersistenceUnavailable as exc:
    print("refused", exc.reason, flush=True)
"""


def test_a_reader_is_refused_rather_than_following_a_writer_that_reuses_logs(tmp_path: Path) -> None:
    path = tmp_path / "store"
    writer = ProcessStore.open(path)
    writer.create(Process.builder(ADDRESS).memory("blob", "").build())
    # A reader that opened while an ordinary writer held the store; RocksDB's follower would
    # loop forever on a reused log's old records, so it runs in a process with a deadline.
    follower = subprocess.Popen([sys.executable, "-c", FOLLOWER, str(path), ADDRESS], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        assert follower.stdout is not None and follower.stdout.readline().split() == ["opened", "0"]
        writer.close()
        writer = reusing(path)
        last = roll_onto_reused_logs(writer.resume(ADDRESS), path, 2)
        out, err = follower.communicate("\n", timeout=30)
        assert out.split() == ["refused", "unavailable"], err
    finally:
        follower.kill()
        follower.wait()
    with pytest.raises(PersistenceUnavailable) as refused:
        ProcessStore.open(path, read_only=True)
    assert "reuses its write-ahead logs" in refused.value.message and str(path) not in refused.value.message
    writer.close()
    with pytest.raises(PersistenceUnavailable):  # its old logs are still there
        ProcessStore.open(path, read_only=True)
    # An ordinary writer's open removes them: readers follow again.
    writer = ProcessStore.open(path)
    reader = ProcessStore.open(path, read_only=True)
    try:
        assert reader.resume(ADDRESS).read("/memory/blob") == blob(last)
        writer.resume(ADDRESS).write("/memory/blob", "after")
        reader.follow()
        assert reader.resume(ADDRESS).read("/memory/blob") == "after"
    finally:
        reader.close()
        writer.close()


def run_until_reused_then_kill(path: str, rng: random.Random) -> tuple[list[int], int]:
    """Start the writer, kill it at a random moment after its log rolled over onto a reused
    file twice; return the acknowledged versions and how many such roll-overs it reported."""
    proc = subprocess.Popen([sys.executable, WRITER, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV)
    lines: list[str] = []
    reused_twice = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if lines.count("reused\n") >= 2:
                reused_twice.set()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    try:
        assert reused_twice.wait(60), f"the writer's log was never reused: {lines[-3:]}"
        threading.Event().wait(rng.uniform(0.0, 0.15))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        thread.join(10)
        assert proc.stderr is not None
        proc.stderr.close()
    acked = [int(line) for line in lines if line.endswith("\n") and line.strip().isdigit()]
    return acked, lines.count("reused\n")


def test_sigkill_while_writing_over_a_reused_log_loses_no_acknowledged_commit(tmp_path: Path) -> None:
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    path = str(tmp_path / "store")
    for round_ in range(2):  # the second round recovers a store whose previous writer was killed too
        acked, reused = run_until_reused_then_kill(path, rng)
        assert acked and reused >= 2
        # recovered by a writer that reuses logs, then by one that does not
        store = reusing(path) if round_ == 0 else ProcessStore.open(path)
        try:
            view = store.resume(ADDRESS)
            assert view.version >= max(acked), (view.version, max(acked))
            assert view.read("/memory/blob") == blob(view.version)
        finally:
            store.close()
