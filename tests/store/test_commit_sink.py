"""The store plugs into a process as its commit sink, and resume refuses a log whose
mutations do not reproduce the roots it recorded."""

from __future__ import annotations

import pytest

from svit import Process, cbor, mutation, tree
from svit.errors import InvalidPersistence

ADDR = "svit://local/test/sink"


def test_the_handle_commits_through_a_sink_given_to_its_process(store) -> None:
    p = Process.builder(ADDR).memory("count", 0).build()
    h = store.create(p)
    assert p.sink is None and h.process.sink is not None and h.process is not p
    h.write("/memory/count", 1)
    assert store.resume(ADDR).read("/memory/count") == 1
    with pytest.raises(InvalidPersistence, match="already attached"):
        store.import_(h.process)


def test_every_transition_kind_records_typed_mutations_that_replay(store) -> None:
    h = store.create(Process.builder(ADDR).memory("count", 0).library("bump", "(define (main input) (write \"/memory/count\" input))").build())
    h.write("/memory/x", {"a": [1, 2]})
    h.exec("/lib/bump", 5)
    h.enqueue_inbox({"m": 1})
    h.acknowledge_inbox({"m": 1})
    h.remove("/memory/x")
    resumed = store.resume(ADDR)
    assert (resumed.version, resumed.root_hash) == (h.version, h.root_hash)
    assert [t.source for t in h.query()] == ["host.write", "activation", "inbox.enqueue", "inbox.acknowledge", "host.remove"]


def test_resume_refuses_a_log_whose_mutations_do_not_reproduce_its_roots(store, monkeypatch) -> None:
    h = store.create(Process.builder(ADDR).memory("count", 0).build())
    h.write("/memory/count", 1)
    honest = mutation.Set.record

    def lying(self: mutation.Set) -> dict:
        record = honest(self)
        record["value"] = cbor.Raw(tree.node_cbor(tree.from_value(99, scripts_allowed=False)))
        return record

    monkeypatch.setattr(mutation.Set, "record", lying)
    h.write("/memory/count", 2)  # recorded as 99, committed as 2
    monkeypatch.undo()
    with pytest.raises(InvalidPersistence, match="resulting root hash does not match"):
        store.resume(ADDR)
