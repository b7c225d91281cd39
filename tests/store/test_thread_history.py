"""Thread-history retention (reference §10.8): compaction checkpoints, cuts, recent windows,
fork-shared prefixes, and the loop resuming from a checkpoint after a cut."""

from __future__ import annotations

import cbor2
import pytest

from svit import Message, Svit
from svit import thread as thread_model
from svit.errors import (
    InvalidPersistence,
    InvalidValue,
    PersistenceNotFound,
    PersistenceUnavailable,
    ResourceLimitExceeded,
    ThreadHistoryBoundary,
    ThreadHistoryPinned,
    ThreadHistoryUncompacted,
)
from svit.loop import events as loop_events
from svit.loop.events import INPUT_MESSAGE, TOOL_STARTED, Checkpoint, Event, ThreadHistoryRetention
from svit.reasoners import ScriptedReasoner
from svit.store import ProcessStore, keys
from svit.store import events as store_events
from svit.store.events import StoreEventLog, encode_event
from svit.store.faults import FailingWrites
from tests.conftest import reopen

from .test_store import tamper

ADDR = "svit://local/tests/thread-parent"
CHILD = "svit://local/tests/thread-child"
GRANDCHILD = "svit://local/tests/thread-grandchild"


def agent(store: ProcessStore, address: str = ADDR, steps=()) -> Svit:
    """A durable Svit (its /thread names the session a fork shares)."""
    return Svit.builder(address).memory("facts", {}).reasoner(ScriptedReasoner(list(steps))).store(store).build()


def fill(store: ProcessStore, address: str, session: str, n: int) -> list[Event]:
    """Append ``n`` user-message events (so messages and events line up one to one)."""
    log = StoreEventLog(store)
    return [log.append(address, session, INPUT_MESSAGE, {"message": Message.user(f"m{i}").to_json(), "turn_id": "t"})
            for i in range(n)]


def seqs(events) -> list[int]:
    return [e.sequence for e in events]


def own_event_keys(store: ProcessStore, address: str, session: str) -> list[int]:
    prefix = keys.thread_session_prefix(address, session)
    return [keys.from_u64(k[len(prefix):]) for k, _ in store._scan("record", prefix)]


def observed(store: ProcessStore, address: str, session: str) -> tuple:
    """Everything a refusal must leave unchanged: the view, its boundaries, every stored record."""
    log = StoreEventLog(store)
    return ([e.to_json() for e in log.all_events(address, session)], log.retained_from(address, session),
            log.compacted_through(address, session), log.last_sequence(address, session), store.record_digests())


# ---------------------------------------------------------------------- checkpoint + cut


def test_cut_after_checkpoint_drops_the_prefix_in_one_synced_batch(store):
    a = agent(store)
    s = a.session_id
    h = a.process
    assert isinstance(h, ThreadHistoryRetention)
    fill(store, ADDR, s, 10)
    assert (h.retained_from(s), h.compacted_through(s), h.latest_checkpoint(s)) == (1, 0, None)
    checkpoint = h.record_checkpoint(s, 6, {"text": "m0..m5 were greetings", "score": 1.0})
    assert checkpoint == Checkpoint(ADDR, s, 6, {"score": 1.0, "text": "m0..m5 were greetings"})
    assert type(h.latest_checkpoint(s).summary["score"]) is float
    assert h.compacted_through(s) == 6 and h.retained_from(s) == 1
    with FailingWrites(store, fail_at=99) as counter:  # counts synced writes, fails none
        assert h.cut_thread_events(s, 4) == 5
    assert counter.calls == 1
    assert h.retained_from(s) == 5 and h.compacted_through(s) == 6
    assert seqs(StoreEventLog(store).all_events(ADDR, s)) == list(range(5, 11))
    assert own_event_keys(store, ADDR, s) == list(range(5, 11))  # deleted, not hidden
    # a second cut up to the checkpoint; the boundaries survive a reopen
    assert h.cut_thread_events(s, 6) == 7
    store = reopen(store)
    log = StoreEventLog(store)
    assert (log.retained_from(ADDR, s), log.compacted_through(ADDR, s)) == (7, 6)
    assert seqs(log.all_events(ADDR, s)) == [7, 8, 9, 10]
    assert seqs(log.events(ADDR, s, after=0, limit=2)) == [7, 8]
    assert seqs(log.events(ADDR, s, after=8)) == [9, 10]


