"""Agents on a host: one reason/act turn per inbox item through the loop's run_next_turn,
retries honoured by a timer (no worker sleeps), set-aside items reported."""

from __future__ import annotations

import threading
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


def exits(conversation: Any) -> str:
    raise SystemExit("the provider library called exit")


def test_a_reasoner_raising_past_the_loop_leaves_every_worker_serving(store: ProcessStore) -> None:
    """A reasoner that raises what no turn catches (SystemExit) fails that slot only: the
    one worker goes on serving the others, the failure is reported for the address, and
    its item is tried again after a backoff."""
    for name in ("exits", "calm"):
        store.create(Process.builder(PREFIX + name).build()).close()
    answered = threading.Event()

    def on_turn(address: str, outcome: str) -> None:
        if address == PREFIX + "exits" and outcome == "done":
            answered.set()

    host = Host(store, workers=1, poll_interval=0.02, retry_backoff=(0.01, 0.01), on_turn=on_turn)
    host.agents(PREFIX, reasoner=lambda address: ScriptedReasoner([exits, "fine"] if address.endswith("exits") else ["ok"]))
    host.start()
    try:
        host.send(PREFIX + "exits", Message.user("first"))
        host.send(PREFIX + "calm", Message.user("hello"))
        host.idle(timeout=30)
        assert answered.wait(30)
        assert all(thread.is_alive() for thread in host._threads)
    finally:
        host.stop()
    assert store.resume(PREFIX + "calm").read("/inbox") == []
    assert store.resume(PREFIX + "exits").read("/inbox") == []
    failure = host.failures()[PREFIX + "exits"]
    assert failure.count == 1 and "SystemExit" in failure.last_error["message"]


def test_a_reasoner_factory_that_fails_is_reported_for_its_address(store: ProcessStore) -> None:
    store.create(Process.builder(PREFIX + "nofactory").build()).close()

    def factory(address: str) -> ScriptedReasoner:
        raise RuntimeError("no credentials configured")

    host = Host(store, workers=1, poll_interval=0.02, retry_backoff=(0.01, 0.01))
    host.agents(PREFIX, reasoner=factory)
    host.start()
    try:
        handle = store.resume(PREFIX + "nofactory")
        handle.enqueue_inbox(Message.user("hello").to_json())
        handle.close()
        host.idle(timeout=30)
    finally:
        host.stop()
    failure = host.failures()[PREFIX + "nofactory"]
    assert failure.count >= 1 and "no credentials configured" in failure.last_error["message"]
    assert len(store.resume(PREFIX + "nofactory").read("/inbox")) == 1


def test_on_turn_may_send_to_the_address_it_reports(store: ProcessStore) -> None:
    """``on_turn`` runs after the slot let go of the address: a follow-up it sends there is
    handled in turn, and the worker that reported it does not wait on itself."""
    store.create(Process.builder(PREFIX + "chain").build()).close()
    outcomes: list[str] = []
    host = Host(store, workers=1, poll_interval=0.02)

    def on_turn(address: str, outcome: str) -> None:
        outcomes.append(outcome)
        if len(outcomes) == 1:
            host.send(address, Message.user("follow-up"))

    host.on_turn = on_turn
    host.agents(PREFIX, reasoner=lambda address: ScriptedReasoner(["ok"], repeat_last=True))
    host.start()
    try:
        host.send(PREFIX + "chain", Message.user("first"))
        host.idle(timeout=30)
    finally:
        host.stop()
    assert outcomes == ["done", "done"]
    assert store.resume(PREFIX + "chain").read("/inbox") == []
