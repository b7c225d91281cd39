"""ScriptedReasoner and OpenAIReasoner (the latter only against the local fake server)."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from svit import Message, Ports, Svit
from svit.loop import TOOL_SPECS, ReasonerFailed, ReasonerUnavailable, Reply, ToolCall
from svit.loop.attempts import failure_record
from svit.ports.llm import LlmPort
from svit.reasoners import OpenAIReasoner, Reasoner, ScriptedReasoner

from . import fake_openai
from .fake_openai import FakeOpenAI

ADDRESS = "svit://local/tests/openai"
KEY = "sk-test-secret-key"


def reasoner(server: FakeOpenAI, **options) -> OpenAIReasoner:
    options.setdefault("max_retries", 0)
    return OpenAIReasoner(model="fake-model", base_url=server.base_url, api_key=KEY, **options)


# ---------------------------------------------------------------------- scripted


def test_scripted_steps_in_every_form():
    steps = [
        "plain final",
        {"final": "dict final"},
        {"tool": "read", "arguments": {"path": "/"}},
        ToolCall("mine", "stat", {"path": "/memory"}),
        [ScriptedReasoner.tool("discover", path="/"), ScriptedReasoner.tool("read", path="/memory")],
        Reply(text="reply object"),
        lambda conversation: f"saw {len(conversation)} messages",
    ]
    r = ScriptedReasoner(steps)
    assert isinstance(r, Reasoner)
    ask = lambda: r.complete("sys", [Message.user("hi")], TOOL_SPECS)
    assert ask() == Reply(text="plain final")
    assert ask().text == "dict final"
    read = ask()
    assert read.tool_calls == (ToolCall("call-1", "read", {"path": "/"}),) and not read.is_final
    assert ask().tool_calls[0].id == "mine"
    assert [c.name for c in ask().tool_calls] == ["discover", "read"]
    assert ask().text == "reply object"
    assert ask().text == "saw 1 messages"
    assert r.remaining == 0
    with pytest.raises(ReasonerFailed, match="no more steps"):
        ask()
    assert len(r.requests) == 8 and r.requests[0][2] == [t.name for t in TOOL_SPECS]


def test_scripted_repeat_last():
    r = ScriptedReasoner(["a", "b"], repeat_last=True)
    assert [r.complete("", [], []).text for _ in range(4)] == ["a", "b", "b", "b"]


# ---------------------------------------------------------------------- configuration


def test_configuration_errors_are_clear():
    with pytest.raises(ReasonerUnavailable, match="OPENAI_MODEL") as info:
        OpenAIReasoner(api_key=KEY)
    assert info.value.code == "reasoner_unavailable"
    with pytest.raises(ReasonerUnavailable, match="OPENAI_API_KEY"):
        OpenAIReasoner(model="m")


def test_missing_openai_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(ReasonerUnavailable, match=r"pip install 'svit\[openai\]'"):
        OpenAIReasoner(model="m", api_key=KEY)


def test_environment_configuration(server, monkeypatch):
    monkeypatch.setenv("OPENAI_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    server.queue(fake_openai.text("from env"))
    r = OpenAIReasoner(max_retries=0)
    assert r.complete("sys", [Message.user("hi")], []).text == "from env"
    assert server.requests[0]["model"] == "env-model"
    assert server.authorizations[0] == "Bearer env-key"
    assert "tools" not in server.requests[0]


# ---------------------------------------------------------------------- wire format


def test_final_text_and_request_shape(server):
    server.queue(fake_openai.text("Hello there."))
    reply = reasoner(server).complete("system text", [Message.user("hi")], TOOL_SPECS)
    assert reply == Reply(
        text="Hello there.", finish_reason="stop", usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    )
    request = server.requests[0]
    assert request["model"] == "fake-model"
    assert request["messages"] == [{"role": "system", "content": "system text"}, {"role": "user", "content": "hi"}]
    assert [t["function"]["name"] for t in request["tools"]] == ["discover", "read", "stat", "write", "remove", "exec"]
    assert all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object" for t in request["tools"])
    assert server.authorizations[0] == f"Bearer {KEY}"


def test_tool_calls_are_parsed(server):
    server.queue(
        fake_openai.tool_calls(("write", {"path": "/memory/a", "value": [1, 2]}), ("read", {"path": "/memory/a"}))
    )
    reply = reasoner(server).complete("s", [Message.user("go")], TOOL_SPECS)
    assert reply.tool_calls == (
        ToolCall("call_0", "write", {"path": "/memory/a", "value": [1, 2]}),
        ToolCall("call_1", "read", {"path": "/memory/a"}),
    )
    assert reply.text is None


def test_malformed_arguments_stay_raw(server):
    server.queue(fake_openai.tool_calls(("read", "{oops"), raw_arguments=True))
    reply = reasoner(server).complete("s", [Message.user("go")], TOOL_SPECS)
    assert reply.tool_calls[0].arguments == "{oops"


# ---------------------------------------------------------------------- failures


def test_error_status_maps_to_reasoner_failed(server):
    server.queue(fake_openai.error(400, "model does not exist"))
    with pytest.raises(ReasonerFailed) as info:
        reasoner(server).complete("s", [Message.user("hi")], [])
    assert info.value.code == "reasoner_failed"
    assert "HTTP 400" in str(info.value) and "model does not exist" in str(info.value)
    assert KEY not in str(info.value)


@pytest.mark.parametrize(
    "status, retryable",
    [(400, False), (401, False), (403, False), (404, False), (422, False), (408, True), (429, True), (500, True),
     (503, True)],
)
def test_error_status_keeps_its_structure(server, status, retryable):
    import openai

    server.queue(fake_openai.error(status, "provider text"))
    with pytest.raises(ReasonerFailed) as info:
        reasoner(server).complete("s", [Message.user("hi")], [])
    failure = info.value
    assert (failure.status, failure.retryable) == (status, retryable)
    assert failure.error_type == "invalid_request_error" and failure.provider_message == "provider text"
    assert isinstance(failure.__cause__, openai.APIStatusError)  # the client's exception, chained
    record = failure_record(failure)
    assert record["status"] == status and record["retryable"] is retryable
    assert record["cause"]["type"] == type(failure.__cause__).__name__


def test_timeouts_and_lost_connections_are_retryable(server):
    server.queue(fake_openai.slow(10, fake_openai.text("too late")))
    with pytest.raises(ReasonerFailed) as info:
        reasoner(server, timeout=0.3).complete("s", [Message.user("hi")], [])
    assert (info.value.retryable, info.value.error_type, info.value.status) == (True, "timeout", None)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    r = OpenAIReasoner(model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0, timeout=2)
    with pytest.raises(ReasonerFailed) as info:
        r.complete("s", [Message.user("hi")], [])
    assert (info.value.retryable, info.value.error_type) == (True, "connection")


def test_a_reply_cut_off_for_length_fails_the_turn_with_its_usage(server):
    cut = {"kind": "message", "message": {"role": "assistant", "content": "Once upon"}, "finish_reason": "length"}
    server.queue(cut)
    agent = Svit.builder(ADDRESS).reasoner(reasoner(server)).max_attempts(1).build()
    replies = agent.outbox()
    agent.inbox().send("Tell me a long story.")
    with pytest.raises(Exception, match="cut off at its length limit"):
        agent.block(timeout=10)
    with pytest.raises(Exception):
        replies.try_recv()  # no answer was published
    [entry] = agent.read("/thread/turns/set_aside")
    assert entry["error"]["code"] == "reply_truncated" and entry["error"]["finish_reason"] == "length"
    assert entry["error"]["usage"] == {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    assert [e.type for e in agent.recent_events(10)] == ["input.message", "turn.failed"]


def test_server_error_without_retries(server):
    server.queue(fake_openai.error(500, "overloaded"), fake_openai.text("never reached"))
    with pytest.raises(ReasonerFailed, match="HTTP 500"):
        reasoner(server).complete("s", [Message.user("hi")], [])
    assert len(server.requests) == 1


def test_timeout(server):
    server.queue(fake_openai.slow(10, fake_openai.text("too late")))
    started = time.monotonic()
    with pytest.raises(ReasonerFailed, match="timed out"):
        reasoner(server, timeout=0.3).complete("s", [Message.user("hi")], [])
    assert time.monotonic() - started < 5


def test_connection_refused():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    r = OpenAIReasoner(model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0, timeout=2)
    with pytest.raises(ReasonerFailed, match="could not connect"):
        r.complete("s", [Message.user("hi")], [])


# ---------------------------------------------------------------------- through the loop and the llm port


def test_svit_loop_with_openai_reasoner_writes_memory(server):
    server.queue(
        fake_openai.tool_calls(("write", {"path": "/memory/color", "value": "blue"})),
        fake_openai.tool_calls(("read", "not json"), raw_arguments=True),
        fake_openai.text("I will remember blue."),
    )
    agent = Svit.builder(ADDRESS).memory("facts", {}).reasoner(reasoner(server)).build()
    replies = agent.outbox()
    agent.inbox().send(Message.user("Remember blue."))
    agent.block()
    assert replies.recv(timeout=1).text == "I will remember blue."
    assert agent.read("/memory/color") == "blue"
    assert agent.read("/inbox") == []
    # The last request carries the whole conversation in chat completions form.
    messages = server.requests[-1]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert messages[0]["content"] == agent.system_prompt
    assert messages[2]["tool_calls"][0]["function"] == {"name": "write", "arguments": json.dumps({"path": "/memory/color", "value": "blue"})}
    assert messages[3]["tool_call_id"] == "call_0"
    assert json.loads(messages[3]["content"])["changed"] == ["/memory/color"]
    assert messages[5]["content"].startswith("error: invalid_tool_arguments: ")


def test_failed_request_fails_the_turn_and_sets_the_item_aside(server):
    server.queue(fake_openai.error(401, "bad key"))
    agent = Svit.builder(ADDRESS).reasoner(reasoner(server)).build()
    sent = Message.user("hi")
    agent.inbox().send(sent)
    with pytest.raises(Exception, match="HTTP 401") as info:
        agent.block()
    assert KEY not in str(info.value)
    # 401 cannot succeed on a retry: set aside at once (one request), kept with its error.
    assert agent.read("/inbox") == [] and len(server.requests) == 1
    [entry] = agent.read("/thread/turns/set_aside")
    assert entry["item"] == sent.to_json() and entry["attempts"] == 1
    assert entry["error"]["status"] == 401 and entry["error"]["retryable"] is False


def test_llm_port_through_openai(server):
    server.queue(fake_openai.text("Paris"), fake_openai.error(503, "down"))
    port = LlmPort(reasoner(server))
    agent = Svit.builder(ADDRESS).ports(Ports().port("llm", port)).reasoner(ScriptedReasoner([])).build()
    script = '(define (main input) (port-call "llm" input))'
    assert agent.exec_inline(script, {"prompt": "Capital of France?"}).output == "Paris"
    nested = server.requests[0]
    assert nested["messages"][-1] == {"role": "user", "content": "Capital of France?"}
    assert "tools" not in nested
    with pytest.raises(Exception, match="port /ports/llm failed: llm request failed"):
        agent.exec_inline(script, {"prompt": "again"})


# ---------------------------------------------------------------------- examples

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    clean["PYTHONPATH"] = str(EXAMPLES.parent) + os.pathsep + clean.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)], env={**clean, **env}, capture_output=True, text=True, timeout=120
    )


def test_example_agent_scripted():
    result = run_example("agent_scripted.py", {})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == 'reply: Remembered blue; the sky is blue. memory: {"color": "blue", "mentions": 1} inbox: 0'


def test_example_agent_openai_skips_without_configuration():
    result = run_example("agent_openai.py", {})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("agent_openai: skipped")


def test_example_agent_openai_against_the_fake_server(server):
    server.queue(
        fake_openai.tool_calls(("write", {"path": "/memory/facts", "value": {"color": "blue"}})),
        fake_openai.text("Noted: blue."),
    )
    result = run_example("agent_openai.py", {"OPENAI_BASE_URL": server.base_url, "OPENAI_MODEL": "fake-model"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == 'reply: Noted: blue. memory: {"facts": {"color": "blue"}}'


# ---------------------------------------------------------------------- credentials never leak


def _no_key(text: str) -> None:
    assert KEY not in text and KEY[3:] not in text, text


def test_provider_error_that_echoes_the_key_is_redacted(server, caplog):
    caplog.set_level(logging.DEBUG)
    server.queue(fake_openai.error(400, "bad request", echo_authorization=True))
    with pytest.raises(ReasonerFailed) as info:
        reasoner(server).complete("s", [Message.user("hi")], [])
    assert server.authorizations == [f"Bearer {KEY}"]  # the server really echoed it
    text = str(info.value)
    assert "HTTP 400" in text and "bad request" in text and "[redacted]" in text
    _no_key(text)
    _no_key(repr(info.value.args))
    _no_key(json.dumps(failure_record(info.value)))  # the chained cause's text included
    assert KEY in str(info.value.__cause__)  # ... which did carry it
    _no_key(caplog.text)


def test_async_provider_error_that_echoes_the_key_is_redacted(server, caplog):
    import asyncio

    from svit.reasoners import AsyncOpenAIReasoner

    caplog.set_level(logging.DEBUG)
    server.queue(fake_openai.error(400, "bad request", echo_authorization=True))

    async def main() -> str:
        r = AsyncOpenAIReasoner(model="fake-model", base_url=server.base_url, api_key=KEY, max_retries=0)
        try:
            await r.complete("s", [Message.user("hi")], [])
        except ReasonerFailed as exc:
            return str(exc)
        finally:
            await r.aclose()
        return ""

    text = asyncio.run(main())
    assert "HTTP 400" in text and "[redacted]" in text
    _no_key(text)
    _no_key(caplog.text)


def test_durable_turn_failure_stores_no_key(server, tmp_path, caplog):
    from svit.store import ProcessStore

    caplog.set_level(logging.DEBUG)
    path = tmp_path / "store"
    store = ProcessStore.open(str(path))
    server.queue(fake_openai.error(400, "bad request", echo_authorization=True))
    agent = Svit.builder(ADDRESS).reasoner(reasoner(server)).store(store).build()
    agent.inbox().send(Message.user("hi"))
    with pytest.raises(Exception, match="HTTP 400") as info:
        agent.block(timeout=10)
    _no_key(str(info.value))
    events = agent.event_log.all_events(ADDRESS, agent.session_id)
    failed = [e for e in events if e.type == "turn.failed"]
    assert len(failed) == 1 and "[redacted]" in failed[0].data["error"]
    _no_key(json.dumps([e.to_json() for e in events]))
    _no_key(caplog.text)
    store.close()
    for file in path.rglob("*"):
        if file.is_file():
            data = file.read_bytes()
            assert KEY.encode() not in data and KEY[3:].encode() not in data, file.name


def test_tool_results_never_show_a_credential(server):
    """A port whose failure text carries a credential: the model sees it redacted."""
    from svit.ports import PortError

    def leaky(_context, _input):
        raise PortError(f"upstream said: Authorization: Bearer {KEY}")

    script = '(define (main input) (port-call "leaky" input))'
    steps = [ScriptedReasoner.tool("exec", source=script, input={}), "done"]
    scripted = ScriptedReasoner(steps)
    agent = Svit.builder(ADDRESS).ports(Ports().port("leaky", leaky)).reasoner(scripted).build()
    agent.inbox().send(Message.user("go"))
    agent.block(timeout=10)
    results = [m.text for m in agent.messages() if m.role == "tool"]
    assert len(results) == 1 and results[0].startswith("error: ") and "[redacted]" in results[0]
    _no_key(results[0])
    _no_key(json.dumps([e.to_json() for e in agent.recent_events(100)]))