def test_cut_drops_superseded_checkpoints_it_makes_unreachable(store):
    a = agent(store)
    s = a.session_id
    fill(store, ADDR, s, 9)
    log = StoreEventLog(store)
    for through in (2, 4, 8):
        log.record_checkpoint(ADDR, s, through, f"through {through}")
    log.cut_thread_events(ADDR, s, 5)
    # 2 and 4 are at or below the cut and superseded; 8 is the latest
    assert [c.through for c in log.checkpoints(ADDR, s)] == [8]
    assert log.checkpoint(ADDR, s).summary == "through 8"


@pytest.mark.parametrize("through", ["3", 3.0, True, None, 0, -1, 11, 2**64])
def test_bad_boundary_is_refused_and_changes_nothing(store, through):
    a = agent(store)
    s = a.session_id
    fill(store, ADDR, s, 10)
    a.process.record_checkpoint(s, 10, "everything")
    before = observed(store, ADDR, s)
    with pytest.raises(ThreadHistoryBoundary) as info:
        a.process.cut_thread_events(s, through)
    assert info.value.code == "thread_history_boundary"
    assert str(info.value).startswith("invalid thread history boundary")
    assert observed(store, ADDR, s) == before
    # the same boundaries refused for a checkpoint
    with pytest.raises(ThreadHistoryBoundary):
        a.process.record_checkpoint(s, through, "x")
    assert observed(store, ADDR, s) == before


def test_uncompacted_cut_is_refused_and_changes_nothing(store):
    a = agent(store)
    s = a.session_id
    fill(store, ADDR, s, 10)
    h = a.process
    before = observed(store, ADDR, s)
    with pytest.raises(ThreadHistoryUncompacted) as info:
        h.cut_thread_events(s, 1)  # no checkpoint at all
    assert info.value.code == "thread_history_uncompacted"
    assert str(info.value).startswith("thread history is not compacted through the boundary")
    assert observed(store, ADDR, s) == before
    h.record_checkpoint(s, 4, "m0..m3")
    before = observed(store, ADDR, s)
    with pytest.raises(ThreadHistoryUncompacted):
        h.cut_thread_events(s, 5)  # one past the checkpoint
    assert observed(store, ADDR, s) == before
    assert h.cut_thread_events(s, 4) == 5  # control: covered, allowed


def test_recut_of_an_already_cut_boundary_is_a_no_op(store):
    a = agent(store)
    s = a.session_id
    fill(store, ADDR, s, 8)
    h = a.process
    h.record_checkpoint(s, 6, "summary")
    assert h.cut_thread_events(s, 6) == 7
    before = observed(store, ADDR, s)
    with FailingWrites(store, fail_at=1) as fault:  # any write would fail (and make the store terminal)
        for through in (6, 3, 1):
            assert h.cut_thread_events(s, through) == 7
    assert fault.calls == 0 and not store.terminal
    assert observed(store, ADDR, s) == before


def test_sequences_are_never_reused_after_a_cut(store):
    a = agent(store)
    s = a.session_id
    fill(store, ADDR, s, 5)
    h = a.process
    h.record_checkpoint(s, 5, "all of it")
    assert h.cut_thread_events(s, 5) == 6
    log = StoreEventLog(store)
    assert log.all_events(ADDR, s) == [] and h.recent_thread_events(s, 10) == []
    assert log.last_sequence(ADDR, s) == 5 and own_event_keys(store, ADDR, s) == []
    assert log.append(ADDR, s, "note", {}).sequence == 6
    store = reopen(store)
    log = StoreEventLog(store)
    assert log.append(ADDR, s, "note", {}).sequence == 7
    assert seqs(log.all_events(ADDR, s)) == [6, 7] and log.retained_from(ADDR, s) == 6


def test_checkpoints_only_move_forward_and_retry_identically(store):
    a = agent(store)
    s = a.session_id
    fill(store, ADDR, s, 6)
    h = a.process
    first = h.record_checkpoint(s, 4, {"text": "a"})
    before = observed(store, ADDR, s)
    with FailingWrites(store, fail_at=1) as fault:
        assert h.record_checkpoint(s, 4, {"text": "a"}) == first  # a retry writes nothing
    assert fault.calls == 0
    for through, summary in ((4, {"text": "b"}), (3, {"text": "a"}), (7, "beyond the last event")):
        with pytest.raises(ThreadHistoryBoundary):
            h.record_checkpoint(s, through, summary)
    assert observed(store, ADDR, s) == before
    for summary in ({1: "not a text key"}, {"x": object()}, float("nan"), {"n": 2**70}):
        with pytest.raises(InvalidValue):
            h.record_checkpoint(s, 5, summary)
    assert observed(store, ADDR, s) == before
    with pytest.raises(PersistenceNotFound):
        StoreEventLog(store).record_checkpoint("svit://local/tests/nobody", s, 1, "x")
    assert h.record_checkpoint(s, 6, ["any", {"plain": None}]).through == 6  # control


