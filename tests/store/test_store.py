"""The durable store: reference §10 and §13 items 16, 56-62, tampering, key classes,
reset_index, forks/cuts, queries, remove, fault injection, and a stateful model test."""

from __future__ import annotations

import shutil
import tempfile

import pytest
import rocksdict
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from svit import Mount, Process
from svit.errors import (
    InvalidPersistence,
    PersistenceAlreadyExists,
    PersistenceConflict,
    PersistenceNotFound,
    PersistenceReferenced,
    PersistenceUnavailable,
    ResourceLimitExceeded,
)
from svit.store import KEY_CLASSES, REBUILDABLE, ProcessStore, StoreSnapshot, codec, keys
from svit.store import store as store_module
from svit.store.faults import FailingWrites
from tests.conftest import location_of, raw_db, reopen, rewrite_raw

ADDR = "svit://local/test/counter"
CHILD = "svit://local/test/child"
COUNTER = """
(define (main input)
  (let ((next (+ (read "/memory/count") 1)))
    (do (write "/memory/count" next) (write "/memory/last" input) next)))
"""
IDENTITY = "(define (main input) input)"


def counter(address: str = ADDR, **memory) -> Process:
    builder = Process.builder(address).memory("count", 0).library("counter", COUNTER).library("identity", IDENTITY)
    for name, value in memory.items():
        builder.memory(name, value)
    return builder.build()


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "store")


def tamper(store: ProcessStore, column_family: str, key: bytes, change) -> ProcessStore:
    """Close the store, rewrite one stored value with ``change(old) -> new`` (None deletes), reopen."""
    location = location_of(store)
    store.close()
    rewrite_raw(location, column_family, key, change)
    return ProcessStore.open(location)


def flip(index: int):
    def change(data: bytes) -> bytes:
        i = index % len(data)
        return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]

    return change


# ---------------------------------------------------------------------------
# §13 items


def test_item16_identity_activation_stores_empty_mutation_list(store):
    h = store.create(counter())
    activation = h.exec("/lib/identity", {"x": 1})
    assert activation.version == 1 and activation.output == {"x": 1}
    [tx] = h.query()
    assert tx.mutations == [] and tx.touched_paths == [] and tx.source == "activation"
    assert tx.process_version_before == 0 and tx.process_version_after == 1
    resumed = reopen(store).resume(ADDR)
    assert resumed.version == 1 and resumed.root_hash == h.root_hash


def test_item56_exec_drop_resume(store):
    h = store.create(counter())
    h.exec("/lib/counter", "hi")
    root_hash = h.root_hash
    del h
    store = reopen(store)
    r = store.resume(ADDR)
    assert r.version == 1 and r.read("/memory/count") == 1 and r.read("/memory/last") == "hi"
    assert r.root_hash == root_hash
    [tx] = r.query(path_prefix="/memory")
    assert tx.touched_paths == ["/memory/count", "/memory/last"]
    assert tx.position == 0
    store.close()


def test_item57_stale_handle_conflict_keeps_old_state(store):
    store.create(counter())
    a = store.resume(ADDR)
    b = store.resume(ADDR)
    a.write("/memory/x", 1)
    before = (b.version, b.root_hash, b.process.snapshot())
    with pytest.raises(PersistenceConflict):
        b.write("/memory/x", 2)
    assert (b.version, b.root_hash, b.process.snapshot()) == before
    assert b.read("/memory/x") is None
    with pytest.raises(PersistenceConflict):
        b.store_snapshot()
    with pytest.raises(PersistenceConflict):
        b.cut()
    assert store.resume(ADDR).read("/memory/x") == 1


def test_item58_cut_refused_while_forked_then_allowed(store):
    parent = store.create(counter())
    parent.exec("/lib/counter", 1)
    child = store.fork(ADDR, CHILD)
    child.exec("/lib/counter", 2)
    with pytest.raises(PersistenceReferenced):
        parent.cut()
    child.cut()
    parent.cut()
    store = reopen(store)
    p, c = store.resume(ADDR), store.resume(CHILD)
    assert (p.version, p.read("/memory/count")) == (1, 1)
    assert (c.version, c.read("/memory/count"), c.read("/memory/last")) == (2, 2, 2)
    assert p.query() == [] and c.query() == []
    assert c.read("/system/lineage") == {"parent": ADDR}
    # history goes on after a cut: positions continue from the cut boundary
    c.write("/memory/y", 1)
    assert [t.position for t in c.query()] == [1]
    assert reopen(store).resume(CHILD).read("/memory/y") == 1


