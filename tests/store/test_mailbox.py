"""Message delivery (DESIGN §5.10): the store's mailbox, exactly once and in order per sender.

Covers the mailbox entries written in the sender's commit, delivery as one commit of the
target, settling the sender's outbox, undeliverable intents (limits, absent and removed
addresses), forks, resume validation after every new commit kind, the ready index and
its rebuild, fault injection at every write of the sequence, SIGKILL between steps, and
a stateful model test.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from svit import Limits, Process
from svit.errors import InvalidPersistence, InvalidValue, PersistenceConflict, PersistenceUnavailable, SvitError
from svit.store import DurableProcess, ProcessStore, keys
from svit.store.faults import FailingWrites
from svit.store.mailbox import NO_SUCH_ADDRESS, Delivery
from tests.conftest import reopen

A = "svit://local/mail/a"
B = "svit://local/mail/b"
C = "svit://local/mail/c"
GONE = "svit://local/mail/nobody"
# Sends input.body to each address of input.to, in that order.
SEND = """
(define (main input)
  (let ((body (value-get input "/body")))
    (do (map (lambda (to) (send! to body)) (to-list (value-get input "/to"))) body)))
"""
SEND_TWO = '(define (main input) (do (send! input "first") (send! input "second") input))'


def sender(address: str = A, limits: Limits | None = None) -> Process:
    builder = Process.builder(address).library("send", SEND).library("two", SEND_TWO)
    if limits is not None:
        builder.limits(limits)
    return builder.build()


def target(address: str = B, limits: Limits | None = None) -> Process:
    builder = Process.builder(address)
    if limits is not None:
        builder.limits(limits)
    return builder.build()


def send(handle, body, *to: str):
    return handle.exec("/lib/send", {"body": body, "to": list(to)})


def inbox_ids(handle) -> list[str]:
    return [item["message_id"] for item in handle.read("/inbox")]


# ---------------------------------------------------------------------------- the sender's commit


def test_send_writes_mailbox_entries_in_the_senders_commit(store):
    a = store.create(sender())
    store.create(target())
    assert store.mailbox.targets() == [] and store.mailbox.pending(B) == []
    activation = a.exec("/lib/two", B)
    assert activation.version == 1
    assert store.mailbox.targets() == [B]
    assert store.mailbox.pending(B) == [
        {"message_id": f"{A}:1:0", "from": A, "to": B, "body": "first"},
        {"message_id": f"{A}:1:1", "from": A, "to": B, "body": "second"},
    ]
    # A dry run and a failed activation write no mail.
    a.exec("/lib/two", C, dry_run=True)
    with pytest.raises(SvitError):
        a.exec("/lib/send", {"body": 1, "to": "not a list"})
    assert store.mailbox.targets() == [B] and len(store.mailbox.pending(B)) == 2
    # The entries survive a restart.
    store = reopen(store)
    try:
        assert [m["message_id"] for m in store.mailbox.pending(B)] == [f"{A}:1:0", f"{A}:1:1"]
    finally:
        store.close()


# ---------------------------------------------------------------------------- delivery


def test_deliver_is_one_commit_in_order_per_sender(store):
    a = store.create(sender(A))
    c = store.create(sender(C))
    b = store.create(target())
    send(a, "a1", B)
    send(c, "c1", B)
    send(a, {"n": 2}, B, B)
    writes = store.engine.lock.writes
    delivery = store.mailbox.deliver(b)
    assert store.engine.lock.writes == writes + 1  # four messages, one synced write
    assert isinstance(delivery, Delivery) and delivery.undeliverable == []
    assert delivery.change is not None and delivery.change.version == 1 == b.version
    assert delivery.change.paths == ["/inbox"]
    # Per sender in send order (senders in key order).
    assert delivery.delivered == [f"{A}:1:0", f"{A}:2:0", f"{A}:2:1", f"{C}:1:0"]
    assert b.read("/inbox") == [
        {"kind": "message", "message_id": f"{A}:1:0", "from": A, "body": "a1"},
        {"kind": "message", "message_id": f"{A}:2:0", "from": A, "body": {"n": 2}},
        {"kind": "message", "message_id": f"{A}:2:1", "from": A, "body": {"n": 2}},
        {"kind": "message", "message_id": f"{C}:1:0", "from": C, "body": "c1"},
    ]
    # The target's transaction records the delivery; the mailbox is empty; ids are recorded.
    (record,) = b.query(source="mailbox.deliver")
    assert record.mutations[0]["operation"] == "append" and record.mutations[0]["path"] == "/inbox"
    assert [value["message_id"] for value in record.mutations[0]["values"]] == delivery.delivered
    assert store.mailbox.targets() == [] and store.mailbox.pending(B) == []
    assert all(store.mailbox.delivered(B, message_id) for message_id in delivery.delivered)
    assert not store.mailbox.delivered(C, f"{A}:1:0")
    # Nothing waiting: an empty delivery and no commit.
    again = store.mailbox.deliver(b)
    assert again == Delivery([], [], None) and b.version == 1


def test_deliver_takes_at_most_limit_and_respects_the_inbox_limit(store):
    a = store.create(sender())
    b = store.create(target())
    for n in range(5):
        send(a, n, B)
    first = store.mailbox.deliver(b, limit=2)
    assert first.delivered == [f"{A}:1:0", f"{A}:2:0"] and b.version == 1
    # Back pressure: the inbox holds 2, the limit is 3: one more.
    second = store.mailbox.deliver(b, inbox_limit=3)
    assert second.delivered == [f"{A}:3:0"] and b.version == 2
    assert store.mailbox.deliver(b, inbox_limit=3) == Delivery([], [], None) and b.version == 2
    b.acknowledge_inbox(b.inbox_front())
    assert store.mailbox.deliver(b, inbox_limit=3).delivered == [f"{A}:4:0"]
    assert store.mailbox.deliver(b).delivered == [f"{A}:5:0"]
    assert [item["body"] for item in b.read("/inbox")] == [1, 2, 3, 4]


def test_a_stale_target_handle_conflicts_and_changes_nothing(store):
    a = store.create(sender())
    b = store.create(target())
    stale = store.resume(B)
    send(a, "x", B)
    b.enqueue_inbox("local")
    with pytest.raises(PersistenceConflict):
        store.mailbox.deliver(stale)
    assert store.mailbox.pending(B)[0]["message_id"] == f"{A}:1:0"
    assert not store.mailbox.delivered(B, f"{A}:1:0") and stale.version == 0
    assert store.mailbox.deliver(b).delivered == [f"{A}:1:0"]


def test_a_delivery_is_refused_when_another_one_took_the_mail(store):
    """Two deliverers read the same entries; the second's commit finds them gone."""
    a = store.create(sender())
    store.create(target())
    send(a, "x", B)
    first, second = store.resume(B), store.resume(B)
    assert store.mailbox.deliver(first).delivered == [f"{A}:1:0"]
    send(a, "y", B)
    # ``second`` is stale: the head compare-and-swap refuses it, nothing is delivered twice.
    with pytest.raises(PersistenceConflict):
        store.mailbox.deliver(second)
    fresh = store.resume(B)
    assert store.mailbox.deliver(fresh).delivered == [f"{A}:2:0"]
    assert inbox_ids(fresh) == [f"{A}:1:0", f"{A}:2:0"]


