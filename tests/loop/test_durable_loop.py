"""Durable Svit: the conversation lives in the store's event log (reference §10.8, §11.3)."""

from __future__ import annotations

import threading

import pytest

from svit import Message, Svit
from svit.errors import InvalidPersistence, PersistenceNotFound, PersistenceUnavailable, ResourceLimitExceeded
from svit.loop import MemoryEventLog
from svit.loop.events import INPUT_MESSAGE, OUTPUT_MESSAGE, TOOL_COMPLETED, TOOL_STARTED, TURN_FAILED, Event
from svit.reasoners import ScriptedReasoner
from svit.store import ProcessStore, keys
from svit.store.events import StoreEventLog, encode_event
from tests.conftest import raw_db

ADDRESS = "svit://local/tests/durable-agent"
tool = ScriptedReasoner.tool


def remember(key: str, value: str) -> list:
    """The scripted steps of one turn: write a fact through a tool, then answer."""
    return [tool("write", path=f"/memory/facts/{key}", value=value), f"noted {key}"]


def texts(messages: list[Message]) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in messages]


TURN = [INPUT_MESSAGE, OUTPUT_MESSAGE, TOOL_STARTED, TOOL_COMPLETED, OUTPUT_MESSAGE]


# ---------------------------------------------------------------------- end to end


def test_durable_svit_resumes_conversation_memory_and_pending_inbox(tmp_path):
    path = str(tmp_path / "store")
    entered, gate = threading.Event(), threading.Event()

    def stuck(_messages):
        entered.set()
        gate.wait()  # released only at the very end, after the store is closed
        return "too late"

    store = ProcessStore.open(path)
    reasoner = ScriptedReasoner(remember("color", "blue") + remember("pet", "cat") + [stuck])
    agent = Svit.builder(ADDRESS).memory("facts", {}).instructions("Remember facts.").reasoner(reasoner).store(store).build()
    assert isinstance(agent.event_log, StoreEventLog)
    session = agent.session_id
    outbox = agent.outbox()
    agent.start()
    agent.inbox().send(Message.user("My color is blue."))
    assert outbox.recv(timeout=10).text == "noted color"
    agent.inbox().send(Message.user("My pet is a cat."))
    assert outbox.recv(timeout=10).text == "noted pet"
    agent.inbox().send(Message.user("I drink tea."))
    assert entered.wait(10)  # the third turn has begun and will not finish
    with pytest.raises(TimeoutError):
        agent.block(timeout=0.1)
    before = [e.to_json() for e in agent.recent_events(100)]
    expected = [
        ("user", "My color is blue."), ("agent", ""), ("tool", None), ("agent", "noted color"),
        ("user", "My pet is a cat."), ("agent", ""), ("tool", None), ("agent", "noted pet"),
        ("user", "I drink tea."),
    ]
    assert texts(agent.messages())[-1] == ("user", "I drink tea.")
    assert [r for r, _ in texts(agent.messages())] == [r for r, _ in expected]
    zombie = agent.worker.thread
    version = agent.version
    del agent, outbox
    store.close()  # nothing is killed: the old loop is still parked in its reasoner

    store = ProcessStore.open(path)
    handle = store.resume(ADDRESS)
    finisher = ScriptedReasoner(remember("drink", "tea"))
    agent = Svit.resume(handle).reasoner(finisher).build()
    assert isinstance(agent.event_log, StoreEventLog)
    assert agent.session_id == session
    assert agent.read("/thread/instructions") == "Remember facts."
    assert agent.version == version  # reopening commits nothing new
    # the conversation is intact and in order
    assert [e.to_json() for e in agent.recent_events(100)] == before
    assert [e.sequence for e in agent.recent_events(100)] == list(range(1, len(before) + 1))
    assert [e.type for e in agent.recent_events(100)] == TURN + TURN + [INPUT_MESSAGE]
    got = texts(agent.messages())
    assert [t for r, t in got if r != "tool"] == [t for r, t in expected if r != "tool"]
    assert [r for r, _ in got] == [r for r, _ in expected]
    # memory is intact; the third message is still pending
    assert agent.read("/memory/facts") == {"color": "blue", "pet": "cat"}
    inbox = agent.read("/inbox")
    assert len(inbox) == 1 and Message.from_json(inbox[0]).text == "I drink tea."

    # the resumed loop processes the pending item to completion
    outbox = agent.outbox()
    agent.start()
    assert outbox.recv(timeout=10).text == "noted drink"
    agent.block(timeout=10)
    assert agent.read("/memory/facts") == {"color": "blue", "pet": "cat", "drink": "tea"}
    assert agent.read("/inbox") == []
    events = agent.event_log.all_events(ADDRESS, session)
    assert [e.type for e in events] == TURN + TURN + [INPUT_MESSAGE, TURN_FAILED] + TURN
    assert events[len(TURN) * 2 + 1].data["error"] == "the turn was interrupted before it completed"
    # the model saw the retried message once, not the interrupted attempt
    _, seen, _ = finisher.requests[0]
    assert [m.text for m in seen if m.role == "user"] == ["My color is blue.", "My pet is a cat.", "I drink tea."]

    # the abandoned loop of the first host cannot write through its closed store
    final = [e.to_json() for e in events]
    gate.set()
    zombie.join(10)
    assert not zombie.is_alive()
    assert [e.to_json() for e in agent.event_log.all_events(ADDRESS, session)] == final
    store.close()

    # and everything is still there after another reopen
    store = ProcessStore.open(path)
    again = Svit.resume(store.resume(ADDRESS)).reasoner(ScriptedReasoner([])).build()
    assert [e.to_json() for e in again.event_log.all_events(ADDRESS, session)] == final
    assert [m.text for m in again.recent_messages(1)] == ["noted drink"]
    store.close()