def test_item59_import_claims_no_history(store):
    process = counter()
    for i in range(3):
        process.write("/memory/x", i)
    h = store.import_(process)
    assert h.version == 3 and h.query() == []
    change = h.write("/memory/y", 1)
    assert change.version == 4
    [tx] = h.query()
    assert tx.position == 0 and tx.process_version_before == 3
    assert reopen(store).resume(ADDR).read("/memory/y") == 1


@pytest.mark.parametrize("limit", [0, 4097, -1])
def test_item60_query_limit(store, limit):
    h = store.create(counter())
    with pytest.raises(ResourceLimitExceeded) as info:
        h.query(limit=limit)
    assert info.value.limit == "persistence query transactions"
    assert h.query(limit=4096) == [] and h.query(limit=1) == []


def test_item61_mount_descriptor_must_match(store, tmp_path):
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "a.txt").write_text("hello")
    process = Process.builder(ADDR).memory("count", 0).mount("files", Mount.folder(str(folder))).build()
    store.create(process)
    store = reopen(store)
    r = store.resume(ADDR)
    with pytest.raises(InvalidPersistence):
        r.attach_mount("files", Mount.writable_folder(str(folder)))
    assert r.attach_mount("files", Mount.folder(str(folder))) is None
    assert r.version == 0
    assert r.read("/mounts/files/a.txt") == "hello"
    # a descriptor that was never persisted is a normal durable transition
    other = tmp_path / "other"
    other.mkdir()
    r.attach_mount("more", Mount.folder(str(other)))
    assert r.version == 1 and r.query()[0].source == "mounts.attach"
    store.close()


def test_item62_forged_resulting_root_hash_is_detected(store):
    h = store.create(counter())
    h.exec("/lib/counter", 1)
    key = keys.transaction_key(ADDR, 0)

    def forge(raw: bytes) -> bytes:
        record = codec.decode_record(raw, codec.TRANSACTION_FIELDS, "event_hash", "t")
        record["resulting_root_hash"] = "0" * 64
        return codec.hashed_record(codec.TRANSACTION_FIELDS, record, "event_hash")[0]

    store = tamper(store, "record", key, forge)
    with pytest.raises(InvalidPersistence, match="resulting root hash"):
        store.resume(ADDR)
    store.close()


# ---------------------------------------------------------------------------
# tampering with each kind of stored record


def _prepared(store):
    h = store.create(counter(data={"a": [1, 2, {"b": "c"}]}))
    h.exec("/lib/counter", 1)
    h.write("/memory/data/a/2/b", "d")
    h.enqueue_inbox({"m": 1})
    return h


@pytest.mark.parametrize("offset", [0, 7, 40, -3])
@pytest.mark.parametrize("kind", ["transaction", "node", "head", "base"])
def test_tampering_is_detected_at_resume(store, kind, offset):
    h = _prepared(store)
    key = {
        "transaction": keys.transaction_key(ADDR, 1),
        "node": keys.node_key(bytes.fromhex(h.root_hash)),
        "head": keys.head_key(ADDR),
        "base": keys.base_key(ADDR),
    }[kind]
    cf = "nodes" if kind == "node" else "record"
    store = tamper(store, cf, key, flip(offset))
    with pytest.raises(InvalidPersistence):
        store.resume(ADDR)
    store.close()


def test_tampering_deep_node_and_missing_records(store):
    h = _prepared(store)
    data = h.process.root
    from svit import tree

    deep = tree.get(data, ("memory", "data", "a", "2"))
    store = tamper(store, "nodes", keys.node_key(deep.digest), flip(3))
    with pytest.raises(InvalidPersistence, match="tree node"):
        store.resume(ADDR)
    store = tamper(store, "nodes", keys.node_key(deep.digest), lambda _old: None)
    with pytest.raises(InvalidPersistence, match="missing"):
        store.resume(ADDR)
    store.close()