# ---------------------------------------------------------------------------- settling


def test_settle_removes_delivered_intents_and_history_keeps_them(store):
    a = store.create(sender())
    b = store.create(target())
    send(a, "x", B)
    send(a, "y", B)
    assert [i["message_id"] for i in a.outbox()] == [f"{A}:1:0", f"{A}:2:0"]
    assert store.mailbox.unsettled() == []
    store.mailbox.deliver(b, limit=1)
    assert store.mailbox.unsettled() == [A]
    change = store.mailbox.settle(a)
    assert change is not None and change.version == 3 and change.paths == ["/system/outbox/0"]
    # Only the pending intent is left; the history keeps the delivered one.
    assert a.outbox() == [{"body": "y", "message_id": f"{A}:2:0", "to": B}]
    assert store.mailbox.unsettled() == [] and store.mailbox.settle(a) is None and a.version == 3
    sent = a.query(path_prefix="/system/outbox", source="activation")
    assert [t.mutations[-1]["values"][0]["message_id"] for t in sent] == [f"{A}:1:0", f"{A}:2:0"]
    store.mailbox.deliver(b)
    store.mailbox.settle(a)
    assert a.outbox() == []


def test_a_stale_sender_handle_conflicts_and_its_outcomes_stay(store):
    """Another writer of the sender committed the sends; a handle opened before them
    sees none of the delivered intents in its outbox. Its settle must not take the
    outcomes away (the intents would stay in the committed outbox forever)."""
    stale = store.create(sender())
    b = store.create(target())
    send(store.resume(A), "x", B)
    assert store.mailbox.deliver(b).delivered == [f"{A}:1:0"]
    assert stale.outbox() == [] and stale.version == 0
    with pytest.raises(PersistenceConflict):
        store.mailbox.settle(stale)
    assert store.mailbox.unsettled() == [A] and stale.version == 0
    fresh = store.resume(A)
    assert [i["message_id"] for i in fresh.outbox()] == [f"{A}:1:0"]
    change = store.mailbox.settle(fresh)
    assert change is not None and change.version == 2
    assert fresh.outbox() == [] and store.mailbox.unsettled() == []
    assert store.resume(A).read("/system/outbox") == []


