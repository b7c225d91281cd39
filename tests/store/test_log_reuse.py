"""``reuse_logs``: the RocksDB store reuses its obsolete write-ahead logs, and loses nothing by it.

A log sync that overwrites bytes an old log already holds costs ext4 no metadata journal
commit, so a writer opened with ``reuse_logs=True`` has RocksDB keep obsolete logs to reuse
(``recycle_log_file_num``) and caps the logs' size (``max_total_wal_size``) so that they
become obsolete at all (every column family holding data in a log must be flushed first).
These tests check that RocksDB kept those options (it silently drops some combinations),
that a store whose log rolled over really writes into a reused file, that a writer killed
while writing over a reused log's old contents loses no acknowledged commit, and that a
reader follows such a writer (which RocksDB's secondary instance cannot: it loops on a
reused log's old records) by opening read-only instances, reading every acknowledged
version and nothing of an old log, through the writer's kill and across writers that do
and do not reuse logs.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from svit import Process
from svit.errors import InvalidPersistence
from svit.store import ProcessStore, rocksdb
from svit.store.rocksdb import REUSED_LOG_BYTES, REUSED_LOGS, RocksDBEngine, writer_reuses_logs
from tests.store.log_roll_writer import ADDRESS, blob, log_files

ROOT = str(Path(__file__).resolve().parents[2])
WRITER = str(Path(__file__).with_name("log_roll_writer.py"))
READER = str(Path(__file__).with_name("log_reader.py"))
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


class Follower:
    """A reader in its own process (:mod:`tests.store.log_reader`): were it to loop in RocksDB
    (holding the GIL), the test would fail at a timeout rather than hang."""

    def __init__(self, path: Path | str) -> None:
        self.process = subprocess.Popen([sys.executable, READER, str(path)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        assert self._line() == "opened"

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.strip())
        self.lines.put("")

    def _line(self) -> str:
        try:
            line = self.lines.get(timeout=60)
        except queue.Empty:
            raise AssertionError("the reader did not answer within 60 s") from None
        assert line, f"the reader exited: {self.stop()}"
        return line

    def ask(self, *command: object) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(" ".join(map(str, command)) + "\n")
        self.process.stdin.flush()
        reply: dict[str, Any] = json.loads(self._line())
        assert "error" not in reply, reply
        return reply

    def stop(self) -> str:
        """Close the reader (or kill it, if it does not exit); its error output."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        assert self.process.stderr is not None
        return self.process.stderr.read()


class RollingWriter:
    """:mod:`tests.store.log_roll_writer` running: its acknowledged versions and how many
    times its log rolled over onto a reused file, as they are printed."""

    def __init__(self, path: str, pause: float = 0.0) -> None:
        self.process = subprocess.Popen([sys.executable, WRITER, path, str(pause)], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=ENV)
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()

    @property
    def acked(self) -> list[int]:
        return [int(line) for line in list(self.lines) if line.endswith("\n") and line.strip().isdigit()]

    @property
    def reused(self) -> int:
        return list(self.lines).count("reused\n")

    def wait_until(self, condition: Callable[[], bool], what: str) -> None:
        with self.changed:
            assert self.changed.wait_for(condition, 60), f"the writer never {what}: {self.lines[-3:]}"

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self.thread.join(10)
        assert self.process.stderr is not None
        self.process.stderr.close()


def store_files(path: Path | str) -> dict[str, str]:
    """Every file of the store directory by its content digest."""
    return {name: hashlib.sha256(Path(path, name).read_bytes()).hexdigest() for name in sorted(os.listdir(path))
            if Path(path, name).is_file()}


def sample(last: int) -> list[int]:
    """Versions 1 to ``last`` to read back (a time-travel read of a 60 KB text takes some
    ms): the first and last ten, and thirty between, at random."""
    between = range(11, max(11, last - 9))
    chosen = random.sample(between, min(30, len(between)))
    return sorted({*range(1, min(last, 10) + 1), *chosen, *range(max(1, last - 9), last + 1)})


