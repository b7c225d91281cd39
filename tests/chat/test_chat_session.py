"""``svit chat`` without a terminal: configuration, plain input, failures, the pieces it prints."""

from __future__ import annotations

import io
import socket
import sys

import pytest

from svit import Message, Svit
from svit.chat import CancellableReasoner, ChatConfig, ConfigProblem, ReplyCancelled, resolve_config, run
from svit.chat.display import Arrows, exchanges, failure_line, tool_call_line, tool_result_lines
from svit.cli import main
from svit.reasoners import ScriptedReasoner
from svit.store import ProcessStore

from . import fake_model
from .fake_model import FakeModel

ADDRESS = "svit://local/chat/session"
KEY = "sk-chat-session-secret-9876543210"
UTF8 = Arrows("utf-8")


@pytest.fixture
def model():
    with FakeModel() as server:
        yield server


def chat(store, lines: str, config: ChatConfig) -> str:
    out = io.StringIO()
    assert run(store, ADDRESS, config, stdin=io.StringIO(lines), stdout=out) == 0
    return out.getvalue()


def config_for(base_url: str, **options) -> ChatConfig:
    options.setdefault("retries", 0)
    return resolve_config({"OPENAI_API_KEY": KEY, "SVIT_CHAT_MODEL": "fake-model", "OPENAI_BASE_URL": base_url}, **options)


# ---------------------------------------------------------------------- configuration


def test_configuration_comes_from_flags_over_the_environment():
    env = {"SVIT_CHAT_MODEL": "env-model", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": KEY, "MY_KEY": "sk-other-key"}
    config = resolve_config(env)
    assert (config.model, config.base_url, config.api_key, config.timeout, config.retries) == (
        "env-model", "http://127.0.0.1:9/v1", KEY, 60.0, 2)
    config = resolve_config(env, model="flag-model", base_url="https://example.test/v1", api_key_env="MY_KEY", timeout=2.5)
    assert (config.model, config.base_url, config.api_key, config.timeout) == ("flag-model", "https://example.test/v1", "sk-other-key", 2.5)
    assert KEY not in repr(resolve_config(env)) and "sk-other-key" not in repr(config)


@pytest.mark.parametrize(
    ("env", "options", "message"),
    [
        ({"OPENAI_API_KEY": KEY}, {}, "svit chat needs a model: pass --model or set SVIT_CHAT_MODEL"),
        ({"SVIT_CHAT_MODEL": "m"}, {}, "svit chat needs an API key: set OPENAI_API_KEY (or name another variable with --api-key-env)"),
        ({"SVIT_CHAT_MODEL": "m", "OPENAI_API_KEY": KEY}, {"api_key_env": "ABSENT_KEY"}, "svit chat needs an API key: set ABSENT_KEY"),
        ({"SVIT_CHAT_MODEL": "m", "OPENAI_API_KEY": KEY}, {"api_key_env": "not a name"}, "--api-key-env takes the name"),
        ({"SVIT_CHAT_MODEL": "m", "OPENAI_API_KEY": KEY}, {"timeout": 0.0}, "--timeout takes seconds"),
        ({"SVIT_CHAT_MODEL": "m", "OPENAI_API_KEY": KEY}, {"base_url": "ftp://x"}, "must start with http://"),
    ],
)
def test_what_is_missing_is_said_in_one_line(env, options, message):
    with pytest.raises(ConfigProblem) as info:
        resolve_config(env, **options)
    assert message in str(info.value) and KEY not in str(info.value)


def test_the_command_exits_2_naming_what_to_set(monkeypatch, capsys, tmp_path):
    for name in ("SVIT_CHAT_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SVIT_STORE", str(tmp_path / "store"))
    assert main(["chat", ADDRESS]) == 2
    assert capsys.readouterr().err == "svit: usage: svit chat needs a model: pass --model or set SVIT_CHAT_MODEL\n"
    assert main(["chat", ADDRESS, "--model", "m"]) == 2
    assert capsys.readouterr().err.startswith("svit: usage: svit chat needs an API key: set OPENAI_API_KEY")
    assert not (tmp_path / "store").exists()  # nothing was opened or created
    # A key is never taken on the command line, nor repeated when someone tries.
    assert main(["chat", ADDRESS, "--api-key", KEY]) == 2
    assert capsys.readouterr().err == ("svit: usage: svit chat takes no API key on the command line: "
                                       "set OPENAI_API_KEY or name a variable with --api-key-env\n")
    assert main(["chat", ADDRESS, f"--api-key={KEY}"]) == 2 and KEY not in capsys.readouterr().err


def test_without_the_chat_extra_the_command_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "prompt_toolkit", None)
    assert main(["chat", ADDRESS]) == 1
    assert capsys.readouterr().err == 'svit: missing_dependency: svit chat needs the "chat" extra: pip install "svit[chat]"\n'


# ---------------------------------------------------------------------- plain input, real requests