def test_missing_transaction_is_a_gap(store):
    _prepared(store)
    store = tamper(store, "record", keys.transaction_key(ADDR, 1), lambda _old: None)
    with pytest.raises(InvalidPersistence, match="does not follow"):
        store.resume(ADDR)
    store.close()


def test_tampering_cut_snapshot_and_fork_reference(store):
    parent = _prepared(store)
    store.fork(ADDR, CHILD)
    parent.store_snapshot()  # a stored snapshot at the forked head
    # fork reference
    store = tamper(store, "record", keys.fork_key(CHILD), flip(20))
    with pytest.raises(InvalidPersistence, match="fork reference"):
        store.resume(CHILD)
    store.close()


def test_tampering_cut_snapshot(store):
    h = _prepared(store)
    snap = h.cut()
    store = tamper(store, "record", keys.snapshot_key(ADDR, snap.snapshot_hash), flip(-40))
    with pytest.raises(InvalidPersistence):
        store.resume(ADDR)
    store.close()


def test_untampered_control_resumes(store):
    """Anti-vacuity for the tampering tests: the same store, untouched, resumes."""
    h = _prepared(store)
    root_hash, version = h.root_hash, h.version
    store = reopen(store)
    r = store.resume(ADDR)
    assert (r.root_hash, r.version) == (root_hash, version)
    store.close()


# ---------------------------------------------------------------------------
# key classes and reset_index


def test_key_classes_are_declared_and_enforced(store, engine_kind):
    assert {kc.column_family for kc in KEY_CLASSES} == set(keys.COLUMN_FAMILIES)
    assert all(kc.durability in ("irreplaceable", "rebuildable") for kc in KEY_CLASSES)
    assert {kc.name for kc in KEY_CLASSES if kc.durability == REBUILDABLE} == {"path_index", "child_index", "ready_index"}
    with pytest.raises(InvalidPersistence, match="unregistered"):
        store._batch().put("index", b"zz/unknown", b"")
    with pytest.raises(InvalidPersistence, match="unregistered"):
        store._batch().put("record", b"x/unknown", b"")
    # the reset path may not write any irreplaceable class
    for kc in KEY_CLASSES:
        if kc.durability != REBUILDABLE:
            with pytest.raises(InvalidPersistence, match="may not write"):
                store._batch(allowed=(REBUILDABLE,)).put(kc.column_family, kc.prefix + b"x", b"")
            with pytest.raises(InvalidPersistence, match="may not write"):
                store._batch(allowed=(REBUILDABLE,)).delete(kc.column_family, kc.prefix + b"x")
    statement = store.statement()
    recovery = "point_in_time" if engine_kind == "rocksdb" else "PostgreSQL crash recovery (write-ahead log replay)"
    assert statement["wal_recovery_mode"] == recovery and statement["shares_device"] is True
    assert {entry["name"] for entry in statement["key_classes"]} == {kc.name for kc in KEY_CLASSES}


# RocksDB only (column families); PostgreSQL's unregistered tables: test_postgres.py.
def test_open_refuses_unknown_column_family(path):
    ProcessStore.open(path).close()
    db = raw_db(path)
    db.create_column_family("mystery", rocksdict.Options(raw_mode=True))
    db.close()
    import gc

    gc.collect()
    with pytest.raises(InvalidPersistence, match="unregistered column families"):
        ProcessStore.open(path)


def test_reset_index_leaves_history_identical(store):
    h = _prepared(store)
    h.exec("/lib/counter", 2)
    child = store.fork(ADDR, CHILD)
    child.write("/memory/z", 1)
    records = store.record_digests()
    queries = [t.hash for t in h.query(path_prefix="/memory")], [t.hash for t in child.query(path_prefix="/memory/z")]
    # wipe the derived index outright, then rebuild it
    batch = store._batch(allowed=(REBUILDABLE,))
    for key, _ in list(store._scan("index", b"")):
        batch.delete("index", key)
    store._write(batch)
    assert h.query(path_prefix="/memory") == []
    counts = store.reset_index()
    assert counts["child_entries"] == 1 and counts["path_entries"] > 0
    assert store.record_digests() == records
    assert ([t.hash for t in h.query(path_prefix="/memory")], [t.hash for t in child.query(path_prefix="/memory/z")]) == queries
    with pytest.raises(PersistenceReferenced):
        h.cut()  # the rebuilt child index still protects the parent
    # a second reset is idempotent
    store.reset_index()
    assert store.record_digests() == records
    store = reopen(store)
    assert store.resume(ADDR).root_hash == h.root_hash
    store.close()