# ---------------------------------------------------------------------- tampering


@pytest.mark.parametrize("how", ["none", "flip_summary", "moved", "flip_partition"])
def test_tampered_checkpoint_or_partition_record_is_detected(store, how):
    a = agent(store)
    s = a.session_id
    fill(store, ADDR, s, 8)
    log = StoreEventLog(store)
    log.record_checkpoint(ADDR, s, 4, "the blue summary")
    log.record_checkpoint(ADDR, s, 6, "the green summary")
    log.cut_thread_events(ADDR, s, 3)
    ck6 = keys.thread_checkpoint_key(ADDR, s, 6)
    if how == "flip_summary":
        store = tamper(store, "record", ck6, lambda old: old.replace(b"green", b"grean"))
    elif how == "moved":  # a well-formed record under another boundary's key
        old4 = store._get("record", keys.thread_checkpoint_key(ADDR, s, 4))
        store = tamper(store, "record", ck6, lambda _old: old4)
    elif how == "flip_partition":  # claim less was cut than really was; the hash is left as it was
        def earlier(old: bytes) -> bytes:
            record = cbor2.loads(old)
            assert record["retained_from"] == 4
            return cbor2.dumps({**record, "retained_from": 1}, canonical=True)

        store = tamper(store, "record", keys.thread_partition_key(ADDR, s), earlier)
    else:
        store = reopen(store)
    log = StoreEventLog(store)
    reads = {
        "checkpoint": lambda: log.checkpoint(ADDR, s),
        "compacted_through": lambda: log.compacted_through(ADDR, s),
        "events": lambda: log.all_events(ADDR, s),
        "retained_from": lambda: log.retained_from(ADDR, s),
        "cut": lambda: log.cut_thread_events(ADDR, s, 3),  # a no-op when intact
        "conversation": lambda: Svit.resume(store.resume(ADDR)).reasoner(ScriptedReasoner([])).build().conversation(),
    }
    failing = set()
    for name, read in reads.items():
        try:
            read()
        except InvalidPersistence:
            failing.add(name)
    # Every read checks that the session's records agree, so one damaged record makes
    # the whole session unreadable rather than partly (and misleadingly) readable.
    expected = set() if how == "none" else set(reads)  # "none": the untouched store reads back
    assert failing == expected
    if how == "none":
        assert log.checkpoint(ADDR, s).summary == "the green summary"
        assert log.retained_from(ADDR, s) == 4 and seqs(log.all_events(ADDR, s)) == [4, 5, 6, 7, 8]


def test_event_reinserted_below_the_retained_boundary_is_detected(store):
    a = agent(store)
    s = a.session_id
    fill(store, ADDR, s, 5)
    old_first = store._get("record", keys.thread_event_key(ADDR, s, 1))
    log = StoreEventLog(store)
    log.record_checkpoint(ADDR, s, 2, "x")
    log.cut_thread_events(ADDR, s, 2)
    batch = store._batch()
    batch.put("record", keys.thread_event_key(ADDR, s, 1), old_first)  # a well-formed record, put back
    store._write(batch)
    with pytest.raises(InvalidPersistence, match="below its retained boundary"):
        log.all_events(ADDR, s)


# ---------------------------------------------------------------------- recent windows


def test_recent_windows_and_their_limits(store):
    a = agent(store)
    s = a.session_id
    h = a.process
    log = StoreEventLog(store)
    for i in range(6):  # message, non-message, message, ...
        log.append(ADDR, s, INPUT_MESSAGE, {"message": Message.user(f"u{i}").to_json(), "turn_id": "t"})
        log.append(ADDR, s, TOOL_STARTED, {"tool_call": {"id": "c", "name": "read", "arguments": {}}, "turn_id": "t"})
    assert seqs(h.recent_thread_events(s, 3)) == [10, 11, 12]
    assert seqs(h.recent_thread_events(s, 4096)) == list(range(1, 13))
    assert [m.text for m in h.recent_thread_messages(s, 2)] == ["u4", "u5"]
    assert [m.text for m in h.recent_thread_messages(s, 4096)] == [f"u{i}" for i in range(6)]
    for limit in (0, -1, 4097, "3", True, None, 2.0):
        with pytest.raises(ResourceLimitExceeded) as info:
            h.recent_thread_events(s, limit)
        assert info.value.limit == "recent thread events" and info.value.code == "resource_limit_exceeded"
        with pytest.raises(ResourceLimitExceeded) as info:
            h.recent_thread_messages(s, limit)
        assert info.value.limit == "recent thread messages"
        assert str(info.value) == "activation resource limit exceeded: recent thread messages"
    with pytest.raises(ResourceLimitExceeded, match="recent thread messages"):
        a.recent_messages(4097)
    # after a cut, only retained events and messages
    h.record_checkpoint(s, 7, "u0..u3")
    h.cut_thread_events(s, 7)
    assert seqs(h.recent_thread_events(s, 4096)) == [8, 9, 10, 11, 12]
    assert [m.text for m in h.recent_thread_messages(s, 4096)] == ["u4", "u5"]
    assert [m.text for m in a.recent_messages(10)] == ["u4", "u5"]
    assert seqs(a.recent_events(3)) == [10, 11, 12]