def test_a_stale_target_handle_refuses_nothing(store):
    """A delivery that only refuses decides on the target's state: a handle behind its
    head conflicts and the intent waits, neither refused nor dropped."""
    a = store.create(sender())
    b = store.create(target(limits=SMALL))
    stale = store.resume(B)
    b.enqueue_inbox("local")
    send(a, "z" * 500, B)
    with pytest.raises(PersistenceConflict):
        store.mailbox.deliver(stale)
    assert [m["message_id"] for m in store.mailbox.pending(B)] == [f"{A}:1:0"]
    assert store.mailbox.undeliverable(A) == [] and store.mailbox.unsettled() == []
    assert store.mailbox.deliver(b).undeliverable == [(f"{A}:1:0", "invalid_value: maximum text bytes exceeded")]


def test_resume_validates_after_delivery_and_settle(store):
    a = store.create(sender())
    b = store.create(target(limits=Limits(max_text_bytes=400)))
    send(a, "x", B, GONE)
    send(a, "y" * 500, B)
    store.mailbox.deliver(b)
    store.mailbox.refuse_absent(GONE)
    store.mailbox.settle(a)
    store.mailbox.deliver(b)
    store.mailbox.settle(a)
    roots = {A: a.root_hash, B: b.root_hash}
    store = reopen(store)
    try:
        for address, root_hash in roots.items():
            resumed = store.resume(address)
            assert resumed.root_hash == root_hash
        assert {t.source for t in store.resume(A).query()} == {"activation", "mailbox.settle"}
        assert {t.source for t in store.resume(B).query()} == {"mailbox.deliver"}
    finally:
        store.close()


# ---------------------------------------------------------------------------- undeliverable


def test_an_intent_the_targets_limits_refuse_is_kept_and_the_rest_go_on(store):
    a = store.create(sender())
    b = store.create(target(limits=Limits(max_text_bytes=400)))
    send(a, "small", B)
    send(a, "y" * 500, B)
    send(a, "after", B)
    delivery = store.mailbox.deliver(b)
    assert delivery.delivered == [f"{A}:1:0", f"{A}:3:0"]
    assert delivery.undeliverable == [(f"{A}:2:0", "invalid_value: maximum text bytes exceeded")]
    assert [item["body"] for item in b.read("/inbox")] == ["small", "after"]
    assert store.mailbox.undeliverable(A) == [{
        "message_id": f"{A}:2:0", "from": A, "to": B, "body": "y" * 500,
        "reason": "invalid_value: maximum text bytes exceeded"}]
    store.mailbox.settle(a)
    assert a.outbox() == [{"body": "y" * 500, "message_id": f"{A}:2:0", "to": B,
                           "undeliverable": "invalid_value: maximum text bytes exceeded"}]
    assert store.mailbox.targets() == [] and store.mailbox.unsettled() == []


def test_when_every_intent_is_refused_no_commit_is_made_and_none_is_dropped(store):
    a = store.create(sender())
    b = store.create(target(limits=Limits(max_tree_nodes=80)))
    send(a, list(range(60)), B)
    delivery = store.mailbox.deliver(b)
    assert delivery.delivered == [] and delivery.change is None and b.version == 0
    assert delivery.undeliverable == [(f"{A}:1:0", "resource_limit_exceeded: process tree nodes")]
    assert store.mailbox.targets() == [] and store.mailbox.unsettled() == [A]
    assert store.mailbox.undeliverable(A)[0]["reason"] == "resource_limit_exceeded: process tree nodes"