# ---------------------------------------------------------------------- the log itself


def durable(store, address=ADDRESS, steps=()):
    return Svit.builder(address).memory("facts", {}).reasoner(ScriptedReasoner(list(steps))).store(store).build()


def test_events_survive_reopen_and_page_by_sequence(tmp_path):
    path = str(tmp_path / "store")
    store = ProcessStore.open(path)
    agent = durable(store)
    log = StoreEventLog(store)
    for i in range(10):
        event = log.append(ADDRESS, agent.session_id, "note", {"i": i, "f": 1.0, "nested": {"b": [1, None, "x"]}})
        assert event.sequence == i + 1
    session = agent.session_id
    store.close()

    store = ProcessStore.open(path)
    log = StoreEventLog(store)
    all_events = log.all_events(ADDRESS, session)
    assert [e.sequence for e in all_events] == list(range(1, 11))
    assert [e.data["i"] for e in all_events] == list(range(10))
    assert type(all_events[0].data["f"]) is float and all_events[0].data["nested"] == {"b": [1, None, "x"]}
    assert [e.sequence for e in log.events(ADDRESS, session, after=3, limit=4)] == [4, 5, 6, 7]
    assert [e.sequence for e in log.events(ADDRESS, session, after=8)] == [9, 10]
    assert log.events(ADDRESS, session, after=10) == []
    assert [e.sequence for e in log.recent(ADDRESS, session, 3)] == [8, 9, 10]
    assert [e.sequence for e in log.recent(ADDRESS, session, 4096)] == list(range(1, 11))
    assert log.recent(ADDRESS, "other-session", 5) == []
    assert log.last_sequence(ADDRESS, session) == 10 and log.sessions(ADDRESS) == [session]
    # sequences continue after a reopen; the Svit over the resumed handle sees the same log
    assert log.append(ADDRESS, session, "note", {}).sequence == 11
    agent = Svit.resume(store.resume(ADDRESS)).reasoner(ScriptedReasoner([])).build()
    assert [e.sequence for e in agent.recent_events(2)] == [10, 11]
    # paging an empty-but-long log through the Svit uses the store
    for limit in (0, 4097):
        with pytest.raises(ResourceLimitExceeded, match="recent thread events"):
            log.recent(ADDRESS, session, limit)
    with pytest.raises(ResourceLimitExceeded, match="thread events"):
        log.events(ADDRESS, session, limit=4097)
    store.close()


def test_recent_events_window_is_bounded(store):
    agent = durable(store, steps=["ok"])
    agent.inbox().send("hi")
    agent.block(timeout=10)
    assert [e.type for e in agent.recent_events(4096)] == [INPUT_MESSAGE, OUTPUT_MESSAGE]
    with pytest.raises(ResourceLimitExceeded) as info:
        agent.recent_events(4097)
    assert info.value.limit == "recent thread events"
    with pytest.raises(ResourceLimitExceeded):
        agent.recent_messages(4097)
    # the in-memory log has the same upper bound through the Svit API
    memory = Svit.builder("svit://local/tests/memory").reasoner(ScriptedReasoner([])).build()
    assert isinstance(memory.event_log, MemoryEventLog)
    with pytest.raises(ResourceLimitExceeded):
        memory.recent_events(4097)


def test_events_of_a_missing_address_are_refused(store):
    log = StoreEventLog(store)
    with pytest.raises(PersistenceNotFound):
        log.append("svit://local/tests/nobody", "s", "note", {})


def test_remove_drops_events(store):
    agent = durable(store, steps=["ok"])
    other = durable(store, address=ADDRESS + "-2", steps=["ok too"])
    for a in (agent, other):
        a.inbox().send("hi")
        a.block(timeout=10)
    session = agent.session_id
    log = StoreEventLog(store)
    assert len(log.all_events(ADDRESS, session)) == 2
    store.remove(ADDRESS)
    assert log.all_events(ADDRESS, session) == [] and log.sessions(ADDRESS) == []
    assert not any(key.startswith(keys.thread_events_prefix(ADDRESS).hex()) for key in
                   (k.split(":", 1)[1] for k in store.record_digests()))
    # the neighbour (whose address extends the removed one) keeps its events
    assert len(log.all_events(ADDRESS + "-2", other.session_id)) == 2
    # a re-created address starts empty
    again = durable(store)
    assert again.recent_events(10) == []