def test_windows_page_across_a_cut_and_past_one_window(store, monkeypatch):
    """Messages are sparse among events, so the newest N messages can lie more than one
    window of events back; and after a cut, paging must follow sequences, not counts
    (both modelled with a 3-event window)."""
    a = agent(store)
    s = a.session_id
    log = StoreEventLog(store)
    for i in range(4):
        log.append(ADDR, s, INPUT_MESSAGE, {"message": Message.user(f"u{i}").to_json(), "turn_id": "t"})
        for _ in range(3):
            log.append(ADDR, s, TOOL_STARTED, {"tool_call": {"id": "c", "name": "read", "arguments": {}}, "turn_id": "t"})
    monkeypatch.setattr(store_events, "MAX_WINDOW", 3)
    monkeypatch.setattr(thread_model, "MAX_WINDOW", 3)
    assert [m.text for m in log.recent_thread_messages(ADDR, s, 3)] == ["u1", "u2", "u3"]
    log.record_checkpoint(ADDR, s, 5, "u0, u1")
    log.cut_thread_events(ADDR, s, 5)
    assert [m.text for m in log.recent_thread_messages(ADDR, s, 3)] == ["u2", "u3"]
    assert seqs(log.all_events(ADDR, s)) == list(range(6, 17))
    assert [m.text for m in a.messages()] == ["u2", "u3"]


# ---------------------------------------------------------------------- forks share the prefix


def test_durable_fork_shares_the_prefix_and_keeps_the_session(store):
    parent = agent(store)
    s = parent.session_id
    fill(store, ADDR, s, 5)
    parent.process.record_checkpoint(s, 3, "m0..m2")
    parent.process.cut_thread_events(s, 2)
    store.fork(ADDR, CHILD)
    log = StoreEventLog(store)
    # nothing was copied: the child holds no events of its own yet
    assert own_event_keys(store, CHILD, s) == []
    child = Svit.resume(store.resume(CHILD)).reasoner(ScriptedReasoner([])).build()
    assert child.session_id == s
    parent_view = log.all_events(ADDR, s)
    child_view = log.all_events(CHILD, s)
    assert seqs(child_view) == [3, 4, 5]
    assert [(e.type, e.data) for e in child_view] == [(e.type, e.data) for e in parent_view]
    assert {e.process_id for e in child_view} == {CHILD}
    # the child inherits the parent's boundaries, so it shows the model what the parent did
    assert (log.retained_from(CHILD, s), log.compacted_through(CHILD, s)) == (3, 3)
    assert child.conversation() == parent.conversation()
    # appends continue from the fork point, independently
    assert log.append(CHILD, s, "note", {"who": "child"}).sequence == 6
    assert log.append(ADDR, s, "note", {"who": "parent"}).sequence == 6
    assert own_event_keys(store, CHILD, s) == [6]
    assert [e.data.get("who") for e in log.all_events(CHILD, s)][-1] == "child"
    assert [e.data.get("who") for e in log.all_events(ADDR, s)][-1] == "parent"
    assert seqs(log.events(CHILD, s, after=4, limit=1)) == [5]
    assert seqs(log.recent(CHILD, s, 2)) == [5, 6]
    # a fork of the fork reads the whole chain
    store.fork(CHILD, GRANDCHILD)
    grand = log.all_events(GRANDCHILD, s)
    assert seqs(grand) == [3, 4, 5, 6] and grand[-1].data == {"who": "child"}
    assert own_event_keys(store, GRANDCHILD, s) == []
    # the view survives a reopen
    store = reopen(store)
    log = StoreEventLog(store)
    assert [e.to_json() for e in log.all_events(GRANDCHILD, s)] == [e.to_json() for e in grand]


