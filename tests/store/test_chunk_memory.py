"""The store's memory of tree chunks known to be stored: what it lets a commit skip, and
when it must forget.

A commit whose previous tree is known chunk by chunk stages the chunks it does not
know without reading the database for them. That is safe only while the memory never
names a chunk that is not stored: a failed write, a sweep (through any store object
over the engine) and a walk that stopped at a chunk it only read must each leave the
memory saying no more than the database holds. Every test checks the outcome the way
a reader would: by resuming (which verifies every chunk of the head) in a store opened
afresh.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from svit import Process, tree
from svit.errors import PersistenceUnavailable
from svit.store import ProcessStore
from svit.store.engine import WriteBatch
from svit.store.faults import FailingWrites
from svit.store.keys import CF_NODES
from tests.conftest import reopen

COUNTER = """
(define (main input)
  (let ((next (+ (read "/memory/count") 1)))
    (do (write "/memory/count" next) next)))
"""

DATA = {f"r{i:02d}": {"v": i, "w": [i, i + 1]} for i in range(40)}


def build(address: str, data: dict | None = None) -> Process:
    builder = Process.builder(address).memory("count", 0).library("counter", COUNTER)
    if data is not None:
        builder.memory("data", data)
    return builder.build()


def chunk_digests(root: tree.Node) -> set[bytes]:
    return {digest for digest, _ in tree.new_chunks(root.value, lambda _: False)}


class NodeTraffic:
    """Counts the engine's chunk reads and the chunks each synced write carries."""

    def __init__(self, store: ProcessStore) -> None:
        self.engine = store.engine
        self.reads = 0
        self.written: list[int] = []
        self._get, self._writer = self.engine.get, self.engine.writer

        def get(space: str, key: bytes) -> bytes | None:
            if space == CF_NODES:
                self.reads += 1
            return self._get(space, key)

        def writer(batch: WriteBatch) -> None:
            self.written.append(sum(1 for space, _, _ in batch.operations if space == CF_NODES))
            self._writer(batch)

        self.engine.get = get  # type: ignore[method-assign]
        self.engine.writer = writer

    def close(self) -> None:
        del self.engine.get
        self.engine.writer = self._writer


@pytest.fixture
def traffic(store: ProcessStore) -> Iterator[NodeTraffic]:
    watching = NodeTraffic(store)
    yield watching
    watching.close()


def resumes_verified(store: ProcessStore, address: str) -> Process:
    """The address resumed in a store opened afresh (every chunk of its head verified)."""
    fresh = reopen(store)
    try:
        return fresh.resume(address).process
    finally:
        fresh.close()


def test_a_commit_from_a_known_tree_reads_no_chunk(store: ProcessStore, traffic: NodeTraffic) -> None:
    h = store.create(build("svit://local/t/known", DATA))
    assert store.nodes.knows(h.process.root.value.digest)
    traffic.reads = 0
    for _ in range(5):
        h.exec("/lib/counter")
    h.write("/memory/data/r07/v", 700)
    assert traffic.reads == 0
    # each commit carried only the chunks its change made (those on the changed path)
    assert max(traffic.written[-6:]) <= 6
    assert resumes_verified(store, "svit://local/t/known").read("/memory/data/r07/v") == 700


def test_a_failed_write_forgets_the_chunks_it_carried(store: ProcessStore) -> None:
    h = store.create(build("svit://local/t/failed"))
    before = h.process.root
    with FailingWrites(store), pytest.raises(PersistenceUnavailable):
        h.write("/memory/extra", {"new": [1, 2, 3]})
    assert store.terminal and h.process.root is before
    assert store.engine.chunk_memory == (set(), set())
    # the same change made again after a reopen writes its chunks (none taken as stored)
    again = reopen(store)
    try:
        handle = again.resume("svit://local/t/failed")
        handle.write("/memory/extra", {"new": [1, 2, 3]})
        new = chunk_digests(handle.process.root) - chunk_digests(before)
        assert new and all(again.engine.get(CF_NODES, b"n/" + digest) is not None for digest in new)
    finally:
        again.close()
    assert resumes_verified(store, "svit://local/t/failed").read("/memory/extra") == {"new": [1, 2, 3]}


def test_a_sweep_forgets_the_chunks_it_deleted(store: ProcessStore) -> None:
    first = store.create(build("svit://local/t/swept", DATA))
    digests = chunk_digests(first.process.root)
    assert all(store.nodes.knows(digest) for digest in digests)
    store.remove("svit://local/t/swept")
    assert store.sweep_nodes() > 0
    assert not any(store.nodes.knows(digest) for digest in digests)
    store.create(build("svit://local/t/again", DATA))
    assert resumes_verified(store, "svit://local/t/again").read("/memory/data/r39/w") == [39, 40]


def test_store_objects_over_one_engine_share_one_memory(store: ProcessStore) -> None:
    second = ProcessStore(store.engine)
    store.create(build("svit://local/t/shared", DATA))
    store.remove("svit://local/t/shared")
    assert second.sweep_nodes() > 0  # deletes the chunks the first object wrote
    store.create(build("svit://local/t/shared-again", DATA))  # so it must write them again
    assert resumes_verified(store, "svit://local/t/shared-again").read("/memory/data/r00/v") == 0


def test_separate_stores_keep_separate_memories(tmp_path: Path) -> None:
    with ProcessStore.open(tmp_path / "one") as one, ProcessStore.open(tmp_path / "two") as two:
        h = one.create(build("svit://local/t/one", DATA))
        digest = h.process.root.value.digest
        assert one.nodes.knows(digest) and not two.nodes.knows(digest)
        two.create(build("svit://local/t/one", DATA))
        assert all(two.engine.get(CF_NODES, b"n/" + d) is not None for d in chunk_digests(h.process.root))


@pytest.mark.parametrize("engine_kind", ["rocksdb"], indirect=True)
def test_a_tree_met_through_database_reads_is_not_taken_as_known_whole(store: ProcessStore,
                                                                        traffic: NodeTraffic) -> None:
    # Another process holds the same data; the memory is then lost (a restart, a full memory).
    store.create(build("svit://local/t/first", DATA))
    store.nodes.forget()
    h = store.create(build("svit://local/t/second", DATA))
    root = h.process.root.value.digest
    assert store.nodes.knows(root) and root not in store.engine.chunk_memory[0]
    # A change deep inside the shared data reads what it does not know instead of writing
    # the shared chunks again as new.
    traffic.reads = 0
    h.write("/memory/data/r07/v", 700)
    assert traffic.reads > 0
    assert traffic.written[-1] <= 6
    assert resumes_verified(store, "svit://local/t/second").read("/memory/data/r07/v") == 700
