"""The RocksDB engine's write: the batch goes to the log, then the log is synced, then acknowledged.

RocksDB's ``SyncWAL`` (rocksdict's ``flush_wal(True)``) lets other threads run while the
log is synced, so commits of other processes prepare and queue meanwhile and share the
next sync. These tests hold the real engine's log sync (a wrapper around its database
object, the only thing replaced) to check what that must never change: no commit is
acknowledged before the sync covering it returned; a failed sync fails the group and
makes the store terminal; a reader outside the store lock never sees a batch whose sync
is still running, while a commit preparing under the lock is not held up by it.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from svit import Process
from svit.errors import PersistenceUnavailable
from svit.store import ProcessStore, keys
from svit.store.keys import CF_RECORD
from svit.store.rocksdb import RocksDBEngine
from tests.store.test_group_commit import COUNTER, address, wait_until

THREADS = 8


class HeldLog:
    """Stands in for the engine's database: passes everything through, records the calls
    of each write, and holds the log sync until released (or fails it)."""

    def __init__(self, engine: RocksDBEngine) -> None:
        self.engine = engine
        self.db = engine._db
        self.calls: list[str] = []
        self.syncing = threading.Event()
        self.release = threading.Event()
        self.fail = False
        engine._db = self  # type: ignore[assignment]

    def write(self, batch: Any, options: Any) -> None:
        self.calls.append(f"write sync={options.sync}")
        self.db.write(batch, options)

    def flush_wal(self, sync: bool = True) -> None:
        self.calls.append(f"flush_wal sync={sync}")
        self.syncing.set()
        assert self.release.wait(20), "the held sync was never released"
        if self.fail:
            raise OSError(5, "Input/output error")
        self.db.flush_wal(sync)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    def restore(self) -> None:
        self.release.set()
        self.engine._db = self.db


@pytest.fixture
def store(tmp_path):
    opened = ProcessStore.open(tmp_path / "store")
    yield opened
    if not opened.closed:
        try:
            opened.close()
        except PersistenceUnavailable:
            pass


def counter(where: str) -> Process:
    return Process.builder(where).memory("count", 0).library("counter", COUNTER).build()


def test_each_write_is_a_log_write_then_a_log_sync_and_is_acknowledged_after_it(store):
    handle = store.create(counter(address(0)))
    held = HeldLog(store.engine)
    done = threading.Event()

    def commit() -> None:
        handle.exec("/lib/counter")
        done.set()

    worker = threading.Thread(target=commit)
    worker.start()
    assert held.syncing.wait(10)
    assert not done.wait(0.2)  # written to the log, not yet synced: not acknowledged
    assert handle.version == 0
    held.release.set()
    worker.join(10)
    assert done.is_set() and handle.version == 1
    assert held.calls == ["write sync=False", "flush_wal sync=True"]
    held.restore()


def test_commits_prepared_while_the_log_syncs_share_the_next_sync(store):
    handles = [store.create(counter(address(n))) for n in range(THREADS)]
    held = HeldLog(store.engine)
    lock = store.engine.lock
    writes_before = lock.writes

    def commit(n: int) -> None:
        handles[n].exec("/lib/counter")

    first = threading.Thread(target=commit, args=(0,))
    first.start()
    assert held.syncing.wait(10)
    others = [threading.Thread(target=commit, args=(n,)) for n in range(1, THREADS)]
    for thread in others:
        thread.start()
    # The sync in progress holds one commit; the others prepare and queue meanwhile.
    wait_until(lambda: lock.pending == THREADS)
    assert all(h.version == 0 for h in handles)
    held.release.set()
    for thread in [first, *others]:
        thread.join(10)
    assert [h.version for h in handles] == [1] * THREADS
    assert lock.writes - writes_before == 2  # one sync for the first, one for the seven queued behind it
    assert held.calls.count("flush_wal sync=True") == 2
    held.restore()


def test_a_failed_log_sync_fails_its_group_and_the_store_is_terminal(store, tmp_path):
    handles = [store.create(counter(address(n))) for n in range(3)]
    held = HeldLog(store.engine)
    held.fail = True
    outcome: list[BaseException | None] = []

    def commit(n: int) -> None:
        try:
            handles[n].exec("/lib/counter")
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    threads = [threading.Thread(target=commit, args=(n,)) for n in range(3)]
    threads[0].start()
    assert held.syncing.wait(10)
    for thread in threads[1:]:
        thread.start()
    wait_until(lambda: store.engine.lock.pending == 3)
    held.release.set()
    for thread in threads:
        thread.join(10)
    assert len(outcome) == 3 and all(isinstance(exc, PersistenceUnavailable) for exc in outcome)
    assert store.terminal and [h.version for h in handles] == [0, 0, 0]
    held.restore()
    store.close()
    reopened = ProcessStore.open(tmp_path / "store")
    try:
        # Nothing was acknowledged; whatever the log kept, each address resumes consistently.
        for n in range(3):
            assert reopened.resume(address(n)).version in (0, 1)
    finally:
        reopened.close()


def test_a_reader_outside_the_store_lock_waits_for_the_sync(store):
    handle = store.create(counter(address(0)))
    head_key = keys.head_key(address(0))
    before = store.engine.get(CF_RECORD, head_key)
    held = HeldLog(store.engine)
    worker = threading.Thread(target=handle.exec, args=("/lib/counter",))
    worker.start()
    assert held.syncing.wait(10)
    seen: list[bytes | None] = []
    reader = threading.Thread(target=lambda: seen.append(store.engine.get(CF_RECORD, head_key)))
    reader.start()
    reader.join(0.2)
    assert reader.is_alive() and seen == []  # the new head is in the log, its sync not done
    # The commit path, holding the store lock, reads at once (its batch queues behind this one).
    with store.engine.lock.committing():
        assert store.engine.get(CF_RECORD, head_key) != before
    held.release.set()
    worker.join(10)
    reader.join(10)
    assert seen == [store.engine.get(CF_RECORD, head_key)] and seen[0] != before
    held.restore()


class GatedLog(HeldLog):
    """Holds each log sync until its own gate (in call order) is opened."""

    def __init__(self, engine: RocksDBEngine, count: int) -> None:
        super().__init__(engine)
        self.gates = [threading.Event() for _ in range(count)]
        self.entered = [threading.Event() for _ in range(count)]
        self.syncs = 0

    def flush_wal(self, sync: bool = True) -> None:
        number = self.syncs
        self.syncs += 1
        self.entered[number].set()
        assert self.gates[number].wait(20), "a held sync was never released"
        self.db.flush_wal(sync)

    def restore(self) -> None:
        for gate in self.gates:
            gate.set()
        super().restore()


def test_a_reader_waits_only_for_the_syncs_begun_before_it(store):
    first, second = store.create(counter(address(0))), store.create(counter(address(1)))
    head_key = keys.head_key(address(0))
    held = GatedLog(store.engine, 2)
    committers = [threading.Thread(target=first.exec, args=("/lib/counter",))]
    committers[0].start()
    assert held.entered[0].wait(10)
    seen: list[bytes | None] = []
    reader = threading.Thread(target=lambda: seen.append(store.engine.get(CF_RECORD, head_key)))
    reader.start()
    committers.append(threading.Thread(target=second.exec, args=("/lib/counter",)))
    committers[1].start()
    wait_until(lambda: store.engine.lock.pending == 2)
    held.gates[0].set()
    assert held.entered[1].wait(10)  # the second commit's sync has begun and is held
    reader.join(10)
    assert not reader.is_alive() and not held.gates[1].is_set()  # it did not wait for the second sync
    assert seen[0] is not None and first.version == 1 and second.version == 0
    held.gates[1].set()
    for thread in committers:
        thread.join(10)
    assert second.version == 1
    held.restore()


def test_a_stream_of_later_syncs_does_not_starve_a_reader(store):
    """The rule itself, on the engine's counts: a reader that found one sync in progress
    returns once that one ended, though another write has begun since."""
    store.create(counter(address(0)))
    engine = store.engine
    assert isinstance(engine, RocksDBEngine)
    head_key = keys.head_key(address(0))
    begun, ended = engine._begun, engine._ended
    engine._begun = begun + 1  # a write whose sync is in progress
    seen: list[bytes | None] = []
    reader = threading.Thread(target=lambda: seen.append(engine.get(CF_RECORD, head_key)))
    reader.start()
    wait_until(lambda: engine._waiting == 1)
    with engine._synced:
        engine._begun = begun + 2  # the next write begins before the first one's end is seen
        engine._ended = ended + 1
        engine._synced.notify_all()
    reader.join(10)
    assert not reader.is_alive() and seen[0] is not None
    engine._ended = ended + 2


def test_a_batch_whose_log_sync_failed_is_shown_to_no_reader(store):
    """The batch is in RocksDB's memory table once written, before its log sync: a reader
    that waited for that sync, or reads after it failed, must be refused (the store is
    terminal), never shown a commit that was not made durable (the server's process
    endpoint reads the head this way, outside the store lock)."""
    address_0 = address(0)
    handle = store.create(counter(address_0))
    held = HeldLog(store.engine)
    held.fail = True
    failed: list[BaseException] = []

    def commit() -> None:
        try:
            handle.exec("/lib/counter")
        except PersistenceUnavailable as exc:
            failed.append(exc)

    worker = threading.Thread(target=commit)
    worker.start()
    assert held.syncing.wait(10)
    seen: list[Any] = []

    def read() -> None:
        try:
            seen.append(store.stored_head(address_0))
        except PersistenceUnavailable as exc:
            seen.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(0.2)
    assert reader.is_alive() and seen == []  # waiting for the sync
    held.release.set()
    worker.join(10)
    reader.join(10)
    assert len(failed) == 1 and store.terminal and handle.version == 0
    assert len(seen) == 1 and isinstance(seen[0], PersistenceUnavailable), seen
    assert seen[0].reason == "terminal"
    for read_again in (lambda: store.stored_head(address_0),
                       lambda: store.engine.get(CF_RECORD, keys.head_key(address_0)),
                       lambda: list(store.engine.scan(CF_RECORD, b"")),
                       lambda: store.engine.last_key(CF_RECORD, b"")):
        with pytest.raises(PersistenceUnavailable) as refused:
            read_again()
        assert refused.value.reason == "terminal"
    held.restore()
