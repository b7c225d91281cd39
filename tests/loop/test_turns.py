"""One turn without a thread (run_next_turn), retries with backoff, and set-aside items."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from svit import Message, Process, Svit
from svit.errors import InvalidValue
from svit.loop import (
    Closed,
    Empty,
    Failed,
    LoopOptions,
    MemoryEventLog,
    ReasonerFailed,
    Reply,
    Retrying,
    SetAsideNotFound,
    ToolCall,
    TurnFailed,
    TurnOutcome,
    run_next_turn,
)
from svit.loop.attempts import backoff_delay, failure_record, inbox_item_id, inbox_message
from svit.loop.set_aside import drop_set_aside, inbox_report, retry_set_aside
from svit.reasoners import ScriptedReasoner
from svit.store import ProcessStore

ADDRESS = "svit://local/tests/turns"
NOW = 1_000_000.0


def fail(text: str = "provider unavailable", **facts: Any) -> Any:
    def step(conversation: Any) -> str:
        raise ReasonerFailed(text, **facts)

    return step


def options(**kwargs: Any) -> LoopOptions:
    """Loop options for a test; an in-memory process needs an event log to keep its conversation."""
    opts = LoopOptions().max_attempts(kwargs.pop("attempts", 3)).retry_backoff(*kwargs.pop("backoff", (2.0, 10.0)))
    log = kwargs.pop("log", None)
    return opts.event_log(log) if log is not None else opts


def durable(store: ProcessStore, *messages: str) -> tuple[Any, list[Message]]:
    handle = store.create(Process.builder(ADDRESS).build())
    sent = [Message.user(text) for text in messages]
    for message in sent:
        handle.enqueue_inbox(message.to_json())
    return handle, sent


def sources(handle: Any) -> list[str]:
    return [t.source for t in handle.query(limit=4096)]


# ---------------------------------------------------------------------- run_next_turn


def test_an_empty_inbox_is_empty_and_commits_nothing():
    process = Process.builder(ADDRESS).build()
    reasoner = ScriptedReasoner([])
    outcome = run_next_turn(process, reasoner, options(), now=NOW)
    assert outcome == TurnOutcome("empty")
    assert reasoner.requests == []


def test_a_turn_answers_the_head_and_acknowledges_it(store):
    handle, sent = durable(store, "one", "two")
    reasoner = ScriptedReasoner(["first", "second"])
    first = run_next_turn(handle, reasoner, options(), now=NOW)  # the store's event log
    assert (first.kind, first.item_id, first.reply.text) == ("done", sent[0].id, "first")
    assert handle.read("/inbox") == [sent[1].to_json()]
    second = run_next_turn(handle, reasoner, options(), now=NOW)
    assert (second.kind, second.reply.text) == ("done", "second")
    # The conversation continues across calls through the store's event log.
    assert [m.text for m in reasoner.requests[1][1]] == ["one", "first", "two"]
    assert run_next_turn(handle, reasoner, options(), now=NOW).kind == "empty"


def test_a_failed_turn_waits_for_its_backoff_then_runs_again():
    process = Process.builder(ADDRESS).build()
    process.enqueue_inbox(Message.user("hi").to_json())
    reasoner = ScriptedReasoner([fail(), fail(), "finally"])
    opts = options(attempts=5, backoff=(2.0, 3.0))
    outcome = run_next_turn(process, reasoner, opts, now=NOW)
    assert outcome.kind == "retry" and outcome.retry_at == NOW + 2.0
    assert outcome.error["code"] == "reasoner_failed" and outcome.error["retryable"] is True
    failing = process.read("/thread/turns/failing")
    assert failing["attempts"] == 1 and failing["retry_at"] == NOW + 2.0
    # Not due yet: the same outcome, and the reasoner is not asked.
    early = run_next_turn(process, reasoner, opts, now=NOW + 1.0)
    assert (early.kind, early.retry_at) == ("retry", NOW + 2.0) and len(reasoner.requests) == 1
    again = run_next_turn(process, reasoner, opts, now=NOW + 2.0)
    assert again.retry_at == NOW + 2.0 + 3.0  # 2 * 2**1 = 4, capped at 3
    done = run_next_turn(process, reasoner, opts, now=NOW + 5.0)
    assert done.kind == "done" and done.reply.text == "finally"
    assert process.read("/inbox") == [] and process.read("/thread/turns") is None


def test_attempts_survive_a_restart_then_the_item_is_set_aside_and_the_next_runs(tmp_path):
    path = str(tmp_path / "store")
    store = ProcessStore.open(path)
    handle, sent = durable(store, "poison", "fine")
    opts = options(attempts=3, backoff=(1.0, 1.0))
    assert run_next_turn(handle, ScriptedReasoner([fail()]), opts, now=NOW).kind == "retry"
    store.close()
    for attempt in (2, 3):  # each time a new OS-process-like start: reopen the store
        store = ProcessStore.open(path)
        handle = store.resume(ADDRESS)
        assert handle.read("/thread/turns/failing/attempts") == attempt - 1
        outcome = run_next_turn(handle, ScriptedReasoner([fail()]), opts, now=NOW + attempt)
        if attempt < 3:
            store.close()
    assert (outcome.kind, outcome.item_id) == ("set_aside", sent[0].id)
    [entry] = handle.read("/thread/turns/set_aside")
    assert entry["item"] == sent[0].to_json() and entry["attempts"] == 3
    assert entry["error"]["message"] == "reasoner request failed: provider unavailable"
    assert handle.read("/inbox") == [sent[1].to_json()]
    assert run_next_turn(handle, ScriptedReasoner(["ok"]), opts, now=NOW + 9).kind == "done"
    assert sources(handle).count("loop.retry_scheduled") == 2 and sources(handle).count("loop.set_aside") == 1
    store.close()


def test_a_non_retryable_failure_is_set_aside_at_once():
    process = Process.builder(ADDRESS).build()
    process.enqueue_inbox(Message.user("hi").to_json())
    cause = ValueError("the provider said no")
    reasoner_error = ReasonerFailed("model provider returned HTTP 404", status=404, retryable=False, error_type="not_found")

    def step(conversation: Any) -> str:
        raise reasoner_error from cause

    outcome = run_next_turn(process, ScriptedReasoner([step]), options(attempts=5), now=NOW)
    assert outcome.kind == "set_aside"
    assert outcome.error == {
        "cause": {"message": "the provider said no", "type": "ValueError"},
        "code": "reasoner_failed",
        "error_type": "not_found",
        "message": "reasoner request failed: model provider returned HTTP 404",
        "retryable": False,
        "status": 404,
    }


def test_a_reply_cut_off_for_length_is_a_failure_not_an_answer():
    process = Process.builder(ADDRESS).build()
    process.enqueue_inbox(Message.user("write an essay").to_json())
    log = MemoryEventLog()
    cut = Reply(text="Once upon a", finish_reason="length", usage={"completion_tokens": 16})
    outcome = run_next_turn(process, ScriptedReasoner([cut]), options(attempts=1, log=log), now=NOW)
    assert outcome.kind == "set_aside" and outcome.reply is None
    assert outcome.error["code"] == "reply_truncated" and outcome.error["usage"] == {"completion_tokens": 16}
    events = log.recent(ADDRESS, process.read("/thread/session_id"), 10)
    assert [e.type for e in events] == ["input.message", "turn.failed"]


def test_finish_reason_and_usage_are_recorded_with_the_output_events():
    process = Process.builder(ADDRESS).build()
    process.enqueue_inbox(Message.user("hi").to_json())
    log = MemoryEventLog()
    steps = [
        Reply(tool_calls=(ToolCall("c1", "read", {"path": "/memory"}),), finish_reason="tool_calls",
              usage={"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}),
        Reply(text="done", finish_reason="stop", usage={"prompt_tokens": 20, "completion_tokens": 1, "total_tokens": 21}),
    ]
    assert run_next_turn(process, ScriptedReasoner(steps), options(log=log), now=NOW).kind == "done"
    outputs = [e.data for e in log.recent(ADDRESS, process.read("/thread/session_id"), 10)
               if e.type == "output.message.completed"]
    assert [(d["finish_reason"], d["usage"]["total_tokens"]) for d in outputs] == [("tool_calls", 12), ("stop", 21)]


def test_a_delivered_message_is_shown_as_a_message_from_its_sender():
    item = {"kind": "message", "message_id": "svit://a:3:0", "from": "svit://a", "body": {"n": 1}}
    assert inbox_item_id(item) == "svit://a:3:0"
    message = inbox_message(item)
    assert (message.role, message.id, message.text) == ("user", "svit://a:3:0", 'Message from svit://a:\n{"n":1}')
    process = Process.builder(ADDRESS).build()
    process.enqueue_inbox(item)
    reasoner = ScriptedReasoner(["thanks"])
    assert run_next_turn(process, reasoner, options(), now=NOW).kind == "done"
    assert reasoner.requests[0][1][0].text == 'Message from svit://a:\n{"n":1}'


def test_an_item_that_is_not_a_message_is_set_aside_at_once():
    process = Process.builder(ADDRESS).build()
    process.enqueue_inbox({"what": "not a message"})
    outcome = run_next_turn(process, ScriptedReasoner(["never"]), options(attempts=5), now=NOW)
    assert outcome.kind == "set_aside" and outcome.item_id.startswith("item-")
    assert outcome.error["code"] == "invalid_inbox_item" and outcome.error["retryable"] is False


def test_an_interrupted_turn_counts_as_an_attempt():
    process = Process.builder(ADDRESS).build()
    log = MemoryEventLog()
    process.enqueue_inbox(Message.user("crashes the host").to_json())
    opts = options(attempts=2, log=log, backoff=(0.0, 0.0))
    agent = Svit(process, LoopOptions().reasoner(ScriptedReasoner([])).event_log(log))
    agent.worker.record("input.message", {"message": Message.user("crashes the host").to_json(), "turn_id": "t1"})
    first = run_next_turn(process, ScriptedReasoner([fail()]), opts, now=NOW)  # interrupted + this failure: 2
    assert first.kind == "set_aside"
    failures = [e.data["failure"]["code"] for e in log.recent(ADDRESS, agent.session_id, 10) if e.type == "turn.failed"]
    assert failures == ["turn_interrupted", "reasoner_failed"]
    assert process.read("/thread/turns/set_aside/0/attempts") == 2


def test_backoff_and_options():
    assert [backoff_delay(n, 1.0, 10.0) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 8.0, 10.0]
    assert backoff_delay(10_000, 1.0, 10.0) == 10.0
    with pytest.raises(InvalidValue, match="max_attempts"):
        LoopOptions().max_attempts(0)
    with pytest.raises(InvalidValue, match="backoff cap"):
        LoopOptions().retry_backoff(5, 1)
    with pytest.raises(InvalidValue, match="backoff base"):
        LoopOptions().retry_backoff(-1, 1)
    assert failure_record(RuntimeError("boom"))["code"] == "internal"


# ---------------------------------------------------------------------- the Svit thread


def test_the_svit_thread_retries_after_backoff_and_goes_on_after_a_set_aside():
    reasoner = ScriptedReasoner([fail(), "answer one", fail("still down"), fail("still down"), "answer three"])
    agent = Svit.builder(ADDRESS).reasoner(reasoner).max_attempts(2).retry_backoff(0.02, 0.05).build()
    replies, events = agent.outbox(), agent.events()
    for text in ("one", "two", "three"):
        agent.inbox().send(text)
    with pytest.raises(TurnFailed, match="still down"):
        agent.block(timeout=10)
    texts = []
    while True:
        try:
            texts.append(replies.try_recv().text)
        except (Empty, Closed):
            break
    assert texts == ["answer one", "answer three"]
    signals = []
    while True:
        try:
            signals.append(events.try_recv())
        except (Empty, Closed):
            break
    assert [type(s).__name__ for s in signals if isinstance(s, (Retrying, Failed))] == ["Retrying", "Retrying", "Failed"]
    [entry] = agent.read("/thread/turns/set_aside")
    assert entry["item"]["content"][0]["text"] == "two" and entry["attempts"] == 2


def test_start_after_block_restarts_the_loop():
    agent = Svit.builder(ADDRESS).reasoner(ScriptedReasoner(["first", "second"])).build()
    agent.inbox().send("one")
    agent.block(timeout=10)
    agent.start()
    replies = agent.outbox()
    agent.inbox().send("two")
    agent.block(timeout=10)
    assert replies.recv(timeout=1).text == "second"
    assert agent.read("/inbox") == []


def test_a_send_during_a_backoff_wait_does_not_skip_the_wait():
    gate = threading.Event()

    def failing_then_gate(conversation: Any) -> str:
        gate.set()
        raise ReasonerFailed("down")

    reasoner = ScriptedReasoner([failing_then_gate, "one", "two"])
    agent = Svit.builder(ADDRESS).reasoner(reasoner).retry_backoff(0.2, 0.2).build()
    replies = agent.outbox()
    agent.start()
    agent.inbox().send("first")
    assert gate.wait(5)
    agent.inbox().send("second")  # wakes the waiting thread, which goes back to waiting
    agent.block(timeout=10)
    assert [replies.recv(timeout=1).text, replies.recv(timeout=1).text] == ["one", "two"]


# ---------------------------------------------------------------------- set-aside operations


def test_report_retry_and_drop_are_logged_commits(store):
    handle, sent = durable(store, "a", "b", "c")
    opts = options(attempts=1)
    for _ in range(2):
        assert run_next_turn(handle, ScriptedReasoner([fail()]), opts, now=NOW).kind == "set_aside"
    report = inbox_report(handle)
    assert [p["id"] for p in report["pending"]] == [sent[2].id] and report["pending_count"] == 1
    assert [e["id"] for e in report["set_aside"]] == [sent[0].id, sent[1].id]
    assert report["set_aside"][0]["error"]["code"] == "reasoner_failed"

    change = retry_set_aside(handle, sent[0].id)
    assert handle.read("/inbox") == [sent[2].to_json(), sent[0].to_json()]
    assert change.version == handle.version
    drop_set_aside(handle, sent[1].id)
    assert handle.read("/thread/turns") is None
    assert sources(handle)[-2:] == ["inbox.retry", "inbox.drop"]
    with pytest.raises(SetAsideNotFound, match=sent[1].id):
        drop_set_aside(handle, sent[1].id)
    with pytest.raises(SetAsideNotFound):
        retry_set_aside(handle, "no-such-id")
    # The retried item runs again, its attempts starting from zero.
    reasoner = ScriptedReasoner(["c done", "a done"])
    assert [run_next_turn(handle, reasoner, opts, now=NOW).reply.text for _ in range(2)] == ["c done", "a done"]


def test_the_pending_head_shows_its_attempts_and_last_error():
    process = Process.builder(ADDRESS).build()
    process.enqueue_inbox(Message.user("x").to_json())
    run_next_turn(process, ScriptedReasoner([fail()]), options(attempts=3), now=NOW)
    [head] = inbox_report(process)["pending"]
    assert head["attempts"] == 1 and head["retry_at"] == NOW + 2.0
    assert head["last_error"]["message"] == "reasoner request failed: provider unavailable"


def test_a_full_set_aside_list_keeps_the_item_at_the_head(monkeypatch):
    from svit.loop import attempts

    monkeypatch.setattr(attempts, "MAX_SET_ASIDE", 1)
    process = Process.builder(ADDRESS).build()
    sent = [Message.user(text) for text in ("a", "b")]
    for message in sent:
        process.enqueue_inbox(message.to_json())
    opts = options(attempts=1, backoff=(1.0, 50.0))
    assert run_next_turn(process, ScriptedReasoner([fail()]), opts, now=NOW).kind == "set_aside"
    outcome = run_next_turn(process, ScriptedReasoner([fail()]), opts, now=NOW)
    assert (outcome.kind, outcome.item_id, outcome.retry_at) == ("retry", sent[1].id, NOW + 50.0)
    assert outcome.error["set_aside_refused"] == "the set-aside list already holds 1 items"
    assert process.read("/inbox") == [sent[1].to_json()]  # never dropped
    assert len(process.read("/thread/turns/set_aside")) == 1