def test_mail_to_an_absent_address_is_refused_never_dropped(store):
    a = store.create(sender())
    b = store.create(target())
    send(a, "lost?", GONE)
    send(a, "fine", B)
    assert store.mailbox.targets() == [B, GONE]
    assert store.mailbox.refuse_absent(B) == []  # present: nothing refused
    assert store.mailbox.refuse_absent(GONE) == [f"{A}:1:0"]
    assert store.mailbox.targets() == [B] and store.mailbox.refuse_absent(GONE) == []
    assert [(u["message_id"], u["reason"]) for u in store.mailbox.undeliverable(A)] == [(f"{A}:1:0", NO_SUCH_ADDRESS)]
    store.mailbox.deliver(b)
    store.mailbox.settle(a)
    assert a.outbox() == [{"body": "lost?", "message_id": f"{A}:1:0", "to": GONE, "undeliverable": NO_SUCH_ADDRESS}]
    # Settling again changes nothing, and the marked intent is never delivered.
    assert store.mailbox.settle(a) is None
    store.create(target(GONE))
    assert store.mailbox.targets() == []


def test_mail_to_a_removed_process_is_refused_the_same_way(store):
    a = store.create(sender())
    store.create(target())
    send(a, "before", B)
    store.remove(B)
    assert store.mailbox.targets() == []
    assert [(u["message_id"], u["reason"]) for u in store.mailbox.undeliverable(A)] == [(f"{A}:1:0", NO_SUCH_ADDRESS)]
    send(a, "after", B)
    assert store.mailbox.refuse_absent(B) == [f"{A}:2:0"]
    store.mailbox.settle(a)
    assert [(i["message_id"], i.get("undeliverable")) for i in a.outbox()] == [
        (f"{A}:1:0", NO_SUCH_ADDRESS), (f"{A}:2:0", NO_SUCH_ADDRESS)]


def test_a_removed_sender_takes_its_outcomes_but_its_sent_mail_is_delivered(store):
    a = store.create(sender())
    b = store.create(target())
    send(a, "one", B, GONE)
    store.mailbox.refuse_absent(GONE)
    store.remove(A)
    assert store.mailbox.unsettled() == [] and store.mailbox.undeliverable(A) == []
    assert store.mailbox.deliver(b).delivered == [f"{A}:1:0"]
    assert store.mailbox.unsettled() == []


# ---------------------------------------------------------------------------- forks and imports


def test_a_fork_does_not_inherit_pending_mail(store):
    a = store.create(sender())
    b = store.create(target())
    send(a, "from the parent", B)
    child = a.fork(C)
    assert child.outbox() == []
    assert [m["from"] for m in store.mailbox.pending(B)] == [A]
    send(child, "from the child", B)
    assert store.mailbox.deliver(b).delivered == [f"{A}:1:0", f"{C}:2:0"]
    store.mailbox.settle(a)
    store.mailbox.settle(child)
    assert a.outbox() == [] and child.outbox() == []
    assert store.resume(C).root_hash == child.root_hash


def test_an_outbox_imported_again_is_not_delivered_twice(store):
    a = store.create(sender())
    b = store.create(target())
    send(a, "once", B)
    send(a, "later", B)
    store.mailbox.deliver(b, limit=1)
    snapshot = a.snapshot()  # its outbox still holds both intents
    store.remove(A)
    imported = store.import_(Process.restore(snapshot))
    assert [m["message_id"] for m in store.mailbox.pending(B)] == [f"{A}:1:0", f"{A}:2:0"]
    delivery = store.mailbox.deliver(b)
    assert delivery.delivered == [f"{A}:2:0"]
    assert inbox_ids(b) == [f"{A}:1:0", f"{A}:2:0"]
    store.mailbox.settle(imported)
    assert imported.outbox() == []


def test_an_imported_outbox_with_hand_made_ids_is_delivered_after_the_numbered_ones(store):
    store.create(target())
    base = sender()
    outbox = [{"body": "odd", "message_id": "made by hand", "to": B},
              {"body": "numbered", "message_id": f"{A}:0:0", "to": B}]
    root = base.root
    from svit import tree

    root = tree.set_at(root, ("system", "outbox"), tree.from_value(outbox, scripts_allowed=False))
    store.import_(Process(A, root, 0, base.limits))
    assert [m["message_id"] for m in store.mailbox.pending(B)] == [f"{A}:0:0", "made by hand"]


# ---------------------------------------------------------------------------- the ready index