def test_shared_prefix_pins_the_parent_until_the_fork_is_removed(store):
    parent = agent(store)
    s = parent.session_id
    fill(store, ADDR, s, 6)
    h = parent.process
    h.record_checkpoint(s, 2, "m0 m1")
    h.cut_thread_events(s, 2)  # allowed before any fork
    store.fork(ADDR, CHILD)  # the child reads 3..6
    fill(store, ADDR, s, 2)  # parent 7, 8
    h.record_checkpoint(s, 8, "everything")
    for through in (3, 6, 8):  # at or beyond the first inherited sequence
        before = observed(store, ADDR, s)
        child_before = observed(store, CHILD, s)
        with pytest.raises(ThreadHistoryPinned) as info:
            h.cut_thread_events(s, through)
        assert info.value.code == "thread_history_pinned"
        assert str(info.value).startswith("thread history is inherited by a fork")
        assert CHILD in str(info.value)
        assert observed(store, ADDR, s) == before and observed(store, CHILD, s) == child_before
    assert h.cut_thread_events(s, 2) == 3  # below the shared prefix: the usual no-op
    store.remove(CHILD)
    assert h.cut_thread_events(s, 6) == 7
    assert seqs(StoreEventLog(store).all_events(ADDR, s)) == [7, 8]


def test_parent_history_cut_behind_a_forks_back_is_detected(store):
    """Should the parent's shared events vanish anyway (a forged partition record, a
    cut that bypassed the pin), the child's read refuses instead of silently skipping."""
    parent = agent(store)
    s = parent.session_id
    fill(store, ADDR, s, 5)
    store.fork(ADDR, CHILD)
    log = StoreEventLog(store)
    assert seqs(log.all_events(CHILD, s)) == [1, 2, 3, 4, 5]  # control
    log.record_checkpoint(ADDR, s, 3, "what events 1-3 said")  # so the forged cut looks covered
    batch = store._batch()
    for sequence in (1, 2, 3):
        batch.delete("record", keys.thread_event_key(ADDR, s, sequence))
    batch.put("record", keys.thread_partition_key(ADDR, s),
              store_events.encode_partition(ADDR, s, store_events.Partition(4, None, 0, True)))
    store._write(batch)
    assert seqs(log.all_events(ADDR, s)) == [4, 5]  # the parent's own view is consistent
    with pytest.raises(InvalidPersistence, match="shared with"):
        log.all_events(CHILD, s)
    with pytest.raises(InvalidPersistence, match="shared with"):
        log.events(CHILD, s, after=1, limit=2)


def test_child_cutting_past_its_fork_point_unpins_the_parent(store):
    parent = agent(store)
    s = parent.session_id
    fill(store, ADDR, s, 4)
    store.fork(ADDR, CHILD)
    log = StoreEventLog(store)
    fill(store, CHILD, s, 2)  # child 5, 6
    log.record_checkpoint(CHILD, s, 5, "child summary")
    log.record_checkpoint(ADDR, s, 4, "parent summary")
    assert log.cut_thread_events(CHILD, s, 2) == 3  # still inside the shared prefix
    assert own_event_keys(store, ADDR, s) == [1, 2, 3, 4]  # a child's cut never deletes the parent's events
    assert log.cut_thread_events(ADDR, s, 2) == 3  # the child no longer reads 1-2: the pin follows it
    with pytest.raises(ThreadHistoryPinned):
        log.cut_thread_events(ADDR, s, 3)  # the child still reads 3 and 4
    assert log.cut_thread_events(CHILD, s, 5) == 6  # past the fork point: the child needs nothing more
    assert log.cut_thread_events(ADDR, s, 4) == 5
    assert seqs(log.all_events(CHILD, s)) == [6] and seqs(log.all_events(ADDR, s)) == []
    assert log.append(CHILD, s, "note", {}).sequence == 7


def test_process_cut_of_the_fork_copies_what_it_reads_then_unpins(store):
    parent = agent(store)
    s = parent.session_id
    fill(store, ADDR, s, 4)
    child = store.fork(ADDR, CHILD)
    log = StoreEventLog(store)
    view = [e.to_json() for e in log.all_events(CHILD, s)]
    assert own_event_keys(store, CHILD, s) == []
    child.cut()  # drops the child's fork reference, so it must first hold its shared events
    assert own_event_keys(store, CHILD, s) == [1, 2, 3, 4]
    log.record_checkpoint(ADDR, s, 4, "all")
    assert log.cut_thread_events(ADDR, s, 4) == 5  # nothing pins the parent now
    store.remove(ADDR)
    assert [e.to_json() for e in log.all_events(CHILD, s)] == view
    assert log.append(CHILD, s, "note", {}).sequence == 5


