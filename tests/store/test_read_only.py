"""``ProcessStore.open(path, read_only=True)``: looking at a store while another process writes it.

A reader takes no lock, follows the writer's commits (seen while it runs), refuses
every write before anything is written, and leaves the store's files as they were.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from svit import Process
from svit.errors import PersistenceNotFound, PersistenceUnavailable
from svit.store import ProcessStore
from svit.store.archive import MemoryArchive
from svit.store.events import StoreEventLog
from svit.store.holder import HOLDER_FILE

ROOT = str(Path(__file__).resolve().parents[2])
WRITER = Path(__file__).with_name("follow_writer.py")
ADDR = "svit://local/readers/counter"
COUNTER = '(define (main input) (let ((n (+ (read "/memory/n") 1))) (do (write "/memory/n" n) n)))'
ENV = dict(os.environ, PYTHONPATH=ROOT)


class Writer:
    """The writer subprocess: reads its ``committed VERSION N`` lines."""

    def __init__(self, path: Path) -> None:
        self.process = subprocess.Popen([sys.executable, str(WRITER), str(path), ADDR], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=ENV, text=True)

    def next_commit(self) -> tuple[int, int]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().split()
        assert line and line[0] == "committed", line
        return int(line[1]), int(line[2])

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[tuple[Path, Writer]]:
    path = tmp_path / "store"
    running = Writer(path)
    try:
        running.next_commit()  # created
        yield path, running
    finally:
        running.stop()


def _svit(path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "svit.cli", *argv, "--store", str(path)], capture_output=True,
                          text=True, env=ENV, timeout=60)


def _files(path: Path) -> dict[str, str]:
    """Every file of the store directory by its content digest (what a reader must not change)."""
    return {name: hashlib.sha256((path / name).read_bytes()).hexdigest() for name in sorted(os.listdir(path))
            if (path / name).is_file()}


def test_a_reader_in_another_process_sees_each_commit_while_the_writer_runs(writer: tuple[Path, Writer]) -> None:
    path, running = writer
    reader = ProcessStore.open(path, read_only=True)
    try:
        assert reader.read_only
        for _ in range(5):
            version, n = running.next_commit()
            # A bound on a hang, not a speed test: a quiet machine sees it in a few ms.
            deadline = time.monotonic() + 30.0
            while True:
                head = reader.stored_head(ADDR)
                if head is not None and head["process_version"] >= version:
                    break
                assert time.monotonic() < deadline, f"version {version} not seen while the writer runs"
                time.sleep(0.01)
            assert reader.resume(ADDR).read("/memory/n") >= n
    finally:
        reader.close()


def test_reading_commands_run_while_the_writer_commits(writer: tuple[Path, Writer]) -> None:
    path, running = writer
    version, n = running.next_commit()
    read = _svit(path, "read", ADDR, "/memory/n")
    assert read.returncode == 0, read.stderr
    assert int(read.stdout) >= n
    log = _svit(path, "log", ADDR)
    assert log.returncode == 0, log.stderr
    assert max(entry["version"] for entry in json.loads(log.stdout)) >= version
    tree = _svit(path, "tree", ADDR, "/memory")
    assert tree.returncode == 0 and "n" in tree.stdout, tree.stderr
    # A writing command is refused, naming who holds the store.
    write = _svit(path, "write", ADDR, "/memory/x", "1")
    assert write.returncode == 1
    assert f"held by pid {running.process.pid} (follow-writer, since " in write.stderr, write.stderr
    assert write.stderr.startswith("svit: persistence_unavailable: ")


def _store_with_history(path: Path) -> None:
    with ProcessStore.open(path) as store:
        handle = store.create(Process.builder(ADDR).memory("n", 0).library("count", COUNTER).build())
        handle.exec("/lib/count")
        handle.store_snapshot()


REFUSED = {
    "write": lambda store, h: h.write("/memory/n", 9),
    "remove": lambda store, h: h.remove("/memory/n"),
    "exec": lambda store, h: h.exec("/lib/count"),
    "exec_inline": lambda store, h: h.exec_inline('(define (main input) (write "/memory/n" 7))'),
    "enqueue_inbox": lambda store, h: h.enqueue_inbox({"message_id": "m", "body": 1}),
    "store_snapshot": lambda store, h: h.store_snapshot(),
    "cut": lambda store, h: h.cut(),
    "append_thread_event": lambda store, h: StoreEventLog(store).append(ADDR, "s", "note", {"n": 1}),
    "create": lambda store, h: store.create(Process.builder("svit://local/readers/other").build()),
    "fork": lambda store, h: store.fork(ADDR, "svit://local/readers/child"),
    "remove_address": lambda store, h: store.remove(ADDR),
    "reset_index": lambda store, h: store.reset_index(),
    "sweep_nodes": lambda store, h: store.sweep_nodes(),
    "archive_cut": lambda store, h: store.archive_cut(),
    "deliver": lambda store, h: store.mailbox.deliver(h),
}


@pytest.mark.parametrize("operation", sorted(REFUSED))
def test_every_write_is_refused_and_nothing_changes(tmp_path: Path, operation: str) -> None:
    path = tmp_path / "store"
    _store_with_history(path)
    before = _files(path)
    store = ProcessStore.open(path, read_only=True)
    handle = store.resume(ADDR)
    digests = store.record_digests()
    with pytest.raises(PersistenceUnavailable) as refused:
        REFUSED[operation](store, handle)
    assert refused.value.code == "persistence_unavailable" and refused.value.reason == "read_only"
    assert "opened read-only" in refused.value.message
    # The handle and the store are as they were, and still usable.
    assert handle.version == 1 and handle.read("/memory/n") == 1
    assert not store.terminal and store.record_digests() == digests
    assert store.resume(ADDR).read("/memory/n") == 1
    store.close()
    assert _files(path) == before


def test_an_archive_export_from_a_reader_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _store_with_history(path)
    with ProcessStore.open(path, read_only=True) as store:
        result = MemoryArchive(str(tmp_path / "archive")).export(store)
    assert result.outcome == "incomplete", result
    assert not list(tmp_path.glob("archive/generation-*"))


def test_a_reader_leaves_every_file_as_it_was_and_its_scratch_directory_goes(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "store"
    _store_with_history(path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    before = _files(path)
    store = ProcessStore.open(path, read_only=True)
    assert [p.name.startswith("svit-reader-") for p in scratch.iterdir()] == [True]
    handle = store.resume(ADDR)
    assert handle.read("/memory/n") == 1
    assert len(handle.query()) == 1 and store.addresses() == [ADDR]
    store.close()
    assert list(scratch.iterdir()) == []
    assert _files(path) == before
    assert not (path / HOLDER_FILE).exists()


def test_a_reader_follows_a_writer_in_the_same_process(tmp_path: Path) -> None:
    path = tmp_path / "store"
    writer = ProcessStore.open(path)
    handle = writer.create(Process.builder(ADDR).memory("n", 0).build())
    reader = ProcessStore.open(path, read_only=True)
    try:
        assert reader.resume(ADDR).version == 0
        handle.write("/memory/n", 5)
        reader.follow()  # at once, rather than at the next operation after a few ms
        assert reader.stored_head(ADDR)["process_version"] == 1  # type: ignore[index]
        assert reader.resume(ADDR).read("/memory/n") == 5
        handle.write("/memory/n", 6)
        time.sleep(0.06)  # one follow interval: the next operation catches up by itself
        assert reader.resume(ADDR).read("/memory/n") == 6
    finally:
        reader.close()
        writer.close()


def test_no_store_yet_is_not_found_and_nothing_is_created(tmp_path: Path) -> None:
    path = tmp_path / "absent"
    with pytest.raises(PersistenceNotFound):
        ProcessStore.open(path, read_only=True)
    assert not path.exists()


def test_a_writer_records_itself_and_removes_the_record_at_close(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = ProcessStore.open(path, holder="svit serve")
    record: dict[str, Any] = json.loads((path / HOLDER_FILE).read_text())
    assert record["pid"] == os.getpid() and record["command"] == "svit serve"
    assert abs(record["since"] - time.time()) < 60
    with pytest.raises(PersistenceUnavailable) as refused:
        ProcessStore.open(path)
    assert refused.value.reason == "in_use"
    assert f"pid {os.getpid()} (svit serve, since " in refused.value.message
    store.close()
    assert not (path / HOLDER_FILE).exists()


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)
    return child.pid


def test_a_stale_holder_record_is_replaced_by_the_next_writer(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "store"
    ProcessStore.open(path).close()
    dead = _dead_pid()
    (path / HOLDER_FILE).write_text(json.dumps({"command": "svit serve", "pid": dead, "since": 1_700_000_000.0}))
    with caplog.at_level("WARNING", logger="svit.store"):
        store = ProcessStore.open(path)
    assert any(f"pid {dead} (svit serve, since 2023-11-14T22:13:20Z)" in r.getMessage() and "did not close" in r.getMessage()
               for r in caplog.records if r.name == "svit.store")
    assert json.loads((path / HOLDER_FILE).read_text())["pid"] == os.getpid()
    store.close()


@pytest.mark.parametrize("since", ["1e300", "Infinity", "NaN", "-1e20"])
def test_a_holder_record_with_an_impossible_time_is_only_a_vaguer_message(tmp_path: Path, since: str) -> None:
    # The record is advisory: a damaged time must not stop the next writer (nor leave its
    # store open behind a traceback), only make the message less precise.
    path = tmp_path / "store"
    ProcessStore.open(path).close()
    (path / HOLDER_FILE).write_text(f'{{"command": "svit serve", "pid": {_dead_pid()}, "since": {since}}}')
    store = ProcessStore.open(path)
    try:
        assert json.loads((path / HOLDER_FILE).read_text())["pid"] == os.getpid()
    finally:
        store.close()
    assert not (path / HOLDER_FILE).exists()


def test_a_held_store_whose_record_names_a_dead_process_says_it_is_stale(tmp_path: Path) -> None:
    path = tmp_path / "store"
    holder = subprocess.Popen([sys.executable, str(Path(__file__).with_name("hold_store.py")), str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=ENV)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"ready"
        live = json.loads((path / HOLDER_FILE).read_text())
        assert live["pid"] == holder.pid and live["command"] == "hold_store.py"
        with pytest.raises(PersistenceUnavailable) as named:
            ProcessStore.open(path)
        assert f"held by pid {holder.pid} (hold_store.py, since " in named.value.message
        dead = _dead_pid()
        (path / HOLDER_FILE).write_text(json.dumps({"command": "svit chat", "pid": dead, "since": 1_700_000_000.0}))
        with pytest.raises(PersistenceUnavailable) as stale:
            ProcessStore.open(path)
        assert stale.value.reason == "in_use"
        assert f"names pid {dead} (svit chat, since 2023-11-14T22:13:20Z), which is no longer running" in stale.value.message
        assert "stale" in stale.value.message
        (path / HOLDER_FILE).unlink()
        with pytest.raises(PersistenceUnavailable) as unnamed:
            ProcessStore.open(path)
        assert "left no holder record" in unnamed.value.message
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


def test_on_every_engine_a_reader_sees_commits_and_refuses_writes(store: ProcessStore, store_location: str) -> None:
    handle = store.create(Process.builder(ADDR).memory("n", 0).build())
    reader = ProcessStore.open(store_location, read_only=True)
    try:
        assert reader.read_only and reader.resume(ADDR).read("/memory/n") == 0
        handle.write("/memory/n", 3)
        reader.follow()
        view = reader.resume(ADDR)
        assert view.read("/memory/n") == 3 and view.version == 1
        with pytest.raises(PersistenceUnavailable) as refused:
            view.write("/memory/n", 4)
        assert refused.value.reason == "read_only"
        with pytest.raises(PersistenceUnavailable):
            reader.create(Process.builder("svit://local/readers/other").build())
        assert store.resume(ADDR).read("/memory/n") == 3 and reader.addresses() == [ADDR]
    finally:
        reader.close()
    handle.write("/memory/n", 5)  # the writer is unaffected by the reader's coming and going
    assert store.resume(ADDR).version == 2


def test_a_postgresql_database_without_a_store_is_not_found_and_left_alone(postgresql_url: str) -> None:
    import psycopg

    with pytest.raises(PersistenceNotFound):
        ProcessStore.open(postgresql_url, read_only=True)
    with psycopg.connect(postgresql_url) as conn:
        tables = conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() "
                              "AND table_name LIKE 'svit\\_%'").fetchone()
    assert tables == (0,)


def test_a_reader_sees_the_last_commit_before_the_writer_flushes_or_closes(tmp_path: Path) -> None:
    """RocksDB's secondary keeps answering point reads of keys written just before a flush
    from its old memory table; the reader opens a fresh instance when the writer's log
    files change, so the head it reads always matches the history it scans."""
    path = tmp_path / "store"
    writer = ProcessStore.open(path)
    handle = writer.create(Process.builder(ADDR).memory("n", 0).build())
    reader = ProcessStore.open(path, read_only=True)
    try:
        for n in range(1, 6):
            handle.write("/memory/n", n)
            writer.engine._db.flush()  # what a full memory table does
            reader.follow()
            view = reader.resume(ADDR)
            assert (view.version, view.read("/memory/n")) == (n, n)
        for n in range(6, 9):  # a writer that commits and exits, then another one
            handle.write("/memory/n", n)
            writer.close()  # RocksDB flushes at close
            reader.follow()
            assert reader.resume(ADDR).read("/memory/n") == n
            writer = ProcessStore.open(path)
            handle = writer.resume(ADDR)
        assert reader.engine.reopened >= 1  # type: ignore[attr-defined]
    finally:
        reader.close()
        writer.close()