def test_the_ready_index_follows_every_inbox_change_and_is_rebuilt(store):
    a = store.create(sender())
    b = store.create(target())
    c = store.create(target(C))
    assert store.mailbox.ready() == []
    c.enqueue_inbox("hello")
    assert store.mailbox.ready() == [C]
    send(a, "x", B)
    assert store.mailbox.ready() == [C]  # waiting mail is not an inbox item yet
    store.mailbox.deliver(b)
    assert store.mailbox.ready() == [B, C]
    c.acknowledge_inbox("hello")
    assert store.mailbox.ready() == [B]
    assert store.mailbox.ready(limit=1) == [B]
    # A fork of a process with inbox items is ready at once; a removed one is not.
    store.fork(B, "svit://local/mail/b2")
    assert store.mailbox.ready() == [B, "svit://local/mail/b2"]
    store.remove("svit://local/mail/b2")
    assert store.mailbox.ready() == [B]
    # Lost, then rebuilt from the history by reset_index.
    batch = store.engine.batch()
    batch.delete(keys.CF_INDEX, keys.ready_key(B))
    batch.put(keys.CF_INDEX, keys.ready_key(C), b"")
    store.engine.write(batch)
    assert store.mailbox.ready() == [C]
    records = store.record_digests()
    counts = store.reset_index()
    assert counts["ready_entries"] == 1 and store.mailbox.ready() == [B]
    assert store.record_digests() == records


# ---------------------------------------------------------------------------- cost


def test_targets_and_unsettled_skip_from_address_to_address(store):
    """Listing is one short seek per address listed, never a walk over every entry."""
    senders = [store.create(sender(f"svit://local/mail/s{n}")) for n in range(3)]
    for address in (B, C):
        store.create(target(address))
    for handle in senders:
        for _ in range(10):
            send(handle, "x", B, C)
    engine = store.engine
    seen = 0
    original = engine.scan

    def counting(space, prefix, start=None):
        nonlocal seen
        for item in original(space, prefix, start):
            seen += 1
            yield item

    engine.scan = counting  # type: ignore[method-assign]
    try:
        assert store.mailbox.targets() == [B, C]
        assert seen <= 2
        store.mailbox.deliver(store.resume(B))
        store.mailbox.deliver(store.resume(C))
        seen = 0
        assert store.mailbox.unsettled() == [s.address for s in senders]
        assert seen <= 3
        seen = 0
        assert store.mailbox.targets(limit=1) == []
        assert seen == 0
    finally:
        del engine.scan


def test_listings_go_on_after_a_given_address(store):
    """Each listing resumes after ``after`` (an address it need not hold), in key order,
    so a lister that pages through them reaches every address."""
    senders = [store.create(sender(f"svit://local/mail/s{n}")) for n in range(3)]
    targets = [f"svit://local/mail/t{n}" for n in range(3)]
    for address in targets:
        store.create(target(address)).enqueue_inbox("hello")
    for handle in senders:
        send(handle, "x", *targets)
    mailbox = store.mailbox
    assert mailbox.targets(limit=2) == targets[:2]
    assert mailbox.targets(limit=2, after=targets[1]) == targets[2:]
    assert mailbox.targets(after="svit://local/mail/s") == targets  # before every target
    assert mailbox.ready(limit=2, after=targets[0]) == targets[1:]
    assert mailbox.ready(after=targets[2]) == []
    for address in targets:
        mailbox.deliver(store.resume(address))
    addresses = [s.address for s in senders]
    assert mailbox.unsettled(limit=1, after=addresses[0]) == addresses[1:2]
    assert mailbox.unsettled(after=addresses[2]) == []
    with pytest.raises(InvalidValue, match="after must be an address"):
        mailbox.ready(after=3)


def test_bad_arguments_are_refused_with_clear_errors(store):
    a = store.create(sender())
    with pytest.raises(InvalidValue, match="limit must be an integer"):
        store.mailbox.targets(0)
    with pytest.raises(InvalidValue, match="inbox_limit"):
        store.mailbox.deliver(a, inbox_limit=0)
    with pytest.raises(InvalidPersistence, match="durable process of this store"):
        store.mailbox.deliver(target())  # an in-memory process
    with pytest.raises(InvalidValue):
        store.mailbox.pending("not an address")
    with pytest.raises(InvalidValue, match="message_id must be text"):
        store.mailbox.delivered(B, 7)