def test_stores_written_before_sharing_still_read_and_do_not_pin(store):
    """A fork made before sharing existed holds a full copy and no partition record."""
    parent = agent(store)
    s = parent.session_id
    fill(store, ADDR, s, 3)
    store.fork(ADDR, CHILD)
    log = StoreEventLog(store)
    batch = store._batch()  # rewrite the child into the earlier layout
    batch.delete("record", keys.thread_partition_key(CHILD, s))
    for event in log.all_events(CHILD, s):
        batch.put("record", keys.thread_event_key(CHILD, s, event.sequence), encode_event(event))
    store._write(batch)
    assert log.retained_from(CHILD, s) == 1 and seqs(log.all_events(CHILD, s)) == [1, 2, 3]
    assert Svit.resume(store.resume(CHILD)).reasoner(ScriptedReasoner([])).build().session_id == s
    log.record_checkpoint(ADDR, s, 3, "all")
    assert log.cut_thread_events(ADDR, s, 3) == 4  # the copy is the child's own: no pin
    assert seqs(log.all_events(CHILD, s)) == [1, 2, 3]


def test_process_only_fork_starts_a_new_session(store):
    parent = agent(store)
    fill(store, ADDR, parent.session_id, 3)
    loose = store.import_(parent.process.process.fork("svit://local/tests/loose"))  # durable, but not a store fork
    svit = Svit.resume(loose).reasoner(ScriptedReasoner([])).build()
    assert svit.session_id != parent.session_id and svit.messages() == []
    assert StoreEventLog(store).last_sequence("svit://local/tests/loose", parent.session_id) == 0
    in_memory = Svit.resume(parent.fork_process("svit://local/tests/loose-memory")).reasoner(ScriptedReasoner([])).build()
    assert in_memory.session_id != parent.session_id


# ---------------------------------------------------------------------- the loop


def turn(text: str) -> list:
    return [ScriptedReasoner.tool("write", path=f"/memory/facts/{text}", value=text), f"noted {text}"]