@pytest.mark.parametrize("how", ["flip", "moved", "gap"])
def test_tampered_event_is_detected_on_read(tmp_path, how):
    path = str(tmp_path / "store")
    store = ProcessStore.open(path)
    agent = durable(store, steps=["ok"])
    agent.inbox().send("hi")
    agent.block(timeout=10)
    session = agent.session_id
    store.close()
    key1 = keys.thread_event_key(ADDRESS, session, 1)
    key2 = keys.thread_event_key(ADDRESS, session, 2)
    db = raw_db(path)
    cf = db.get_column_family("record")
    if how == "flip":
        old = cf[key1]
        i = old.find(b"hi")
        cf[key1] = old[:i] + b"ho" + old[i + 2:]
    elif how == "moved":  # a valid record under the wrong key
        cf[key1] = cf[key2]
    else:  # a missing record in the middle
        cf[keys.thread_event_key(ADDRESS, session, 3)] = cf[key2]
        del cf[key2]
    del cf
    db.close()
    import gc

    gc.collect()

    store = ProcessStore.open(path)
    resumed = Svit.resume(store.resume(ADDRESS)).reasoner(ScriptedReasoner([])).build()
    with pytest.raises(InvalidPersistence):
        resumed.messages()
    with pytest.raises(InvalidPersistence):
        resumed.recent_events(10)
    store.close()


def test_reset_index_leaves_events_byte_identical(store):
    agent = durable(store, steps=remember("color", "blue"))
    agent.inbox().send("blue")
    agent.block(timeout=10)
    prefix = keys.thread_events_prefix(ADDRESS)
    raw = {k: v for k, v in store._scan("record", prefix)}
    assert len(raw) == len(TURN)
    digests = store.record_digests()
    assert sum(1 for k in digests if k.startswith("record:" + b"e/".hex())) == len(TURN)
    store.reset_index()
    assert {k: v for k, v in store._scan("record", prefix)} == raw
    assert store.record_digests() == digests
    assert [e.type for e in agent.recent_events(10)] == TURN


def test_event_records_are_canonical_and_refuse_unreadable_data(store):
    agent = durable(store)
    log = agent.event_log
    a = log.append(ADDRESS, agent.session_id, "note", {"b": 1, "a": 2})
    b = log.append(ADDRESS, agent.session_id, "note", {"a": 2, "b": 1})
    assert a.data == b.data and list(a.data) == ["a", "b"]
    raw = dict(store._scan("record", keys.thread_session_prefix(ADDRESS, agent.session_id)))
    assert list(raw.values()) == [encode_event(a), encode_event(b)]
    # the encoding does not depend on the order the host built the map in
    assert encode_event(Event(1, ADDRESS, "s", "t", {"b": 1, "a": 2})) == encode_event(Event(1, ADDRESS, "s", "t", {"a": 2, "b": 1}))
    with pytest.raises(Exception) as info:
        log.append(ADDRESS, agent.session_id, "note", {"big": 2**70})
    assert info.value.code == "invalid_value"
    assert log.last_sequence(ADDRESS, agent.session_id) == 2  # nothing written, no sequence used


def test_durable_fork_keeps_the_session_and_its_history(store):
    parent = durable(store, steps=remember("color", "blue"))
    parent.inbox().send("blue")
    parent.block(timeout=10)
    child_address = "svit://local/tests/durable-child"
    store.fork(ADDRESS, child_address)
    child = Svit.resume(store.resume(child_address)).reasoner(ScriptedReasoner(["child ok"])).build()
    assert child.session_id == parent.session_id
    assert child.read("/thread/process_id") == child_address
    assert texts(child.messages()) == texts(parent.messages())
    assert {e.process_id for e in child.recent_events(10)} == {child_address}
    child.inbox().send("more")
    child.block(timeout=10)
    # the child's new events do not reach the parent, and sequences continue
    assert [e.sequence for e in child.recent_events(10)] == list(range(1, len(TURN) + 3))
    assert len(parent.recent_events(100)) == len(TURN)
    # a process-only fork (no store) starts a new session
    loose = Svit.resume(store.resume(ADDRESS).process.fork("svit://local/tests/loose")).reasoner(ScriptedReasoner([])).build()
    assert loose.session_id != parent.session_id and loose.messages() == []
    # removing the child drops only its copy
    store.remove(child_address)
    assert len(parent.recent_events(100)) == len(TURN)


def test_closed_store_refuses_event_reads(tmp_path):
    store = ProcessStore.open(str(tmp_path / "store"))
    agent = durable(store)
    store.close()
    with pytest.raises(PersistenceUnavailable):
        agent.recent_events(1)
