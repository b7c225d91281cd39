"""Durable store integrity: failures change nothing; referenced data is never dropped;
tampered records are always InvalidPersistence."""

from __future__ import annotations

import cbor2
import pytest

from svit import Mount, Ports, Process, tree
from svit.errors import InvalidPersistence, PersistenceConflict, PersistenceReferenced
from svit.store import REBUILDABLE, keys
from tests.conftest import reopen

from .test_store import ADDR, CHILD, counter, tamper


def test_stale_handle_replace_ports_conflict_keeps_old_registry(store):
    old = Ports().port("echo", lambda x: x)
    stale = store.create(counter())
    stale.replace_ports(old)
    fresh = store.resume(ADDR)
    fresh.write("/memory/count", 7)
    new = Ports().port("other", lambda x: x)
    version, root = stale.version, stale.root_hash
    with pytest.raises(PersistenceConflict):
        stale.replace_ports(new)
    assert (stale.version, stale.root_hash) == (version, root)
    assert stale.process.ports is old


def _wipe_index(store):
    batch = store._batch(allowed=(REBUILDABLE,))
    for key, _ in list(store._scan("index", b"")):
        batch.delete("index", key)
    store._write(batch)


def test_lost_child_index_does_not_let_remove_drop_a_forked_parent(store):
    parent = store.create(counter())
    parent.exec("/lib/counter", 1)
    store.fork(ADDR, CHILD)
    _wipe_index(store)  # derived state: losing it must not lose data
    with pytest.raises(PersistenceReferenced):
        store.remove(ADDR)
    with pytest.raises(PersistenceReferenced):
        parent.cut()
    assert store.resume(CHILD).read("/memory/count") == 1


def test_tampered_node_with_non_text_key_is_invalid_persistence(store):
    h = store.create(Process.builder(ADDR).memory("m", {"k": [1, 2]}).build())
    h.write("/memory/x", 1)
    digest = tree.get(h.process.root, ("memory", "m")).digest
    store = tamper(store, "nodes", keys.node_key(digest), lambda _old: cbor2.dumps(["m", {1: 2}]))
    try:
        with pytest.raises(InvalidPersistence):
            store.resume(ADDR)
    finally:
        store.close()


def test_cut_never_writes_a_base_resume_cannot_read(store, monkeypatch):
    """A valid process can snapshot to more than the restore byte bound (raised limits allow a
    tree far above 128 MiB). cut() deletes the history, so writing such a base would make the
    address unresumable. Modelled at small scale by lowering the bound."""
    import svit.snapshot as snapshot_module
    from svit.errors import ResourceLimitExceeded

    h = store.create(counter())
    h.write("/memory/big", "x" * 8192)
    monkeypatch.setattr(snapshot_module, "MAX_SNAPSHOT_BYTES", 4096)
    with pytest.raises(ResourceLimitExceeded):
        h.cut()
    assert store.resume(ADDR).read("/memory/big") == "x" * 8192  # history intact
    with pytest.raises(ResourceLimitExceeded):
        h.store_snapshot()
    with pytest.raises(ResourceLimitExceeded):
        store.import_(Process.builder("svit://local/test/big").memory("big", "y" * 8192).build())
    assert "svit://local/test/big" not in store.addresses()


def test_stale_handle_conflicts_before_any_mount_write(store, tmp_path):
    # The head check comes before external mount effects: a handle that lost the race
    # must not write the folder and then report a conflict.
    folder = tmp_path / "out"
    folder.mkdir()
    script = '(define (main input) (do (write "/mounts/out/note.txt" input) (write "/memory/count" 1) input))'
    process = (
        Process.builder(ADDR).memory("count", 0).library("note", script).mount("out", Mount.writable_folder(str(folder))).build()
    )
    fresh = store.create(process)
    stale = store.resume(ADDR)
    stale.attach_mount("out", Mount.writable_folder(str(folder)))
    fresh.write("/memory/count", 5)
    with pytest.raises(PersistenceConflict):
        stale.exec("/lib/note", "from the stale handle")
    assert not (folder / "note.txt").exists()
    # the current handle's activation writes the mount and commits as usual
    assert fresh.exec("/lib/note", "current").version == 2
    assert (folder / "note.txt").read_text() == "current"


def test_a_head_behind_the_last_transaction_is_refused(store):
    """A head put back to an older transaction (a rolled back record) is refused on
    resume on every engine; a shared engine reads the head again, finds it unchanged,
    and refuses it too."""
    address = "svit://local/integrity/rolled"
    handle = store.create(Process.builder(address).memory("n", 0).build())
    handle.write("/memory/n", 1)
    older = store.engine.get(keys.CF_RECORD, keys.head_key(address))
    handle.write("/memory/n", 2)
    batch = store.engine.batch()
    batch.put(keys.CF_RECORD, keys.head_key(address), older)
    store.engine.write(batch)
    store = reopen(store)
    try:
        with pytest.raises(InvalidPersistence, match="does not match the last transaction"):
            store.resume(address)
    finally:
        store.close()