# ---------------------------------------------------------------------------
# lifecycle, forks, cuts, snapshots, remove


def test_create_import_resume_refusals(store):
    p = counter()
    p.write("/memory/x", 1)
    with pytest.raises(InvalidPersistence):
        store.create(p)
    h = store.create(counter())
    with pytest.raises(PersistenceAlreadyExists):
        store.create(counter())
    with pytest.raises(PersistenceAlreadyExists):
        store.import_(counter())
    with pytest.raises(InvalidPersistence):
        store.create(h.process)  # already durable
    with pytest.raises(PersistenceNotFound):
        store.resume("svit://local/test/nobody")
    assert store.addresses() == [ADDR]


def test_fork_rules(store):
    parent = store.create(counter(data=list(range(50))))
    parent.exec("/lib/counter", 1)
    with pytest.raises(PersistenceNotFound):
        store.fork("svit://local/test/none", CHILD)
    child = store.fork(ADDR, CHILD)
    with pytest.raises(PersistenceAlreadyExists):
        store.fork(ADDR, CHILD)
    assert child.version == parent.version == 1
    assert child.read("/memory") == parent.read("/memory")
    # the parent moves on; the child's base stays at the fork boundary
    parent.exec("/lib/counter", 2)
    grandchild = child.fork("svit://local/test/grandchild")
    grandchild.write("/memory/g", True)
    store = reopen(store)
    p, c, g = store.resume(ADDR), store.resume(CHILD), store.resume("svit://local/test/grandchild")
    assert (p.read("/memory/count"), c.read("/memory/count"), g.read("/memory/count")) == (2, 1, 1)
    assert g.read("/memory/g") is True and g.read("/system/lineage") == {"parent": CHILD}
    # a fork shares the parent's stored nodes: it adds only the changed top of the tree
    before = sum(1 for _ in store._scan("nodes", b"n/"))
    store.fork(ADDR, "svit://local/test/another")
    added = sum(1 for _ in store._scan("nodes", b"n/")) - before
    assert 0 < added <= 12
    store.close()


def test_fork_depth_limit(store, monkeypatch):
    monkeypatch.setattr(store_module, "MAX_FORK_DEPTH", 3)
    store.create(counter())
    chain = [ADDR] + [f"svit://local/test/f{i}" for i in range(3)]
    for parent, child in zip(chain, chain[1:]):
        store.fork(parent, child)
    with pytest.raises(ResourceLimitExceeded) as info:
        store.fork(chain[-1], "svit://local/test/too-deep")
    assert info.value.limit == "persistence fork depth"
    assert store.resume(chain[-1]).read("/system/lineage") == {"parent": chain[-2]}


def test_snapshot_records_head_and_restores(store):
    h = store.create(counter())
    h.exec("/lib/counter", 1)
    snap = h.store_snapshot()
    assert isinstance(snap, StoreSnapshot)
    assert snap.covered_position == 0 and snap.head_hash == h.head.hash and snap.process_version == 1
    restored = Process.restore(bytes(snap))
    assert restored.root_hash == h.root_hash == snap.root_hash
    assert len(h.query()) == 1  # history untouched


def test_remove(store):
    parent = store.create(counter())
    parent.exec("/lib/counter", 1)
    child = store.fork(ADDR, CHILD)
    with pytest.raises(PersistenceReferenced):
        store.remove(ADDR)
    store.remove(CHILD)
    assert store.addresses() == [ADDR]
    with pytest.raises(PersistenceNotFound):
        store.resume(CHILD)
    with pytest.raises(PersistenceNotFound):
        child.write("/memory/x", 1)  # a handle of a removed address cannot commit
    parent.cut()  # no fork references remain
    store.remove(ADDR)
    assert store.addresses() == []
    with pytest.raises(PersistenceNotFound):
        store.remove(ADDR)
    assert store.sweep_nodes() > 0
    assert sum(1 for _ in store._scan("nodes", b"n/")) == 0
    assert sum(1 for _ in store._scan("index", b"")) == 0
    assert sum(1 for _ in store._scan("record", b"")) == 0
    # the address can be created again from scratch
    store.create(counter())
    assert reopen(store).resume(ADDR).version == 0


