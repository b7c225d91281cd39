"""Agents on a host: one reason/act turn per inbox item through the loop's run_next_turn,
retries honoured by a timer (no worker sleeps), set-aside items reported."""

from __future__ import annotations

from typing import Any

from svit import Message, Process
from svit.host import Host
from svit.loop.builders import LoopOptions
from svit.loop.errors import ReasonerFailed
from svit.reasoners import ScriptedReasoner
from svit.store import ProcessStore

PREFIX = "svit://local/agenttest/"


def failing(conversation: Any) -> str:
    raise ReasonerFailed("provider unavailable")


def test_agents_answer_every_item_sent_or_delivered(store: ProcessStore) -> None:
    for name in ("a", "b"):
        store.create(Process.builder(PREFIX + name).build()).close()
    store.create(Process.builder("svit://local/other/sender").library(
        "go", f'(define (main n) (do (send! "{PREFIX}a" "from a script") n))').build()).exec("/lib/go", 1)
    outcomes: list[tuple[str, str]] = []
    host = Host(store, poll_interval=0.02, on_turn=lambda address, outcome: outcomes.append((address, outcome)))
    host.agents(PREFIX, reasoner=lambda address: ScriptedReasoner([f"ok from {address}"], repeat_last=True))
    host.start()
    try:
        host.send(PREFIX + "a", Message.user("hello"))
        host.send(PREFIX + "b", Message.user("hello"))
        host.idle(timeout=30)
    finally:
        host.stop()
    assert sorted(outcomes) == sorted([(PREFIX + "a", "done"), (PREFIX + "a", "done"), (PREFIX + "b", "done")])
    for name in ("a", "b"):
        assert store.resume(PREFIX + name).read("/inbox") == []
    assert host.stats().turns == 3


def test_a_failing_item_is_retried_then_set_aside_and_the_next_one_runs(store: ProcessStore) -> None:
    store.create(Process.builder(PREFIX + "flaky").build()).close()
    outcomes: list[str] = []
    options = LoopOptions().max_attempts(2).retry_backoff(0.05, 0.1)
    host = Host(store, workers=1, poll_interval=0.02, on_turn=lambda address, outcome: outcomes.append(outcome))
    host.agents(PREFIX, reasoner=lambda address: ScriptedReasoner([failing, failing, "fine"]), options=options)
    host.start()
    try:
        host.send(PREFIX + "flaky", Message.user("first"))
        host.send(PREFIX + "flaky", Message.user("second"))
        host.idle(timeout=30)
    finally:
        host.stop()
    assert outcomes == ["retry", "set_aside", "done"]
    failure = host.failures()[PREFIX + "flaky"]
    assert failure.count == 1 and failure.last_error["code"] == "reasoner_failed"
    state = store.resume(PREFIX + "flaky")
    assert state.read("/inbox") == []
    assert [entry["item"]["content"][0]["text"] for entry in state.read("/thread/turns/set_aside")] == ["first"]