def test_resumed_agent_starts_from_checkpoint_summary_plus_retained_events(store_location):
    path = store_location
    store = ProcessStore.open(path)
    a = agent(store, steps=turn("blue") + turn("cat"))
    a.inbox().send("My color is blue.")
    a.inbox().send("My pet is a cat.")
    a.block(timeout=10)
    s = a.session_id
    first_turn = len([e for e in a.recent_events(100) if e.data.get("turn_id") == a.recent_events(100)[0].data["turn_id"]])
    full = a.conversation()
    assert [m.text for m in full if m.role == "user"] == ["My color is blue.", "My pet is a cat."]
    checkpoint = a.compact("The user's color is blue.", through=first_turn)
    assert checkpoint.through == first_turn and a.process.compacted_through(s) == first_turn
    compacted = a.conversation()
    assert compacted[0] == Message.user(
        f"Summary of the conversation so far (events 1-{first_turn}, compacted):\n\nThe user's color is blue.",
        id=f"checkpoint-{first_turn}")
    assert compacted[1:] == full[len(full) // 2:]  # the second turn, verbatim
    assert a.cut_history() == first_turn + 1
    assert a.conversation() == compacted  # the cut changes what is stored, not what the model sees
    assert [m.text for m in a.messages() if m.role == "user"] == ["My pet is a cat."]
    store.close()

    store = ProcessStore.open(path)
    reasoner = ScriptedReasoner(["you like blue and cats"])
    resumed = Svit.resume(store.resume(ADDR)).reasoner(reasoner).build()
    assert resumed.session_id == s and resumed.process.retained_from(s) == first_turn + 1
    assert resumed.conversation() == compacted
    resumed.inbox().send("What do I like?")
    resumed.block(timeout=10)
    _, seen, _ = reasoner.requests[0]
    assert seen[:len(compacted)] == compacted
    assert [m.text for m in seen[len(compacted):]] == ["What do I like?"]
    assert resumed.read("/memory/facts") == {"blue": "blue", "cat": "cat"}
    store.close()


def test_compaction_with_messages_and_repeated_compact_and_cut(store):
    a = agent(store, steps=["one", "two", "three"])
    for text in ("a", "b"):
        a.inbox().send(text)
    a.block(timeout=10)
    s = a.session_id
    kept = [Message.user("earlier: a and b", id="summary-1")]
    a.compact(kept)
    a.cut_history()
    assert a.conversation() == kept and a.messages() == []
    assert a.process.retained_from(s) == 5
    b = Svit.resume(store.resume(ADDR)).reasoner(ScriptedReasoner(["three"])).build()
    b.inbox().send("c")
    b.block(timeout=10)
    assert [m.text for m in b.conversation()] == ["earlier: a and b", "c", "three"]
    b.compact("a, b and c")  # compacting again moves the checkpoint forward
    b.cut_history()
    assert b.process.retained_from(s) == 7 and b.process.compacted_through(s) == 6
    assert [m.text for m in b.conversation()] == [
        "Summary of the conversation so far (events 1-6, compacted):\n\na, b and c"]
    # refusals through the loop: nothing new to cover, a summary that is not plain data
    with pytest.raises(ThreadHistoryBoundary):
        b.compact("again")
    with pytest.raises(InvalidValue):
        b.compact({"not plain": {1, 2}})
    assert b.process.compacted_through(s) == 6


def test_any_plain_summary_shape_is_shown_so_a_cut_agent_can_still_take_turns(store):
    # A host may record any plain data through the handle; the loop shows what it does not
    # recognise as canonical JSON text rather than failing every later turn.
    a = agent(store, steps=["one"])
    s = a.session_id
    a.inbox().send("a")
    a.block(timeout=10)
    last = a.process.recent_thread_events(s, 1)[0].sequence
    a.process.record_checkpoint(s, last, {"text": "greeting", "score": 1.0})
    a.process.cut_thread_events(s, last)
    heading = f"Summary of the conversation so far (events 1-{last}, compacted):\n\n"
    assert [m.text for m in a.conversation()] == [heading + '{"score":1.0,"text":"greeting"}']
    b = Svit.resume(store.resume(ADDR)).reasoner(ScriptedReasoner(["two"])).build()
    b.inbox().send("b")
    b.block(timeout=10)
    assert b.failure is None
    assert [m.text for m in b.conversation()] == [heading + '{"score":1.0,"text":"greeting"}', "b", "two"]


def test_cut_history_without_a_checkpoint_is_uncompacted(store):
    a = agent(store, steps=["ok"])
    a.inbox().send("hi")
    a.block(timeout=10)
    with pytest.raises(ThreadHistoryUncompacted):
        a.cut_history()
    assert a.process.retained_from(a.session_id) == 1 and len(a.messages()) == 2


# ---------------------------------------------------------------------- fault injection


@pytest.mark.parametrize("apply", [False, True])
def test_failed_cut_write_changes_nothing(store, apply):
    a = agent(store)
    s = a.session_id
    fill(store, ADDR, s, 6)
    a.process.record_checkpoint(s, 4, "m0..m3")
    before = observed(store, ADDR, s)
    with FailingWrites(store, fail_at=1, apply=apply) as fault:
        with pytest.raises(PersistenceUnavailable):
            a.process.cut_thread_events(s, 4)
    assert fault.failed == 1 and store.terminal
    with pytest.raises(PersistenceUnavailable):
        a.process.retained_from(s)
    store = reopen(store)
    after = observed(store, ADDR, s)
    if not apply:
        assert after == before
    else:  # check on the check: the batch landed, and it landed whole
        assert after != before
        assert after[1] == 5 and own_event_keys(store, ADDR, s) == [5, 6]
    store.close()


@pytest.mark.parametrize("apply", [False, True])
def test_failed_checkpoint_write_changes_nothing(store, apply):
    a = agent(store)
    s = a.session_id
    fill(store, ADDR, s, 3)
    before = observed(store, ADDR, s)
    with FailingWrites(store, fail_at=1, apply=apply) as fault:
        with pytest.raises(PersistenceUnavailable):
            a.process.record_checkpoint(s, 3, "m0..m2")
    assert fault.failed == 1
    store = reopen(store)
    after = observed(store, ADDR, s)
    if not apply:
        assert after == before
        assert StoreEventLog(store).checkpoint(ADDR, s) is None
    else:
        assert after != before and after[2] == 3
    store.close()


@pytest.mark.parametrize("apply", [False, True])
def test_failed_fork_share_write_changes_nothing(store, apply):
    parent = agent(store)
    s = parent.session_id
    fill(store, ADDR, s, 3)
    with FailingWrites(store, fail_at=1, apply=apply):
        with pytest.raises(PersistenceUnavailable):
            store.fork(ADDR, CHILD)
    store = reopen(store)
    log = StoreEventLog(store)
    if not apply:
        assert CHILD not in store.addresses() and log.sessions(CHILD) == [] and log.all_events(CHILD, s) == []
    else:  # the child and its share arrived together
        assert CHILD in store.addresses() and seqs(log.all_events(CHILD, s)) == [1, 2, 3]
    store.close()


def _delete_record(store: ProcessStore, key: bytes) -> None:
    batch = store._batch()
    batch.delete("record", key)
    store._write(batch)


@pytest.mark.parametrize("lost", ["checkpoint", "partition", "both"])
def test_a_lost_checkpoint_or_partition_record_is_invalid_persistence(store, lost):
    # Empty is not the same as unreadable: a lost record must not read as "never cut"
    # (reusing sequence numbers) or "never compacted" (dropping the summary).
    a = agent(store)
    session = a.session_id
    log = StoreEventLog(store)
    fill(store, ADDR, session, 5)
    log.record_checkpoint(ADDR, session, 5, "summary of m0..m4")
    log.cut_thread_events(ADDR, session, 5)
    assert (log.retained_from(ADDR, session), log.compacted_through(ADDR, session)) == (6, 5)  # control
    if lost in ("checkpoint", "both"):
        _delete_record(store, keys.thread_checkpoint_key(ADDR, session, 5))
    if lost in ("partition", "both"):
        _delete_record(store, keys.thread_partition_key(ADDR, session))
    if lost == "both":  # nothing left at all: indistinguishable from a session never used
        assert log.last_sequence(ADDR, session) == 0
        return
    for read in (log.retained_from, log.compacted_through, log.last_sequence,
                 lambda p, s: log.events(p, s), lambda p, s: log.recent(p, s, 3)):
        with pytest.raises(InvalidPersistence):
            read(ADDR, session)
    with pytest.raises(InvalidPersistence):
        log.append(ADDR, session, "note", {})
    assert own_event_keys(store, ADDR, session) == []


_INTERRUPTED_HOST = """
import os, sys
from svit import Message, Svit
from svit.reasoners import ScriptedReasoner
from svit.store import ProcessStore

class DiesAfterTheTool(ScriptedReasoner):
    def complete(self, system_prompt, messages, tools):
        if self._calls == 1:
            os._exit(0)  # the host goes away after the tool step, mid-turn
        return super().complete(system_prompt, messages, tools)

store = ProcessStore.open(sys.argv[1])
steps = [ScriptedReasoner.tool("write", path="/memory/facts/x", value=1), "never"]
agent = Svit.builder(sys.argv[2]).memory("facts", {}).store(store).reasoner(DiesAfterTheTool(steps)).build()
agent.start()
agent.inbox().send(Message.user("hi"))
agent.block()
"""


class _Recording(ScriptedReasoner):
    def __init__(self, steps):
        super().__init__(steps)
        self.seen: list[list[dict]] = []

    def complete(self, system_prompt, messages, tools):
        self.seen.append([m.to_json() for m in messages])
        return super().complete(system_prompt, messages, tools)


# RocksDB only: two stores per test, each written by a host process that stops mid-turn.
def test_a_cut_inside_an_interrupted_turn_does_not_change_what_the_model_sees(tmp_path):
    import subprocess
    import sys

    views = {}
    for cut in (False, True):
        path = str(tmp_path / f"store-{cut}")
        subprocess.run([sys.executable, "-c", _INTERRUPTED_HOST, path, ADDR], check=True, timeout=60)
        store = ProcessStore.open(path)
        handle = store.resume(ADDR)
        session = handle.read("/thread")["session_id"]
        kinds = [e.type for e in StoreEventLog(store).all_events(ADDR, session)]
        assert kinds[0] == INPUT_MESSAGE and kinds[-1] == loop_events.TOOL_COMPLETED  # the turn was cut short
        handle.record_checkpoint(session, 2, {"text": "the user said hi; the agent chose to write x"})
        if cut:
            handle.cut_thread_events(session, 2)  # the turn's input is gone
        reasoner = _Recording(["done"])
        resumed = Svit.resume(handle).reasoner(reasoner).build()
        resumed.start()
        resumed.block(timeout=30)
        assert resumed.failure is None
        views[cut] = [{k: v for k, v in m.items() if k != "id"} for m in reasoner.seen[0]]  # ids differ per run
        store.close()
    assert views[False] == views[True]
    assert [m["role"] for m in views[True]] == ["user", "user"]  # the summary, then the retried input


@pytest.mark.parametrize("data", [{"b": b"1"}, {"n": float("nan")}, {"i": float("inf")}, {"s": {1, 2}}])
def test_event_data_must_be_plain_json_like(store, data):
    a = agent(store)
    log = StoreEventLog(store)
    with pytest.raises(InvalidValue):
        log.append(ADDR, a.session_id, "note", data)
    assert log.last_sequence(ADDR, a.session_id) == 0
    assert log.append(ADDR, a.session_id, "note", {"ok": [1, 2.5, "x", None, True]}).sequence == 1  # control
