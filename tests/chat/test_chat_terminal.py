"""``svit chat`` at a terminal (a pseudo-terminal, line editor and all) against a fake model."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from svit.store import ProcessStore

from . import fake_model
from .fake_model import FakeModel
from .pty_driver import Terminal, chat_env

ADDRESS = "svit://local/chat/terminal"
KEY = "sk-chat-terminal-secret-0123456789"
REMEMBER = '(define (main input) (do (write "/memory/color" "blue") (+ 1 2)))'


@pytest.fixture
def model():
    with FakeModel() as server:
        yield server


def store_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file())


def test_a_conversation_streams_runs_tools_survives_failures_and_answers_commands(model, tmp_path):
    release = threading.Event()
    model.queue(
        fake_model.stall("Hello! I am", " your agent.", release),
        fake_model.calls(("exec", {"source": REMEMBER, "input": None}), content="Saving it."),
        fake_model.calls(("exec", {"source": "(define (main input) (panic \"no way\"))"})),
        fake_model.text("I will remember blue."),
        fake_model.error(500, "the model is overloaded"),
        fake_model.slow(5, fake_model.text("too late")),
    )
    env = chat_env(tmp_path, model.base_url, KEY)
    with Terminal(["chat", ADDRESS, "--timeout", "0.5", "--retries", "0", "--instructions", "Be brief."], env) as term:
        term.expect("a new agent with empty memory")
        term.line("hi")
        # The first piece is on the screen while the model still holds the rest back.
        term.expect("Hello! I am")
        release.set()
        term.expect(" your agent.")

        term.line("Remember that my favourite colour is blue.")
        shown = term.expect("I will remember blue.")
        assert "Saving it." in shown
        assert '→ exec {"source": "(define (main input) (do (write \\"/memory/color\\"' in shown
        assert '← {"changed":["/memory/color"],"messages":[],"output":3' in shown
        assert "← error: script_failed:" in shown and "no way" in shown

        term.line("are you there?")
        term.expect("model request failed: HTTP 500: the model is overloaded; message set aside as ")
        term.line("still there?")
        term.expect("model request failed: timed out after 0.5s; message set aside as ")

        term.line("/inbox")
        listing = term.expect("set aside (2):") + term.expect("timed out after 0.5s")
        assert "pending (0):" in listing and "are you there?" in listing and "HTTP 500" in listing
        term.line("/tree /memory")
        assert '└── color' in term.expect('= "blue"')
        term.line("/log 3")
        commits = term.expect("loop.set_aside")
        assert "last commits of " + ADDRESS in commits
        term.line("/help")
        term.expect("/retry [ID]")
        term.line("/frobnicate")
        term.expect("unknown command /frobnicate; /help lists the commands")

        model.queue(fake_model.text("Yes, here now."))
        term.line("/retry")
        term.expect("Yes, here now.")

        # Ctrl-C at the terminal (SIGINT to the program) cancels the reply, not the chat.
        stalled = threading.Event()
        model.queue(fake_model.stall("Let me think about that for a long", " time.", stalled), fake_model.text("Short answer."))
        try:
            term.line("tell me a long story")
            term.expect("Let me think about that for a long")
            term.type("\x03")
            term.expect("reply cancelled; message set aside as ")
            term.line("a short one then")
            term.expect("Short answer.")
        finally:
            stalled.set()
        term.line("/quit")
        term.expect("bye")
        assert term.wait() == 0
        screen = term.output

    assert KEY not in screen
    # The committed memory, the instructions and the conversation are in the store.
    with ProcessStore.open(tmp_path / "store") as store:
        handle = store.resume(ADDRESS)
        assert handle.read("/memory/color") == "blue"
        assert handle.read("/thread/instructions") == "Be brief."
        assert handle.read("/inbox") == []
        set_aside = [entry["item"]["content"][0]["text"] for entry in handle.read("/thread/turns/set_aside")]
        assert set_aside == ["are you there?", "tell me a long story"]  # /retry sent "still there?" again
    assert KEY.encode() not in store_bytes(tmp_path / "store")
    # Every request streamed; after the tool call the model saw the tool's result.
    assert all(request["stream"] is True for request in model.requests)
    tool_round = model.requests[2]["messages"]
    assert tool_round[-1]["role"] == "tool" and json.loads(tool_round[-1]["content"])["changed"] == ["/memory/color"]
    assert all(request["messages"][0]["content"].endswith("<instructions>\nBe brief.\n</instructions>") for request in model.requests)
    # The model is never shown a failed or cancelled turn.
    users = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "user"]
    assert users == ["hi", "Remember that my favourite colour is blue.", "still there?", "a short one then"]


def test_the_next_run_resumes_the_conversation(model, tmp_path):
    env = chat_env(tmp_path, model.base_url, KEY)
    model.queue(fake_model.text("Nice to meet you, Ada."))
    with Terminal(["chat", ADDRESS], env) as term:
        term.line("My name is Ada.")
        term.expect("Nice to meet you, Ada.")
        term.at_prompt()
        term.type("\x04")
        assert term.wait() == 0

    model.queue(fake_model.text("Your name is Ada."))
    with Terminal(["chat", ADDRESS, "--instructions", "Ignored now."], env) as term:
        opening = term.expect("-- earlier --") + term.expect("\n--\n")
        assert "resumed at version" in opening
        assert "instructions kept from when the agent was created (none)" in opening
        assert "you> My name is Ada.\nNice to meet you, Ada.\n" in opening
        term.line("What is my name?")
        term.expect("Your name is Ada.")
        term.line("/quit")
        assert term.wait() == 0
    wire = [(m["role"], m["content"]) for m in model.requests[-1]["messages"] if m["role"] != "system"]
    assert wire == [("user", "My name is Ada."), ("assistant", "Nice to meet you, Ada."), ("user", "What is my name?")]
    # The line editor kept its history in the user-data directory.
    assert "What is my name?" in (tmp_path / "data" / "svit" / "chat_history").read_text()