def test_an_undeliverable_mark_must_be_text():
    process = sender()
    outbox = [{"body": 1, "message_id": f"{A}:0:0", "to": B, "undeliverable": 5}]
    from svit import tree
    from svit.errors import InvalidSnapshot

    root = tree.set_at(process.root, ("system", "outbox"), tree.from_value(outbox, scripts_allowed=False))
    with pytest.raises(InvalidSnapshot, match="message intents"):
        Process.restore(Process(A, root, 0, process.limits).snapshot())
    outbox[0]["undeliverable"] = "no such address"
    root = tree.set_at(process.root, ("system", "outbox"), tree.from_value(outbox, scripts_allowed=False))
    assert Process.restore(Process(A, root, 0, process.limits).snapshot()).outbox() == outbox


# ---------------------------------------------------------------------------- failures: every write


def finish(store) -> None:
    """What a host does after a restart: deliver or refuse everything waiting, settle every sender."""
    for _ in range(100):
        targets = store.mailbox.targets()
        if not targets:
            break
        for address in targets:
            if address in store.addresses():
                store.mailbox.deliver(store.resume(address))
            else:
                store.mailbox.refuse_absent(address)
    for address in store.mailbox.unsettled():
        store.mailbox.settle(store.resume(address))
    assert store.mailbox.targets() == [] and store.mailbox.unsettled() == []


SEQUENCE_WRITES = 4


def sequence(store, a, b) -> None:
    """The delivery sequence, one synced write per step."""
    send(a, "one", B, GONE, B)              # 1: the sender's commit writes the mail
    store.mailbox.deliver(b)                # 2: the delivery commit of the target
    store.mailbox.refuse_absent(GONE)       # 3: the refusal batch
    store.mailbox.settle(a)                 # 4: the settling commit of the sender


@pytest.mark.parametrize("apply", [False, True], ids=["lost", "landed"])
@pytest.mark.parametrize("fail_at", range(1, SEQUENCE_WRITES + 2))
def test_a_failed_write_anywhere_in_the_sequence_delivers_nothing_twice_and_loses_nothing(store, fail_at, apply):
    a = store.create(sender())
    b = store.create(target())
    with FailingWrites(store, fail_at=fail_at, apply=apply) as fault:
        if fail_at > SEQUENCE_WRITES:  # the control: no write fails
            sequence(store, a, b)
        else:
            with pytest.raises(PersistenceUnavailable):
                sequence(store, a, b)
    assert fault.calls == min(fail_at, SEQUENCE_WRITES)
    assert fault.failed == (0 if fail_at > SEQUENCE_WRITES else 1)
    store = reopen(store)
    try:
        a = store.resume(A)
        if a.version == 0:  # the send was never acknowledged nor written: the client sends again
            send(a, "one", B, GONE, B)
        finish(store)
        a, b = store.resume(A), store.resume(B)
        assert inbox_ids(b) == [f"{A}:1:0", f"{A}:1:2"]
        assert [item["body"] for item in b.read("/inbox")] == ["one", "one"]
        assert a.outbox() == [{"body": "one", "message_id": f"{A}:1:1", "to": GONE, "undeliverable": NO_SUCH_ADDRESS}]
        assert [u["message_id"] for u in store.mailbox.undeliverable(A)] == [f"{A}:1:1"]
        assert store.mailbox.delivered(B, f"{A}:1:0") and store.mailbox.delivered(B, f"{A}:1:2")
    finally:
        store.close()


# ---------------------------------------------------------------------------- failures: SIGKILL

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mail_crash_worker.py")
CRASH_SENDER = "svit://local/crash/sender"
CRASH_TARGET = "svit://local/crash/target"