def test_plain_input_with_a_model_that_cannot_be_reached(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with ProcessStore.open(tmp_path / "store") as store:
        shown = chat(store, "hello\n/inbox\n", config_for(f"http://127.0.0.1:{port}/v1", timeout=2))
    assert "you> hello\nmodel request failed: could not connect to the model provider; message set aside as msg_" in shown
    assert "set aside (1):\n  msg_" in shown and shown.endswith("bye\n")


def test_a_provider_that_echoes_the_key_never_shows_it(model, tmp_path):
    model.queue(fake_model.error(401, f"invalid key {KEY}"))
    with ProcessStore.open(tmp_path / "store") as store:
        shown = chat(store, "hello\n/inbox\n", config_for(model.base_url))
        thread = store.resume(ADDRESS).read("/thread")
    assert "model request failed: HTTP 401: invalid key" in shown
    assert KEY not in shown and KEY not in repr(thread)


def test_without_streaming_the_whole_reply_is_printed_when_it_is_complete(model, tmp_path):
    model.queue(fake_model.calls(("read", {"path": "/memory"})), fake_model.text("Memory is empty."))
    with ProcessStore.open(tmp_path / "store") as store:
        shown = chat(store, "what do you know?\n", config_for(model.base_url, stream=False))
    assert '-> read {"path": "/memory"}\n<- {"path":"/memory","value":{},"version":' in shown  # ASCII: no encoding
    assert "\nMemory is empty.\nbye\n" in shown
    assert all("stream" not in request for request in model.requests)


# ---------------------------------------------------------------------- the session over a scripted model


def test_messages_waiting_in_the_inbox_are_answered_first(tmp_path):
    with ProcessStore.open(tmp_path / "store") as store:
        agent = Svit.builder(ADDRESS).reasoner(ScriptedReasoner([])).store(store).build()
        agent.inbox().send(Message.user("left from before"))
        agent.close()
        scripted = ScriptedReasoner(["answered the old one", "answered the new one"])
        out = io.StringIO()
        from svit.chat import ChatSession

        session = ChatSession(store, ADDRESS, config_for("http://127.0.0.1:9/v1"), out, reasoner=scripted)
        session.greet()
        session.handle("and a new one")
        session.handle("/log 2")
        session.close()
    shown = out.getvalue()
    assert "resumed at version" in shown
    assert "[inbox] left from before\nanswered the old one\n" in shown
    assert "[inbox] and a new one" not in shown and "answered the new one" in shown
    assert "  v" in shown and "inbox.acknowledge" in shown


def test_ctrl_c_cancels_a_model_request_at_once_and_a_reply_before_its_next_request():
    calls = []

    class Inner:
        def complete(self, system_prompt, messages, tools):
            calls.append(len(messages))
            if len(calls) == 1:
                reasoner.interrupt()  # Ctrl-C while the request is in flight
            return ScriptedReasoner(["fine"]).complete(system_prompt, messages, tools)

    reasoner = CancellableReasoner(Inner())
    with pytest.raises(ReplyCancelled, match="during the model request"):
        reasoner.complete("s", [], [])
    reasoner.reset()
    assert reasoner.complete("s", [], []).text == "fine"
    reasoner.interrupt()  # Ctrl-C while a tool runs: nothing is raised there
    assert reasoner.cancelled
    with pytest.raises(ReplyCancelled, match="before the next model request") as info:
        reasoner.complete("s", [], [])
    assert len(calls) == 2 and info.value.retryable is False and info.value.code == "reply_cancelled"


# ---------------------------------------------------------------------- what is printed


def test_tool_lines_are_compact():
    line = tool_call_line("exec", {"input": None, "source": "(define (main input) " + "(+ 1 2) " * 40 + ")"}, UTF8)
    assert line.startswith('→ exec {"source": "(define (main input) (+ 1 2)') and line.endswith("…") and len(line) == 100
    assert tool_call_line("read", "not json", Arrows("ascii")) == "-> read not json"
    long = '{"output": "' + "x" * 500 + '"}'
    lines = tool_result_lines(long, True, UTF8)
    assert len(lines) == 3 and lines[0].startswith('← {"output": "xxx') and lines[-1].endswith("…")
    assert tool_result_lines("error: script_failed: boom", False, UTF8) == ["← error: script_failed: boom"]
    assert tool_result_lines("boom", False, UTF8) == ["← error: boom"]


def test_failure_lines_name_the_status_or_the_timeout():
    assert failure_line({"code": "reasoner_failed", "status": 503, "provider_message": "busy"}, 60) == "model request failed: HTTP 503: busy"
    assert failure_line({"code": "reasoner_failed", "status": 400}, 60) == "model request failed: HTTP 400"
    assert failure_line({"code": "reasoner_failed", "error_type": "timeout", "message": "x"}, 2.5) == "model request failed: timed out after 2.5s"
    assert failure_line({"code": "reply_cancelled"}, 1) == "reply cancelled"
    assert failure_line({"code": "turn_failed", "message": "too many steps"}, 1) == "the turn failed: too many steps"


def test_earlier_exchanges_leave_tool_traffic_out():
    conversation = [Message.user("one"), Message.agent("", ()), Message.agent("first answer"), Message.user("two"),
                    Message.agent("second answer"), Message.user("three"), Message.agent("third answer")]
    assert exchanges(conversation, 2) == [("you", "two"), ("agent", "second answer"), ("you", "three"), ("agent", "third answer")]


def test_a_refused_message_or_command_is_said_and_the_chat_goes_on(tmp_path):
    from svit.chat import ChatSession

    out = io.StringIO()
    with ProcessStore.open(tmp_path / "store") as store:
        scripted = ScriptedReasoner(["", "still here"])
        session = ChatSession(store, ADDRESS, config_for("http://127.0.0.1:9/v1"), out, reasoner=scripted)
        session.greet()
        assert session.handle("x" * 3_000_000) is True
        session.handle("hello")
        session.handle("//slash")
        session.handle("/tree relative")
        session.handle("/log zero")
        session.handle("/retry")
        session.handle("/")
        assert session.handle("/quit") is False
        inbox = session.agent.read("/inbox")
        session.close()
    shown = out.getvalue().splitlines()
    assert shown[2:] == [
        "invalid_value: invalid persistent value: maximum text bytes exceeded",
        "(the model answered with no text)",
        "still here",
        "invalid_path: invalid state path: path must be absolute: relative",
        "/log takes a count from 1 to 100",
        "no set-aside messages",
        "unknown command /; /help lists the commands",
    ]
    assert inbox == [] and scripted.requests[-1][1][-1].text == "/slash"