def test_sweep_keeps_live_nodes(store):
    h = _prepared(store)
    for i in range(5):
        h.write("/memory/x", {"v": i})
    # Every retained version's tree is kept (time travel reads them): only a cut makes
    # the replaced history's trees garbage.
    assert store.sweep_nodes() == 0
    h.cut()
    assert store.sweep_nodes() > 0
    store = reopen(store)
    assert store.resume(ADDR).root_hash == h.root_hash
    store.close()


def test_inbox_thread_and_ports_transitions_replay(store):
    h = store.create(counter())
    h.enqueue_inbox({"m": 1})
    h.enqueue_inbox({"m": 2})
    h.acknowledge_inbox({"m": 1})
    h.exec_inline('(define (main input) (do (write "/memory/inline" true) (send! "svit://local/x" 1) (write "/lib/extra" (value-map "source" "(define (main input) 1)" "documentation" "x"))))')
    h.exec_inline('(define (main input) (remove "/lib/extra"))')
    sources = [t.source for t in h.query()]
    assert sources == ["inbox.enqueue", "inbox.enqueue", "inbox.acknowledge", "activation", "activation"]
    assert h.query()[3].touched_paths == ["/lib/extra", "/memory/inline", "/system/outbox"]
    store = reopen(store)
    r = store.resume(ADDR)
    assert r.root_hash == h.root_hash and r.read("/inbox") == [{"m": 2}] and r.read("/memory/inline") is True
    store.close()


# ---------------------------------------------------------------------------
# queries


def test_query_filters(store):
    h = store.create(counter())
    h.exec("/lib/counter", 1)          # 0: /memory/count, /memory/last
    h.write("/memory/countX", 1)       # 1
    h.write("/memory/deep", {"a": 1})  # 2
    h.write("/memory/deep/a", 2)       # 3
    h.remove("/memory/countX")         # 4
    h.enqueue_inbox(1)                 # 5
    all_tx = h.query()
    assert [t.position for t in all_tx] == [0, 1, 2, 3, 4, 5]
    assert all(a.hash == b.previous_hash for a, b in zip(all_tx, all_tx[1:]))
    assert [t.position for t in h.query(path_prefix="/memory/count")] == [0]
    assert [t.position for t in h.query(path_prefix="/memory/countX")] == [1, 4]
    assert [t.position for t in h.query(path_prefix="/memory/deep")] == [2, 3]
    assert [t.position for t in h.query(path_prefix="/")] == [0, 1, 2, 3, 4, 5]
    assert [t.position for t in h.query(path_prefix="/inbox")] == [5]
    assert [t.position for t in h.query(after_position=1, through_position=3)] == [2, 3]
    assert [t.position for t in h.query(path_prefix="/memory", after_position=2)] == [3, 4]
    assert [t.position for t in h.query(source="host.write")] == [1, 2, 3]
    assert [t.position for t in h.query(version_from=2, version_through=3)] == [1, 2]
    assert [t.position for t in h.query(transaction_hash=all_tx[3].hash)] == [3]
    assert [t.position for t in h.query(limit=2)] == [0, 1]
    assert [t.position for t in h.query(path_prefix="/memory", limit=3)] == [0, 1, 2]
    assert h.query(source="nothing") == []
    assert all_tx[2].mutations == [{"operation": "set", "path": "/memory/deep", "value": {"a": 1}}]
    assert all_tx[4].mutations == [{"operation": "remove", "path": "/memory/countX"}]
    assert all_tx[5].mutations == [{"operation": "append", "path": "/inbox", "values": [1]}]


def test_transaction_byte_limit(store, monkeypatch):
    h = store.create(counter())
    monkeypatch.setattr(store_module, "MAX_TRANSACTION_BYTES", 2000)
    before = (h.version, h.root_hash)
    with pytest.raises(ResourceLimitExceeded) as info:
        h.write("/memory/big", "x" * 5000)
    assert info.value.limit == "persistence transaction bytes"
    assert (h.version, h.root_hash) == before
    h.write("/memory/small", "x" * 10)
    assert h.version == 1


