"""Logging records (``svit.loop``, ``svit.host``, ``svit.store``) and OpenTelemetry spans
(the ``otel`` extra) for turns, model calls, tool calls, deliveries and the store: what
an operator sees, and no secret in any of it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from svit import Message, Process, telemetry
from svit.errors import PersistenceUnavailable
from svit.host import Host
from svit.loop import LoopOptions, ReasonerFailed, run_next_turn
from svit.reasoners import ScriptedReasoner
from svit.store import ProcessStore
from svit.store.faults import FailingWrites

SECRET = "sk-test-SECRET0123456789abcdefSECRET"
AGENT = "svit://local/observed/agent"


def _agent_with(*texts: str) -> Process:
    process = Process.builder(AGENT).build()
    for text in texts:
        process.enqueue_inbox(Message.user(text).to_json())
    return process


def _texts(records: list[logging.LogRecord]) -> list[str]:
    return [record.getMessage() for record in records]


def test_turns_finished_and_set_aside_are_logged_without_secrets(caplog: pytest.LogCaptureFixture) -> None:
    def leaky(conversation: Any) -> str:
        raise ReasonerFailed(f"model provider returned HTTP 401: invalid key {SECRET}", status=401, retryable=False)

    process = _agent_with("hello", f"my key is {SECRET}")
    with caplog.at_level(logging.DEBUG, logger="svit.loop"):
        assert run_next_turn(process, ScriptedReasoner(["hi"]), LoopOptions()).kind == "done"
        assert run_next_turn(process, ScriptedReasoner([leaky]), LoopOptions()).kind == "set_aside"
    loop = [r for r in caplog.records if r.name == "svit.loop"]
    texts = _texts(loop)
    assert any(t.startswith(f"turn started: {AGENT} item ") for t in texts)
    assert any(t.startswith(f"turn finished: {AGENT} item ") and r.levelno == logging.INFO for t, r in zip(texts, loop))
    failed = [r for r in loop if r.getMessage().startswith("turn failed, item set aside")]
    assert len(failed) == 1 and failed[0].levelno == logging.WARNING
    assert "reasoner_failed" in failed[0].getMessage() and "[redacted]" in failed[0].getMessage()
    assert not any(SECRET in text for text in _texts(caplog.records))


def test_a_retry_is_logged_with_its_time(caplog: pytest.LogCaptureFixture) -> None:
    def flaky(conversation: Any) -> str:
        raise ReasonerFailed("model provider returned HTTP 429: slow down", status=429)

    process = _agent_with("hello")
    with caplog.at_level(logging.INFO, logger="svit.loop"):
        outcome = run_next_turn(process, ScriptedReasoner([flaky]), LoopOptions().retry_backoff(30, 60),
                                now=2_000_000_000.0)
    assert outcome.kind == "retry"
    assert any(t.startswith("turn failed, retry at 20") and "reasoner_failed" in t for t in _texts(caplog.records))


def test_store_open_close_and_terminal_failures_are_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "store"
    with caplog.at_level(logging.INFO, logger="svit.store"):
        store = ProcessStore.open(path)
        handle = store.create(Process.builder(AGENT).build())
        reader = ProcessStore.open(path, read_only=True)
        reader.close()
        with FailingWrites(store), pytest.raises(PersistenceUnavailable):
            handle.write("/memory/x", 1)
        store.close()
    texts = _texts([r for r in caplog.records if r.name == "svit.store"])
    assert "store opened (rocksdb)" in texts and "store opened (rocksdb, read-only)" in texts
    assert "store closed (read-only)" in texts and "store closed" in texts
    terminal = [r for r in caplog.records if "the store refuses every operation until it is reopened" in r.getMessage()]
    assert len(terminal) == 1 and terminal[0].levelno == logging.ERROR
    assert not any(str(tmp_path) in text for text in _texts(caplog.records))


def test_deliveries_are_logged_by_the_host(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    prefix = "svit://local/observed/"
    with ProcessStore.open(tmp_path / "store") as store:
        store.create(Process.builder(prefix + "target").build())
        sender = store.create(Process.builder(prefix + "sender").library(
            "go", f'(define (main n) (do (send! "{prefix}target" n) (send! "{prefix}nobody" n) n))').build())
        sender.exec("/lib/go", 1)
        host = Host(store, poll_interval=0.02)
        with caplog.at_level(logging.DEBUG, logger="svit.host"):
            host.start()
            try:
                host.idle(timeout=30)
            finally:
                host.stop()
    texts = _texts([r for r in caplog.records if r.name == "svit.host"])
    assert f"delivered 1 message(s) to {prefix}target" in texts
    assert any(t.startswith("message ") and f"to {prefix}nobody is undeliverable: no such address" in t for t in texts)


# ---------------------------------------------------------------------------- OpenTelemetry

@pytest.fixture(scope="module")
def spans() -> Any:
    """An in-memory exporter on the global tracer provider (set once per process)."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def test_turns_model_calls_and_tool_calls_are_spans(spans: Any) -> None:
    assert telemetry.available()
    spans.clear()
    process = _agent_with("remember blue")
    reasoner = ScriptedReasoner([ScriptedReasoner.tool("write", path="/memory/colour", value="blue"), "done"])
    assert run_next_turn(process, reasoner, LoopOptions()).kind == "done"
    finished = {span.name: span for span in spans.get_finished_spans()}
    assert set(finished) == {"svit.turn", "svit.model_call", "svit.tool_call"}
    turn = finished["svit.turn"]
    assert turn.attributes["svit.address"] == AGENT and turn.attributes["svit.turn.outcome"] == "done"
    assert finished["svit.tool_call"].attributes["svit.tool"] == "write"
    assert finished["svit.tool_call"].attributes["svit.tool.ok"] is True
    assert finished["svit.model_call"].parent.span_id == turn.context.span_id
    assert finished["svit.tool_call"].parent.span_id == turn.context.span_id
    assert len([s for s in spans.get_finished_spans() if s.name == "svit.model_call"]) == 2


def test_a_failed_model_call_span_carries_the_code_and_no_secret(spans: Any) -> None:
    def leaky(conversation: Any) -> str:
        raise ReasonerFailed(f"model provider returned HTTP 401: invalid key {SECRET}", status=401, retryable=False)

    spans.clear()
    process = _agent_with("hello")
    assert run_next_turn(process, ScriptedReasoner([leaky]), LoopOptions()).kind == "set_aside"
    finished = {span.name: span for span in spans.get_finished_spans()}
    call = finished["svit.model_call"]
    assert call.status.status_code.name == "ERROR" and call.attributes["svit.error.code"] == "reasoner_failed"
    assert finished["svit.turn"].attributes["svit.turn.outcome"] == "set_aside"
    assert finished["svit.turn"].attributes["svit.error.code"] == "reasoner_failed"
    for span in spans.get_finished_spans():
        assert SECRET not in repr(dict(span.attributes or {})) and not span.events
