"""Expectations: a batch applies only if the keys it expects hold exactly what it expects.

A failed expectation fails that batch alone with ``PersistenceConflict``: nothing of it is
written, the other batches of its group are, and the engine stays healthy. On a shared
engine the store checks its head through an expectation (another OS process may have
moved it), and a handle's fences are checked in every commit. Every test here runs on
each engine (the ``store`` fixture).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from svit import Process
from svit.errors import PersistenceAlreadyExists, PersistenceConflict
from svit.store import ProcessStore, records
from svit.store.engine import StorageEngine, WriteBatch
from svit.store.keys import CF_DEFAULT, CF_RECORD

FENCE = b"m/test-fence"
OTHER = b"m/test-other"
ADDRESS = "svit://local/expect/p"

COUNTER = """
(define (main input)
  (let ((next (+ (read "/memory/count") 1)))
    (do (write "/memory/count" next) next)))
"""


def counter(where: str = ADDRESS) -> Process:
    return Process.builder(where).memory("count", 0).library("counter", COUNTER).build()


def put(store: ProcessStore, key: bytes, value: bytes, *, expect: tuple[bytes, bytes | None] | None = None) -> None:
    batch = store.engine.batch()
    batch.put(CF_DEFAULT, key, value)
    if expect is not None:
        batch.expect(CF_DEFAULT, expect[0], expect[1])
    store.engine.write(batch)


def test_a_batch_applies_when_its_expectations_hold(store: ProcessStore) -> None:
    put(store, FENCE, b"1")
    put(store, OTHER, b"a", expect=(FENCE, b"1"))
    put(store, b"m/test-third", b"b", expect=(b"m/test-absent", None))
    assert store.engine.get(CF_DEFAULT, OTHER) == b"a"
    assert store.engine.get(CF_DEFAULT, b"m/test-third") == b"b"


@pytest.mark.parametrize("expected", [b"2", None, b""])
def test_a_failed_expectation_conflicts_writes_nothing_and_leaves_the_engine_healthy(
        store: ProcessStore, expected: bytes | None) -> None:
    put(store, FENCE, b"1")
    with pytest.raises(PersistenceConflict):
        put(store, OTHER, b"a", expect=(FENCE, expected))
    assert store.engine.get(CF_DEFAULT, OTHER) is None
    assert not store.terminal
    put(store, OTHER, b"b", expect=(FENCE, b"1"))
    assert store.engine.get(CF_DEFAULT, OTHER) == b"b"


def test_expecting_absence_conflicts_once_the_key_exists(store: ProcessStore) -> None:
    put(store, OTHER, b"first", expect=(FENCE, None))
    put(store, FENCE, b"now here")
    with pytest.raises(PersistenceConflict):
        put(store, OTHER, b"second", expect=(FENCE, None))
    assert store.engine.get(CF_DEFAULT, OTHER) == b"first"


def test_an_expectation_must_name_a_registered_key_class(store: ProcessStore) -> None:
    batch = store.engine.batch()
    with pytest.raises(Exception, match="unregistered key class"):
        batch.expect(CF_DEFAULT, b"zz/not-a-class", None)


def group(store: ProcessStore, batches: list[WriteBatch]) -> list[BaseException | None]:
    """Queue ``batches`` together and lead their write from this thread: one group."""
    lock = store.engine.lock
    with lock.committing():
        tickets = [lock.submit(batch) for batch in batches]
    outcomes: list[BaseException | None] = []
    for ticket in tickets:
        try:
            lock.wait(ticket)
        except BaseException as exc:
            outcomes.append(exc)
        else:
            outcomes.append(None)
    return outcomes


def test_in_a_group_only_the_batch_whose_expectation_fails_is_left_out(store: ProcessStore) -> None:
    put(store, FENCE, b"1")
    first, refused, later = store.engine.batch(), store.engine.batch(), store.engine.batch()
    first.put(CF_DEFAULT, b"m/test-a", b"a")
    refused.expect(CF_DEFAULT, FENCE, b"stale")
    refused.put(CF_DEFAULT, b"m/test-b", b"b")
    later.expect(CF_DEFAULT, FENCE, b"1")
    later.put(CF_DEFAULT, b"m/test-c", b"c")
    outcomes = group(store, [first, refused, later])
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], PersistenceConflict)
    assert store.engine.get(CF_DEFAULT, b"m/test-a") == b"a"
    assert store.engine.get(CF_DEFAULT, b"m/test-b") is None
    assert store.engine.get(CF_DEFAULT, b"m/test-c") == b"c"
    assert not store.terminal


def test_a_later_batch_of_a_group_sees_the_earlier_batches_writes(store: ProcessStore) -> None:
    move, follow, stale = store.engine.batch(), store.engine.batch(), store.engine.batch()
    move.put(CF_DEFAULT, FENCE, b"2")
    follow.expect(CF_DEFAULT, FENCE, b"2")
    follow.put(CF_DEFAULT, b"m/test-a", b"a")
    stale.expect(CF_DEFAULT, FENCE, None)
    stale.put(CF_DEFAULT, b"m/test-b", b"b")
    outcomes = group(store, [move, follow, stale])
    assert outcomes[:2] == [None, None]
    assert isinstance(outcomes[2], PersistenceConflict)
    assert store.engine.get(CF_DEFAULT, b"m/test-a") == b"a"
    assert store.engine.get(CF_DEFAULT, b"m/test-b") is None


def test_a_deleted_key_is_absent_to_a_later_batch_of_the_group(store: ProcessStore) -> None:
    put(store, FENCE, b"1")
    drop, follow = store.engine.batch(), store.engine.batch()
    drop.delete(CF_DEFAULT, FENCE)
    follow.expect(CF_DEFAULT, FENCE, None)
    follow.put(CF_DEFAULT, b"m/test-a", b"a")
    assert group(store, [drop, follow]) == [None, None]
    assert store.engine.get(CF_DEFAULT, FENCE) is None
    assert store.engine.get(CF_DEFAULT, b"m/test-a") == b"a"


# ---------------------------------------------------------------------------- fences


def test_a_handle_commits_while_its_fence_holds_and_conflicts_once_it_moved(store: ProcessStore) -> None:
    put(store, FENCE, b"epoch-1")
    handle = store.create(counter())
    handle.fences = [(CF_DEFAULT, FENCE, b"epoch-1")]
    assert handle.exec("/lib/counter").output == 1
    put(store, FENCE, b"epoch-2")
    with pytest.raises(PersistenceConflict):
        handle.exec("/lib/counter")
    assert handle.version == 1 and handle.read("/memory/count") == 1
    assert not store.terminal
    # The refused commit left nothing behind: the stored history is the acknowledged one,
    # and a handle fenced on the new epoch continues from it.
    resumed = store.resume(ADDRESS)
    assert resumed.version == 1
    resumed.fences = [(CF_DEFAULT, FENCE, b"epoch-2")]
    assert resumed.exec("/lib/counter").output == 2
    assert store.resume(ADDRESS).read("/memory/count") == 2


def test_a_fence_on_an_absent_key_holds_until_the_key_appears(store: ProcessStore) -> None:
    handle = store.create(counter())
    handle.fences = [(CF_DEFAULT, FENCE, None)]
    assert handle.exec("/lib/counter").output == 1
    put(store, FENCE, b"taken")
    with pytest.raises(PersistenceConflict):
        handle.exec("/lib/counter")
    assert store.resume(ADDRESS).version == 1


def test_a_handle_has_no_fences_by_default(store: ProcessStore) -> None:
    assert store.create(counter()).fences == []


# ---------------------------------------------------------------------------- another writer


class OtherWriter(StorageEngine):
    """The same database seen through a second engine object with its own store lock: a
    store over it writes as another OS process sharing the database would."""

    shared = True

    def __init__(self, engine: StorageEngine) -> None:
        super().__init__(engine.path)
        self.engine = engine

    def apply(self, batch: WriteBatch) -> None:
        self.engine.apply(batch)

    def get(self, space: str, key: bytes) -> bytes | None:
        return self.engine.get(space, key)

    def scan(self, space: str, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        return self.engine.scan(space, prefix, start)

    def last_key(self, space: str, prefix: bytes) -> bytes | None:
        return self.engine.last_key(space, prefix)

    def sequence(self) -> int:
        return self.engine.sequence()

    def describe(self) -> dict[str, Any]:
        return self.engine.describe()

    def _release(self) -> None:
        pass


def test_on_a_shared_engine_a_head_moved_by_another_writer_is_a_conflict(store: ProcessStore) -> None:
    store.engine.shared = True  # what a PostgreSQL engine is; forced here for RocksDB too
    first = store.create(counter())
    first.exec("/lib/counter")
    other = ProcessStore(OtherWriter(store.engine))
    assert other.resume(ADDRESS).exec("/lib/counter").output == 2
    with pytest.raises(PersistenceConflict):
        first.exec("/lib/counter")
    assert first.version == 1
    assert not store.terminal
    resumed = store.resume(ADDRESS)
    assert resumed.version == 2
    assert resumed.exec("/lib/counter").output == 3


def test_on_a_shared_engine_the_head_is_checked_when_the_batch_is_written(store: ProcessStore) -> None:
    store.engine.shared = True
    handle = store.create(counter())
    handle.exec("/lib/counter")
    rival = ProcessStore(OtherWriter(store.engine)).resume(ADDRESS)
    original = store.engine.writer
    calls = 0

    def rival_commits_first(batch: WriteBatch) -> None:
        # Between the store's read of the head and its write, another writer commits.
        nonlocal calls
        calls += 1
        if calls == 1:
            rival.exec("/lib/counter")
        original(batch)

    store.engine.writer = rival_commits_first
    try:
        with pytest.raises(PersistenceConflict):
            handle.exec("/lib/counter")
    finally:
        store.engine.writer = original
    assert calls == 1 and handle.version == 1
    assert not store.terminal
    # The cache was not left holding the refused head: the winner's history is stored,
    # and a fresh handle continues from it.
    resumed = store.resume(ADDRESS)
    assert resumed.version == 2 and resumed.read("/memory/count") == 2
    assert resumed.exec("/lib/counter").output == 3
    assert store.resume(ADDRESS).version == 3


def test_on_a_shared_engine_creating_an_address_another_writer_created_is_refused(store: ProcessStore) -> None:
    store.engine.shared = True
    original = store.engine.writer

    other = ProcessStore(OtherWriter(store.engine))

    def rival_creates_first(batch: WriteBatch) -> None:
        store.engine.writer = original
        other.create(counter())
        original(batch)

    store.engine.writer = rival_creates_first
    try:
        with pytest.raises(PersistenceAlreadyExists):
            store.create(counter())
    finally:
        store.engine.writer = original
    assert store.resume(ADDRESS).version == 0
    assert not store.terminal


def test_only_the_server_engine_is_shared(store: ProcessStore, engine_kind: str) -> None:
    assert store.engine.shared is (engine_kind == "postgresql")


def test_a_batch_left_out_of_its_group_does_not_hide_nodes_a_later_batch_needs(store: ProcessStore) -> None:
    # Identical processes at two addresses commit identical trees, so their batches hold
    # the same new nodes; the first one's fence fails inside the group, the second's
    # commit must still carry (and store) every node its head reaches.
    put(store, FENCE, b"1")
    refused, written = (store.create(counter(f"svit://local/expect/{name}")) for name in ("b", "c"))
    # The first write (held) carries a different tree, so it stores none of those nodes.
    blocker = store.create(Process.builder("svit://local/expect/a").memory("count", 10)
                           .library("counter", COUNTER).build())
    refused.fences = [(CF_DEFAULT, FENCE, b"stale")]
    lock = store.engine.lock
    original = store.engine.writer
    entered, release = threading.Event(), threading.Event()

    def held_first(batch: WriteBatch) -> None:
        if not entered.is_set():
            entered.set()
            release.wait(20)
        original(batch)

    outcomes: dict[str, BaseException | None] = {}

    def commit(name: str, handle: Any) -> threading.Thread:
        def run() -> None:
            try:
                handle.exec("/lib/counter")
                outcomes[name] = None
            except BaseException as exc:
                outcomes[name] = exc
        thread = threading.Thread(target=run)
        thread.start()
        return thread

    store.engine.writer = held_first
    try:
        threads = [commit("blocker", blocker)]
        assert entered.wait(20)
        threads.append(commit("refused", refused))
        deadline = time.monotonic() + 20
        while lock.pending < 2:
            assert time.monotonic() < deadline
            time.sleep(0.002)
        threads.append(commit("written", written))
        while lock.pending < 3:
            assert time.monotonic() < deadline
            time.sleep(0.002)
        release.set()
        for thread in threads:
            thread.join(30)
    finally:
        release.set()
        store.engine.writer = original
    assert outcomes["blocker"] is None and outcomes["written"] is None
    assert isinstance(outcomes["refused"], PersistenceConflict)
    assert not store.terminal
    assert store.resume("svit://local/expect/c").read("/memory/count") == 1
    assert store.resume("svit://local/expect/b").version == 0
    refused.fences = []
    assert store.resume("svit://local/expect/b").exec("/lib/counter").output == 1


# ---------------------------------------------------------------------------- the head a commit expects


def _expected_heads(store: ProcessStore) -> list[tuple[bytes, bytes | None, bytes | None]]:
    """Wrap the store's writer: for every head expectation written, ``(key, expected bytes,
    the bytes stored under that key just before the write)``."""
    seen: list[tuple[bytes, bytes | None, bytes | None]] = []
    original = store.engine.writer

    def writer(batch: WriteBatch) -> None:
        for space, key, value in batch.expectations:
            if space == CF_RECORD and key.startswith(b"h/"):
                seen.append((key, value, store.engine.get(space, key)))
        original(batch)

    store.engine.writer = writer
    return seen


def _resealed(store: ProcessStore, address: str, stored: bytes) -> bytes:
    head = records.decode_head(stored, address)
    return records.head_record(address, head["base_hash"], records.Head(head["position"], head["hash"]),
                               head["process_version"], head["root_hash"])


def test_on_a_shared_engine_each_commit_expects_exactly_the_stored_head_bytes(store: ProcessStore) -> None:
    """Whatever made the head a commit chains to (a create, a commit, a resume, a fork, a
    cut), the commit expects exactly the bytes stored for it: the same bytes the head record
    sealed again from its fields would be."""
    store.engine.shared = True
    seen = _expected_heads(store)
    handle = store.create(counter())
    for _ in range(3):
        handle.exec("/lib/counter")
    handle = store.resume(ADDRESS)
    handle.exec("/lib/counter")
    child = store.fork(ADDRESS, "svit://local/expect/child")
    child.exec("/lib/counter")
    handle.exec("/lib/counter")
    fresh = store.create(counter("svit://local/expect/cut"))
    fresh.exec("/lib/counter")
    fresh.cut()
    fresh.exec("/lib/counter")
    commits = [entry for entry in seen if entry[1] is not None]
    assert len(commits) >= 8
    for key, expected, stored in commits:
        assert expected == stored
        assert stored is not None
        address = key[2:].decode()
        assert expected == _resealed(store, address, stored)
    assert store.resume(ADDRESS).version == 5 and store.resume("svit://local/expect/child").version == 5


def test_on_a_shared_engine_a_commit_does_not_seal_the_head_it_chains_to_again(
        store: ProcessStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The head a commit expects is the bytes written (or read) with it, kept by the store:
    no commit seals that head record a second time."""
    store.engine.shared = True
    handle = store.create(counter())
    resumed = store.resume(ADDRESS)
    sealed: list[str] = []
    original = store._head_record

    def counting(address: str, *args: Any) -> bytes:
        sealed.append(address)
        return original(address, *args)

    monkeypatch.setattr(store, "_head_record", counting)
    for _ in range(3):
        resumed.exec("/lib/counter")
    assert sealed == []
    assert handle.version == 0 and store.resume(ADDRESS).version == 3