# ---------------------------------------------------------------------------
# fault injection (durability requirement 3)


@pytest.mark.parametrize("apply", [False, True])
def test_failed_synced_write_is_fail_stop(store, apply):
    h = store.create(counter())
    h.exec("/lib/counter", 1)
    state = (h.version, h.root_hash, h.process.snapshot(), h.head)
    with FailingWrites(store, fail_at=1, apply=apply) as fault:
        with pytest.raises(PersistenceUnavailable):
            h.exec("/lib/counter", 2)
    assert fault.failed == 1
    assert (h.version, h.root_hash, h.process.snapshot(), h.head) == state
    assert store.terminal
    for attempt in (lambda: h.write("/memory/x", 1), lambda: store.create(counter(CHILD)), lambda: h.store_snapshot(),
                    lambda: store.reset_index(), lambda: store.resume(ADDR)):
        with pytest.raises(PersistenceUnavailable):
            attempt()
    assert (h.version, h.root_hash) == state[:2]
    store = reopen(store)
    r = store.resume(ADDR)
    # never acknowledged; with apply=True the batch landed although the write "failed"
    assert r.version == (2 if apply else 1)
    store.close()


def test_fault_shim_control(store):
    """Anti-vacuity: the shim with a fault scheduled later lets this write through."""
    h = store.create(counter())
    with FailingWrites(store, fail_at=2) as fault:
        h.exec("/lib/counter", 1)
        assert fault.calls == 1 and fault.failed == 0
        with pytest.raises(PersistenceUnavailable):
            h.exec("/lib/counter", 2)
    assert h.version == 1 and fault.failed == 1


def test_closed_store_refuses(store):
    h = store.create(counter())
    store.close()
    with pytest.raises(PersistenceUnavailable):
        h.write("/memory/x", 1)
    with pytest.raises(PersistenceUnavailable):
        store.addresses()


# ---------------------------------------------------------------------------
# stateful model: random transitions, then resume gives the same state and history

KEYS = st.sampled_from(["a", "b", "c", "n"])
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=6,
)


class DurableMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self):
        self.dir = tempfile.mkdtemp()
        self.store = ProcessStore.open(self.dir)
        self.handle = self.store.create(counter())
        self.records = None

    @rule(key=KEYS, value=VALUES)
    def write(self, key, value):
        self.handle.write(f"/memory/{key}", value)

    @rule(key=KEYS)
    def remove(self, key):
        if self.handle.read(f"/memory/{key}") is not None or key in self.handle.discover("/memory"):
            self.handle.remove(f"/memory/{key}")

    @rule(value=VALUES)
    def activate(self, value):
        self.handle.exec("/lib/counter", value)

    @rule(value=VALUES)
    def inbox(self, value):
        self.handle.enqueue_inbox(value)
        if len(self.handle.read("/inbox")) > 2:
            self.handle.acknowledge_inbox(self.handle.read("/inbox")[0])

    @rule()
    def reset(self):
        before = self.store.record_digests()
        self.store.reset_index()
        assert self.store.record_digests() == before

    @invariant()
    def head_matches(self):
        if hasattr(self, "handle"):
            position = self.handle.head.position
            assert self.handle.version == (0 if position is None else position + 1)

    def teardown(self):
        if not hasattr(self, "handle"):
            return
        h = self.handle
        expected = (h.version, h.root_hash, [(t.hash, t.touched_paths) for t in h.query(limit=4096)],
                    [t.position for t in h.query(path_prefix="/memory/a")])
        self.store.close()
        store = ProcessStore.open(self.dir)
        try:
            r = store.resume(ADDR)
            actual = (r.version, r.root_hash, [(t.hash, t.touched_paths) for t in r.query(limit=4096)],
                      [t.position for t in r.query(path_prefix="/memory/a")])
            assert actual == expected
            assert r.read("/memory") == h.read("/memory")
        finally:
            store.close()
            shutil.rmtree(self.dir, ignore_errors=True)


DurableMachine.TestCase.settings = settings(
    max_examples=12, stateful_step_count=12, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestDurableMachine = DurableMachine.TestCase