def run_worker(path: str, *extra: str, kill_after: float | None = None) -> list[str]:
    """Run the worker until it dies (by its own SIGKILL, or ours after ``kill_after`` s); its lines."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, WORKER, path, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        if kill_after is not None:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n", proc.stderr.read() if proc.stderr else ""
            time.sleep(kill_after)
            proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, err
    return ([] if kill_after is None else ["ready"]) + [line for line in out.splitlines()]


def check_exactly_once(path: str, acknowledged: set[str]) -> list[str]:
    """Finish what the killed worker left, then: every acknowledged message is delivered
    exactly once, in send order, nothing else is, the outbox is settled, history validates."""
    store = ProcessStore.open(path)
    try:
        finish(store)
        target_handle, sender_handle = store.resume(CRASH_TARGET), store.resume(CRASH_SENDER)
        ids = inbox_ids(target_handle)
        assert len(ids) == len(set(ids)), "a message was delivered twice"
        assert acknowledged <= set(ids), "an acknowledged message was lost"
        order = [tuple(int(part) for part in message_id.rsplit(":", 2)[1:]) for message_id in ids]
        assert order == sorted(order), "messages out of send order"
        sent = {f"{CRASH_SENDER}:{t.process_version_after}:{i}"
                for t in sender_handle.query(source="activation") for i in range(2)}
        assert set(ids) == sent, "delivered and committed messages differ"
        assert sender_handle.outbox() == []
        return ids
    finally:
        store.close()


def test_sigkill_between_steps_and_at_random_moments_delivers_exactly_once(tmp_path):
    path = str(tmp_path / "store")
    started = time.monotonic()
    acknowledged: set[str] = set()
    runs = [("--die-after", "sent"), ("--die-after", "delivered"), ("--die-after", "settled")]
    for extra in runs:
        lines = run_worker(path, *extra)
        assert lines[-1].split()[0] == extra[1], lines
        for line in lines:
            if line.startswith("sent "):
                acknowledged.update(line.split()[1:])
        check_exactly_once(path, acknowledged)
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    for _ in range(2):
        lines = run_worker(path, kill_after=rng.uniform(0.2, 0.6))
        for line in lines:
            if line.startswith("sent "):
                acknowledged.update(line.split()[1:])
        ids = check_exactly_once(path, acknowledged)
    assert len(ids) > 6
    assert time.monotonic() - started < 40


def test_the_exactly_once_check_sees_a_double_delivery(tmp_path):
    """Anti-vacuity: a deliverer that appends without recording is caught by the check."""
    path = str(tmp_path / "store")
    store = ProcessStore.open(path)
    handle = store.create(Process.builder(CRASH_SENDER).library("two", SEND_TWO).build())
    target_handle = store.create(target(CRASH_TARGET))
    handle.exec("/lib/two", CRASH_TARGET)
    first = store.mailbox.pending(CRASH_TARGET)[0]
    target_handle.enqueue_inbox({"kind": "message", "message_id": first["message_id"], "from": first["from"],
                                 "body": first["body"]})
    store.close()
    with pytest.raises(AssertionError, match="delivered twice"):
        check_exactly_once(path, set())


# ---------------------------------------------------------------------------- a stateful model

SENDERS = (A, C)
TARGETS = (B, "svit://local/mail/d")
SMALL = Limits(max_text_bytes=400)


def order_of(message_id: str) -> tuple[int, int]:
    version, index = message_id.rsplit(":", 2)[1:]
    return int(version), int(index)


class MailMachine(RuleBasedStateMachine):
    """Random sends, deliveries, refusals, settlements, acknowledgements, failed writes and
    restarts; every acknowledged intent is always in exactly one place, and delivered at
    most once, in send order per sender."""

    @initialize()
    def setup(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="svit-mail-")
        self.store = ProcessStore.open(os.path.join(self.directory, "store"))
        for address in SENDERS:
            self.store.create(sender(address))
        self.store.create(target(TARGETS[0]))
        self.store.create(target(TARGETS[1], limits=SMALL))
        #: Every acknowledged intent: id -> its target.
        self.sent: dict[str, str] = {}
        self.handles: dict[str, DurableProcess] = {}
        self.refresh()

    def refresh(self) -> None:
        self.handles = {address: self.store.resume(address) for address in SENDERS + TARGETS}

    def restart(self) -> None:
        self.store = reopen(self.store)
        self.refresh()

    def teardown(self) -> None:
        store = getattr(self, "store", None)
        if store is not None:
            store.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    @rule(who=st.sampled_from(SENDERS), to=st.lists(st.sampled_from(TARGETS + (GONE,)), min_size=1, max_size=3),
          big=st.booleans())
    def send(self, who: str, to: list[str], big: bool) -> None:
        activation = send(self.handles[who], "z" * 500 if big else "hi", *to)
        for message in activation.messages:
            self.sent[message["message_id"]] = message["to"]

    @rule(to=st.sampled_from(TARGETS), limit=st.integers(1, 4), room=st.none() | st.integers(1, 3))
    def deliver(self, to: str, limit: int, room: int | None) -> None:
        self.store.mailbox.deliver(self.handles[to], limit=limit, inbox_limit=room)

    @rule()
    def refuse(self) -> None:
        self.store.mailbox.refuse_absent(GONE)

    @rule(who=st.sampled_from(SENDERS))
    def settle(self, who: str) -> None:
        self.store.mailbox.settle(self.handles[who])

    @rule(to=st.sampled_from(TARGETS))
    def acknowledge(self, to: str) -> None:
        handle = self.handles[to]
        front = handle.inbox_front()
        if front is not None:
            handle.acknowledge_inbox(front)

    @rule(step=st.sampled_from(["deliver", "settle", "refuse"]), apply=st.booleans(),
          who=st.sampled_from(SENDERS), to=st.sampled_from(TARGETS))
    def failed_write(self, step: str, apply: bool, who: str, to: str) -> None:
        with FailingWrites(self.store, fail_at=1, apply=apply) as fault:
            try:
                if step == "deliver":
                    self.store.mailbox.deliver(self.handles[to])
                elif step == "settle":
                    self.store.mailbox.settle(self.handles[who])
                else:
                    self.store.mailbox.refuse_absent(GONE)
            except PersistenceUnavailable:
                pass
        if fault.failed:
            assert self.store.terminal
        self.restart()

    @invariant()
    def each_intent_is_in_exactly_one_place(self) -> None:
        if not hasattr(self, "store"):
            return
        mailbox = self.store.mailbox
        pending = {m["message_id"] for address in TARGETS + (GONE,) for m in mailbox.pending(address, limit=1000)}
        refused = {u["message_id"] for address in SENDERS for u in mailbox.undeliverable(address)}
        for message_id, to in self.sent.items():
            places = [message_id in pending, mailbox.delivered(to, message_id), message_id in refused]
            assert places.count(True) == 1, (message_id, places)

    @invariant()
    def deliveries_are_once_and_in_send_order(self) -> None:
        if not hasattr(self, "store"):
            return
        for address in TARGETS:
            log = [value["message_id"] for t in self.handles[address].query(source="mailbox.deliver")
                   for value in t.mutations[0]["values"]]
            assert len(log) == len(set(log))
            assert all(self.store.mailbox.delivered(address, message_id) for message_id in log)
            for who in SENDERS:
                mine = [order_of(m) for m in log if m.startswith(who + ":")]
                assert mine == sorted(mine)

    @invariant()
    def a_settled_outbox_holds_only_pending_and_undeliverable(self) -> None:
        if not hasattr(self, "store"):
            return
        unsettled = set(self.store.mailbox.unsettled())
        for who in SENDERS:
            if who in unsettled:
                continue
            for intent in self.handles[who].outbox():
                assert not self.store.mailbox.delivered(intent["to"], intent["message_id"])


TestMailMachine = MailMachine.TestCase
TestMailMachine.settings = settings(max_examples=8, stateful_step_count=12, deadline=None,
                                    suppress_health_check=[HealthCheck.too_slow])


def test_a_refusal_alone_still_checks_the_targets_fences(store):
    """A delivery that only refuses makes no commit, but it is fenced like one."""
    a = store.create(sender())
    b = store.create(target(limits=SMALL))
    send(a, "z" * 500, B)
    b.fences = [(keys.CF_RECORD, keys.head_key(B), b"not the head")]  # type: ignore[attr-defined]
    with pytest.raises(PersistenceConflict):
        store.mailbox.deliver(b)
    assert [m["message_id"] for m in store.mailbox.pending(B)] == [f"{A}:1:0"]
    assert store.mailbox.undeliverable(A) == []
    b.fences = []  # type: ignore[attr-defined]
    assert store.mailbox.deliver(b).undeliverable == [(f"{A}:1:0", "invalid_value: maximum text bytes exceeded")]


def test_a_delivery_whose_mail_was_decided_meanwhile_is_refused(store):
    """The entries a delivery removes must still hold what it read when its commit is made."""
    a = store.create(sender())
    b = store.create(target())
    send(a, "x", B)
    real = b.process.deliver_inbox

    def decided_meanwhile(items, *, annex=None):
        # Another deliverer set the entry aside between this one's reading and its commit.
        batch = store.engine.batch()
        for key, _ in store.engine.scan(keys.CF_RECORD, keys.mail_prefix(B)):
            batch.delete(keys.CF_RECORD, key)
        store.engine.write(batch)
        return real(items, annex=annex)

    b.process.deliver_inbox = decided_meanwhile  # type: ignore[method-assign]
    with pytest.raises(PersistenceConflict):
        store.mailbox.deliver(b)
    assert b.version == 0 and b.read("/inbox") == [] and not store.mailbox.delivered(B, f"{A}:1:0")
    assert store.mailbox.unsettled() == []
