"""The OpenAI reasoners' streamed replies: assembled from chunks, equal to unstreamed ones."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest

from svit import Message
from svit.loop import TOOL_SPECS, ReasonerFailed, Reply, ToolCall
from svit.reasoners import AsyncOpenAIReasoner, OpenAIReasoner, StreamAssembler

from . import fake_model
from .fake_model import FakeModel

KEY = "sk-streaming-test-key"
ASK = [Message.user("hi")]


@pytest.fixture
def model():
    with FakeModel() as server:
        yield server


def reasoner(model: FakeModel, **options) -> OpenAIReasoner:
    options.setdefault("max_retries", 0)
    return OpenAIReasoner(model="fake-model", base_url=model.base_url, api_key=KEY, **options)


def both_ways(model: FakeModel, answer: dict, **options) -> tuple[Reply, Reply, list[str]]:
    """The same scripted answer asked for unstreamed, then streamed (with the deltas seen)."""
    deltas: list[str] = []
    model.queue(answer, answer)
    plain = reasoner(model, **options).complete("sys", ASK, TOOL_SPECS)
    streamed = reasoner(model, on_text=deltas.append, **options).complete("sys", ASK, TOOL_SPECS)
    return plain, streamed, deltas


def test_streamed_text_equals_the_unstreamed_reply(model):
    plain, streamed, deltas = both_ways(model, fake_model.text("Blue is a fine colour to remember.", pieces=5))
    assert streamed == plain
    assert plain == Reply(text="Blue is a fine colour to remember.", finish_reason="stop", usage=fake_model.USAGE)
    assert len(deltas) == 5 and "".join(deltas) == plain.text
    # Only the streamed request asked for a stream and for its usage.
    assert "stream" not in model.requests[0]
    assert model.requests[1]["stream"] is True and model.requests[1]["stream_options"] == {"include_usage": True}
    assert model.requests[1]["messages"] == model.requests[0]["messages"]


def test_streamed_tool_calls_join_their_arguments_across_chunks(model):
    answer = fake_model.calls(
        ("exec", {"source": "(define (main input) (+ 1 2))", "input": None}),
        ("write", {"path": "/memory/color", "value": "blue"}),
        pieces=4,
    )
    plain, streamed, deltas = both_ways(model, answer)
    assert streamed == plain and deltas == []
    assert streamed.tool_calls == (
        ToolCall("call_0", "exec", {"source": "(define (main input) (+ 1 2))", "input": None}),
        ToolCall("call_1", "write", {"path": "/memory/color", "value": "blue"}),
    )
    assert streamed.text is None and streamed.finish_reason == "tool_calls" and streamed.usage == fake_model.USAGE


def test_text_with_tool_calls_and_arguments_that_are_not_json(model):
    answer = fake_model.calls(("read", "{not json"), content="Let me look.", pieces=2)
    plain, streamed, deltas = both_ways(model, answer)
    assert streamed == plain
    assert streamed.text == "Let me look." and "".join(deltas) == "Let me look."
    assert streamed.tool_calls == (ToolCall("call_0", "read", "{not json"),)


def test_no_usage_when_the_server_sends_none(model):
    model.send_usage = False
    plain, streamed, _ = both_ways(model, fake_model.text("short"))
    assert streamed == plain and streamed.usage is None


def test_a_streamed_reply_cut_off_for_length_keeps_its_finish_reason(model):
    plain, streamed, _ = both_ways(model, fake_model.text("Once upon", finish_reason="length"))
    assert streamed == plain and streamed.finish_reason == "length"


def test_streamed_errors_are_the_same_failures(model):
    model.queue(fake_model.error(503, "overloaded"))
    with pytest.raises(ReasonerFailed) as info:
        reasoner(model, stream=True).complete("sys", ASK, [])
    assert (info.value.status, info.value.retryable) == (503, True)
    assert "HTTP 503: overloaded" in info.value.message and KEY not in info.value.message
    model.queue(fake_model.slow(5, fake_model.text("late")))
    with pytest.raises(ReasonerFailed) as info:
        reasoner(model, stream=True, timeout=0.3).complete("sys", ASK, [])
    assert info.value.error_type == "timeout" and "timed out after 0.3s" in info.value.message


def test_a_stream_that_stops_sending_times_out_after_its_first_text(model):
    release = threading.Event()
    model.queue(fake_model.stall("Thinking", " done", release))
    deltas: list[str] = []
    try:
        with pytest.raises(ReasonerFailed) as info:
            reasoner(model, on_text=deltas.append, timeout=0.4).complete("sys", ASK, [])
    finally:
        release.set()
    assert deltas == ["Thinking"]
    assert info.value.error_type == "timeout" and info.value.retryable is True


def test_async_streamed_reply_equals_the_synchronous_one(model):
    answer = fake_model.calls(("exec", {"source": "(define (main input) 1)"}), content="Running it.")
    model.queue(answer, answer)
    plain = reasoner(model).complete("sys", ASK, TOOL_SPECS)
    deltas: list[str] = []

    async def ask() -> Reply:
        r = AsyncOpenAIReasoner(model="fake-model", base_url=model.base_url, api_key=KEY, max_retries=0, on_text=deltas.append)
        try:
            return await r.complete("sys", ASK, TOOL_SPECS)
        finally:
            await r.aclose()

    assert asyncio.run(ask()) == plain and "".join(deltas) == "Running it."


def chunk(*choices, usage=None):
    return SimpleNamespace(choices=list(choices), usage=usage)


def choice(index=0, finish_reason=None, **delta):
    return SimpleNamespace(index=index, finish_reason=finish_reason, delta=SimpleNamespace(**delta))


def piece(index, id=None, name=None, arguments=None):
    return SimpleNamespace(index=index, id=id, type="function" if id else None,
                           function=SimpleNamespace(name=name, arguments=arguments))


def test_the_assembler_matches_tool_call_pieces_by_index():
    assembler = StreamAssembler()
    assembler.add(chunk(choice(tool_calls=[piece(0, "a", "read", '{"pa'), piece(1, "b", "stat", "")])))
    assembler.add(chunk(choice(tool_calls=[piece(1, arguments='{"path": "/lib"}'), piece(0, arguments='th": "/"}')])))
    assembler.add(chunk(choice(index=1, content="another choice is ignored")))
    assembler.add(chunk(choice(finish_reason="tool_calls")))
    assembler.add(chunk(usage=SimpleNamespace(prompt_tokens=3, completion_tokens=2, total_tokens=5)))
    assert assembler.reply() == Reply(
        tool_calls=(ToolCall("a", "read", {"path": "/"}), ToolCall("b", "stat", {"path": "/lib"})),
        finish_reason="tool_calls",
        usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    )


def test_the_assembler_refuses_a_stream_without_choices_or_a_nameless_call():
    with pytest.raises(ReasonerFailed, match="no choices"):
        StreamAssembler().reply()
    assembler = StreamAssembler()
    assembler.add(chunk(choice(tool_calls=[piece(0, arguments="{}")])))
    with pytest.raises(ReasonerFailed, match="unsupported tool call"):
        assembler.reply()