def test_a_reader_follows_a_writer_that_reuses_logs_through_its_kill(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    writer = RollingWriter(path, pause=0.01)  # some 100 commits a second: the store stays small
    follower: Follower | None = None
    try:
        writer.wait_until(lambda: writer.reused >= 2, "wrote into a reused log twice")
        before = max(writer.acked)
        follower = Follower(path)
        first = follower.ask("follow")
        assert first["reopening"] and first["blob_ok"] and first["version"] >= before, first
        # the writer goes on and writes into a reused log again while the reader follows
        reused = writer.reused
        writer.wait_until(lambda: writer.reused > reused, "wrote into a reused log again")
        for _ in range(3):
            acked = max(writer.acked)
            seen = follower.ask("follow")
            assert seen["blob_ok"] and seen["version"] >= acked, (seen, acked)
        assert follower.ask("history", *sample(seen["version"])) == {"bad": []}
        writer.kill()
        acked = max(writer.acked)
        last = follower.ask("follow")
        assert last["blob_ok"] and last["version"] >= acked, (last, acked)
        files = store_files(path)
        assert follower.ask("follow") == last  # the store did not change: neither did what it reads
        assert follower.ask("history", *range(max(1, acked - 30), last["version"] + 1)) == {"bad": []}
        assert store_files(path) == files
    finally:
        if follower is not None:
            follower.stop()
        if writer.process.poll() is None:
            writer.kill()
    recovered = reusing(path)  # what the reader read is exactly what recovery finds
    try:
        view = recovered.resume(ADDRESS)
        assert (view.version, view.read("/memory/blob")) == (last["version"], blob(last["version"]))
    finally:
        recovered.close()


def test_a_reader_follows_writers_that_do_and_do_not_reuse_logs_in_turn(tmp_path: Path) -> None:
    path = tmp_path / "store"
    writer = ProcessStore.open(path)
    writer.create(Process.builder(ADDRESS).memory("blob", "").build())
    # A reader opened while an ordinary writer held the store, which it follows as RocksDB's secondary.
    follower = Follower(path)
    try:
        assert follower.ask("follow")["reopening"] is False
        writer.close()
        writer = reusing(path)
        handle = writer.resume(ADDRESS)
        last = roll_onto_reused_logs(handle, path, 2)
        seen = follower.ask("follow")
        assert (seen["version"], seen["blob_ok"], seen["reopening"]) == (last, True, True)
        handle.write("/memory/blob", blob(last + 1))
        assert follower.ask("follow")["version"] == last + 1
        writer.close()  # its kept logs stay in the directory
        assert follower.ask("follow")["version"] == last + 1
        fresh = Follower(path)
        try:
            seen = fresh.ask("follow")
            assert (seen["version"], seen["blob_ok"], seen["reopening"]) == (last + 1, True, True)
        finally:
            fresh.stop()
        # Ordinary writers again: the first one's open deletes the kept logs, and once the
        # OPTIONS file of the reusing writer is gone too, the reader is a secondary again.
        for text in ("after", "again"):
            writer = ProcessStore.open(path)
            writer.resume(ADDRESS).write("/memory/blob", text)
            seen = follower.ask("follow")
            assert (seen["version"], seen["text"]) == (last + 2 if text == "after" else last + 3, text)
            writer.close()
        assert follower.ask("follow")["reopening"] is False
        assert follower.ask("history", *sample(last + 1)) == {"bad": []}
    finally:
        writer.close()
        assert "Traceback" not in follower.stop()


def test_a_commit_over_a_reused_log_is_seen_even_when_no_file_stamp_changed(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit written over a reused log's old bytes changes no file size, and file times
    are only as fine as the kernel's clock tick: two commits in one tick leave the same
    stamps. The reader trusts unchanged stamps only once they are a second old (here 30 s,
    so a loaded machine's pauses between the steps below cannot age them past it)."""
    monkeypatch.setattr(rocksdb, "_SETTLED_SECONDS", 30.0)
    path = tmp_path / "store"
    writer = reusing(path)
    handle = writer.create(Process.builder(ADDRESS).memory("blob", "").build())
    last = roll_onto_reused_logs(handle, path, 2)
    reader = ProcessStore.open(path, read_only=True)
    try:
        assert reader.engine.reopens_to_follow  # type: ignore[attr-defined]
        stamps = {name: os.stat(path / name) for name in os.listdir(path)}
        handle.write("/memory/blob", blob(last + 1))
        for name, stat in stamps.items():  # as if written within the same clock tick
            if (path / name).exists():
                os.utime(path / name, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        reader.follow()
        assert reader.resume(ADDRESS).read("/memory/blob") == blob(last + 1)
        # Stamps older than that are trusted: an idle store is not reopened at every follow.
        old = time.time_ns() - 60 * 10**9
        for name in os.listdir(path):
            os.utime(path / name, ns=(old, old))
        reader.follow()
        reopened = reader.engine.reopened  # type: ignore[attr-defined]
        for _ in range(3):
            reader.follow()
            assert reader.resume(ADDRESS).version == last + 1
        assert reader.engine.reopened == reopened  # type: ignore[attr-defined]
        handle.write("/memory/blob", blob(last + 2))  # and a new commit's stamp shows
        reader.follow()
        assert reader.resume(ADDRESS).read("/memory/blob") == blob(last + 2)
        assert reader.engine.reopened == reopened + 1  # type: ignore[attr-defined]
    finally:
        reader.close()
        writer.close()


def run_until_reused_then_kill(path: str, rng: random.Random) -> tuple[list[int], int]:
    """Start the writer, kill it at a random moment after its log rolled over onto a reused
    file twice; return the acknowledged versions and how many such roll-overs it reported."""
    writer = RollingWriter(path)
    try:
        writer.wait_until(lambda: writer.reused >= 2, "wrote into a reused log twice")
        threading.Event().wait(rng.uniform(0.0, 0.15))
    finally:
        writer.kill()
    return writer.acked, writer.reused


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


def test_an_open_during_which_a_log_was_reused_is_made_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only open reads the MANIFEST, then the logs it names as live: a log reused
    (renamed and written over) in between would be missing, so such an open is made again.
    Here the reuse is the rename alone: a kept log renamed to a newer number, as the writer
    does before it writes into it, whose old records the open must not take for new ones."""
    path = tmp_path / "store"
    writer = reusing(path)
    handle = writer.create(Process.builder(ADDRESS).memory("blob", "").build())
    last = roll_onto_reused_logs(handle, path, 2)
    writer.close()  # its kept logs stay in the directory
    opened: list[list[str]] = []
    real = rocksdb._open_read_only

    def racing(where: str) -> Any:
        db = real(where)
        opened.append(sorted(log_files(where)))
        if len(opened) == 1:
            oldest = min(log_files(where))
            os.rename(path / oldest, path / f"{int(oldest[:-4]) + 100000:06d}.log")
        return db

    monkeypatch.setattr(rocksdb, "_open_read_only", racing)
    reader = ProcessStore.open(path, read_only=True)
    try:
        assert len(opened) == 2 and opened[0] != opened[1]
        view = reader.resume(ADDRESS)
        assert (view.version, view.read("/memory/blob")) == (last, blob(last))
    finally:
        reader.close()


def test_a_reopen_that_does_not_finish_in_time_is_refused_and_its_process_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each reopen is first made in a child process (one per reader, kept between
    reopens) and refused when it does not answer within ``open_deadline``, as RocksDB
    spinning on a damaged file would not; the reader stays usable, and closing it ends
    the child."""
    path = tmp_path / "store"
    writer = reusing(path)
    handle = writer.create(Process.builder(ADDRESS).memory("blob", "").build())
    last = roll_onto_reused_logs(handle, path, 2)
    reader = ProcessStore.open(path, read_only=True, open_deadline=1.0)
    try:
        handle.write("/memory/blob", blob(last + 1))
        reader.follow()
        prober = reader.engine._prober  # type: ignore[attr-defined]
        first = prober._process
        assert first is not None and first.poll() is None
        monkeypatch.setattr(rocksdb, "_PROBE", "import sys, time\nfor line in sys.stdin: time.sleep(60)\n")
        prober.close()  # the next reopen starts a child that never answers
        handle.write("/memory/blob", blob(last + 2))
        with pytest.raises(InvalidPersistence) as late:
            reader.follow()
        assert "did not open within 1 s" in late.value.message and str(path) not in late.value.message
        assert prober._process is None
        monkeypatch.undo()  # the next operation reopens, with a new child
        reader.follow()
        assert reader.resume(ADDRESS).read("/memory/blob") == blob(last + 2)
        child = prober._process
        assert child is not None and child.poll() is None
    finally:
        reader.close()
        writer.close()
    assert child.poll() is not None
