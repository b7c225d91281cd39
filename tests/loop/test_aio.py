"""The asyncio surface: AsyncSvit, async observers, async reasoners, AsyncOpenAIReasoner.

Plain asyncio: each test drives its coroutine with ``run`` (``asyncio.run`` under an
overall deadline, so a hang fails instead of stalling the suite).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import re
import textwrap
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from svit import AsyncSvit, Message, Svit
from svit.errors import PersistenceUnavailable
from svit.loop import (
    TOOL_SPECS,
    CanonicalEvent,
    Closed,
    Committed,
    Empty,
    Failed,
    InboxClosed,
    Lagged,
    ReasonerFailed,
    Reply,
    ToolCall,
    TurnFailed,
)
from svit.reasoners import AsyncOpenAIReasoner, OpenAIReasoner, ScriptedReasoner

from . import fake_openai
from .fake_openai import FakeOpenAI

ADDRESS = "svit://local/tests/aio"
KEY = "sk-test-secret-key"
README = Path(__file__).resolve().parents[2] / "README.md"
tool = ScriptedReasoner.tool


def run(coroutine: Any, deadline: float = 10) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, deadline))


def make(reasoner: Any, **memory: Any) -> Svit:
    # A failed turn sets its item aside at once here (retries: tests/loop/test_turns.py).
    builder = Svit.builder(ADDRESS).reasoner(reasoner).max_attempts(1)
    for name, value in memory.items():
        builder.memory(name, value)
    return builder.build()


async def until(condition: Any) -> None:
    """Test-side wait for a condition the test cannot be woken for."""
    while not condition():
        await asyncio.sleep(0.001)


class AsyncScripted:
    """ScriptedReasoner behind an ``async def complete`` that records the event loop it ran on."""

    def __init__(self, steps: list[Any]) -> None:
        self.inner = ScriptedReasoner(steps)
        self.loops: list[asyncio.AbstractEventLoop] = []

    async def complete(self, system_prompt: str, messages: Any, tools: Any) -> Reply:
        await asyncio.sleep(0)
        self.loops.append(asyncio.get_running_loop())
        return self.inner.complete(system_prompt, messages, tools)


# ---------------------------------------------------------------------- the facade


def test_scripted_conversation_end_to_end():
    reasoner = ScriptedReasoner([tool("write", path="/memory/color", value="blue"), "Remembered blue.", "Still blue."])

    async def main() -> None:
        agent = AsyncSvit(make(reasoner, facts={}))
        replies, events = agent.outbox(), agent.events()
        agent.start()
        change = await agent.send(Message.user("Remember blue."))
        assert change.paths == ["/inbox"]
        reply = await replies.recv(timeout=5)
        assert reply.role == "agent" and reply.text == "Remembered blue."
        await agent.idle(timeout=5)
        assert agent.svit.read("/memory/color") == "blue" and agent.svit.read("/inbox") == []
        with pytest.raises(TimeoutError):
            await replies.recv(timeout=0.05)

        await agent.send("What colour?")  # idle leaves the inbox open
        await agent.block(timeout=5)
        with pytest.raises(InboxClosed):
            await agent.send("Too late.")
        assert [m.text async for m in replies] == ["Still blue."]
        received = [e async for e in events]
        canonical = [e.event.type for e in received if isinstance(e, CanonicalEvent)]
        assert canonical == [e.type for e in agent.svit.recent_events(20)]
        assert canonical[-2:] == ["input.message", "output.message.completed"]

    run(main())


def test_async_for_receives_exactly_the_outbox_in_order():
    texts = [f"m{i}" for i in range(6)]

    async def main() -> list[str]:
        agent = AsyncSvit(make(ScriptedReasoner([lambda c: f"re: {c[-1].text}"], repeat_last=True)))
        replies = agent.outbox()
        witness = agent.svit.outbox()  # a synchronous observer of the same replies

        async def consume() -> list[str]:
            return [m.text async for m in replies]  # ends when the loop stops

        consumer = asyncio.create_task(consume())
        agent.start()
        for text in texts:
            await agent.send(text)
        await agent.block(timeout=5)
        got = await consumer
        seen = []
        while True:
            try:
                seen.append(witness.try_recv().text)
            except (Empty, Closed):
                break
        assert got == seen
        return got

    assert run(main()) == [f"re: {t}" for t in texts]


def test_cancelled_async_for_loses_and_repeats_nothing():
    async def main() -> None:
        agent = AsyncSvit(make(ScriptedReasoner([lambda c: f"re: {c[-1].text}"], repeat_last=True)))
        replies = agent.outbox()
        witness = agent.svit.outbox()  # subscribed after `replies`, so it is published to second
        got: list[str] = []

        async def consume() -> None:
            async for message in replies:
                got.append(message.text)

        consumer = asyncio.create_task(consume())
        agent.start()
        await agent.send("one")
        assert witness.recv(timeout=5).text == "re: one"
        await until(lambda: got == ["re: one"])

        # The race: the reply is queued and the consumer's wake-up scheduled while the
        # event loop is held (synchronous calls on purpose), then the consumer is
        # cancelled before it runs again. Cancelling must not consume the reply.
        agent.svit.inbox().send("two")
        assert witness.recv(timeout=5).text == "re: two"
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        assert got == ["re: one"]

        await agent.send("three")
        await agent.send("four")
        await agent.block(timeout=5)
        rest = [message.text async for message in replies]
        assert got + rest == ["re: one", "re: two", "re: three", "re: four"]

    run(main())


def test_cancelled_idle_wait_then_resume():
    started, release = threading.Event(), asyncio.Event()

    class Gated:
        async def complete(self, system_prompt: str, messages: Any, tools: Any) -> Reply:
            started.set()
            await release.wait()
            return Reply(text=f"re: {messages[-1].text}")

    async def main() -> None:
        agent = AsyncSvit(make(Gated()))
        replies = agent.outbox()
        await agent.send("one")
        waiter = asyncio.create_task(agent.idle())
        await until(started.is_set)  # the turn is running and waits for `release`
        with pytest.raises(TimeoutError, match="still handling"):
            await agent.idle(timeout=0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert agent.svit.worker.watchers == ()  # neither wait left anything registered

        release.set()
        await agent.idle(timeout=5)
        assert replies.try_recv().text == "re: one"
        with pytest.raises(Empty):
            replies.try_recv()

        await agent.send("two")  # the loop was idle: idle() must wait for this turn
        await agent.idle(timeout=5)
        assert replies.try_recv().text == "re: two"
        await agent.block(timeout=5)
        assert [m async for m in replies] == []

    run(main())


def committing(agent: AsyncSvit) -> bool:
    """Whether another thread is inside ``send``, committing to /inbox."""
    return agent.svit.worker.sending > 0


def hold_process_lock(
    agent: AsyncSvit, held: threading.Event, release: threading.Event, seconds: float
) -> threading.Thread:
    """Hold the process lock on another thread, so a commit has to wait for it."""

    def hold() -> None:
        with agent.svit.process._lock:
            held.set()
            release.wait(seconds)

    thread = threading.Thread(target=hold)
    thread.start()
    return thread


def test_event_loop_stays_responsive_during_send_block_and_turn():
    stall = 0.5

    def slow(conversation: Any) -> str:
        time.sleep(stall)
        return "done"

    async def main() -> float:
        agent = AsyncSvit(make(ScriptedReasoner([slow])))
        stamps: list[float] = []

        async def ticker() -> None:
            while True:
                stamps.append(time.monotonic())
                await asyncio.sleep(0.01)

        ticking = asyncio.create_task(ticker())
        held = threading.Event()
        holder = hold_process_lock(agent, held, threading.Event(), stall)
        await until(held.is_set)
        sending = asyncio.create_task(agent.send("hi"))  # its commit waits for the lock
        await until(lambda: committing(agent))
        await agent.block(timeout=5)  # sealing waits for that commit; then the turn takes `stall`
        assert (await sending).paths == ["/inbox"]
        ticking.cancel()
        holder.join()
        assert agent.svit.read("/inbox") == []
        return max(later - earlier for earlier, later in zip(stamps, stamps[1:]))

    assert run(main()) < 0.5 * stall


def test_timeouts_and_start_do_not_wait_behind_a_commit():
    # A send waiting for the process lock (a tool running) must not hold up start() on
    # the event loop, nor stretch block()'s timeout to the length of the tool run.
    async def main() -> None:
        agent = AsyncSvit(make(ScriptedReasoner(["ok"])))
        release, held = threading.Event(), threading.Event()
        holder = hold_process_lock(agent, held, release, 5)
        await until(held.is_set)
        sending = asyncio.create_task(agent.send("waits for the lock"))
        await until(lambda: committing(agent))
        began = time.monotonic()
        agent.start()
        with pytest.raises(TimeoutError):
            await agent.block(timeout=0.2)
        assert time.monotonic() - began < 1.5
        release.set()
        await sending
        holder.join()
        await agent.block(timeout=5)  # the sealed loop still handles the send that was in flight
        assert agent.svit.read("/inbox") == []

    run(main())


def test_send_cancelled_mid_commit_settles_exactly_once():
    async def main() -> None:
        agent = AsyncSvit(make(ScriptedReasoner(["ok"])))
        replies = agent.outbox()
        message = Message.user("exactly once")
        release, held = threading.Event(), threading.Event()
        holder = hold_process_lock(agent, held, release, 5)
        await until(held.is_set)
        sending = asyncio.create_task(agent.send(message))
        await until(lambda: committing(agent))  # the executor thread is inside the commit
        sending.cancel()
        await asyncio.sleep(0.05)
        assert not sending.done()  # the cancellation waits for the commit to settle
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await sending
        holder.join()
        assert agent.svit.read("/inbox") == [message.to_json()]
        await agent.block(timeout=5)
        assert [m.text async for m in replies] == ["ok"]

    run(main())


def test_send_cancelled_before_its_commit_starts_sends_nothing():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
        agent = AsyncSvit(make(ScriptedReasoner([])))
        release = threading.Event()
        busy = loop.run_in_executor(None, release.wait, 5)  # the only worker is taken
        sending = asyncio.create_task(agent.send("never"))
        await asyncio.sleep(0.02)
        sending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sending  # at once: nothing had started
        release.set()
        await busy
        await loop.run_in_executor(None, lambda: None)  # the abandoned call has had its turn
        assert agent.svit.read("/inbox") == []

    run(main())


def test_async_observer_reports_loss_then_continues():
    async def main() -> None:
        agent = AsyncSvit(make(ScriptedReasoner([])))
        events = agent.events()
        for i in range(70):
            agent.svit.write(f"/memory/k{i}", i)
        with pytest.raises(Lagged) as info:
            async for _ in events:
                pass
        assert info.value.missed == 6
        await agent.block(timeout=5)
        kept = [e.change.paths[0] async for e in events if isinstance(e, Committed)]
        assert kept == [f"/memory/k{i}" for i in range(6, 70)]

    run(main())


def test_facade_is_bound_to_its_event_loop():
    agent = make(ScriptedReasoner([]))
    with pytest.raises(RuntimeError):
        AsyncSvit(agent)  # no running event loop

    async def make_facade() -> AsyncSvit:
        return AsyncSvit(agent)

    other = asyncio.new_event_loop()
    try:
        stale = other.run_until_complete(make_facade())
        with pytest.raises(RuntimeError, match="another open event loop"):
            run(make_facade())  # the first loop is still open: its reasoner calls would be stranded
    finally:
        other.close()

    async def use_stale() -> None:
        AsyncSvit(agent)  # the earlier loop is closed: rebinding is allowed
        with pytest.raises(RuntimeError, match="another event loop"):
            await stale.idle()

    run(use_stale())


# ---------------------------------------------------------------------- async reasoners


def test_async_reasoner_runs_on_the_host_event_loop():
    reasoner = AsyncScripted([tool("write", path="/memory/color", value="blue"), "Remembered blue."])

    async def main() -> None:
        agent = AsyncSvit(make(reasoner, facts={}))
        replies = agent.outbox()
        await agent.send("Remember blue.")
        await agent.block(timeout=5)
        assert [m.text async for m in replies] == ["Remembered blue."]
        assert agent.svit.read("/memory/color") == "blue"
        assert reasoner.loops == [asyncio.get_running_loop()] * 2
        assert [m.role for m in reasoner.inner.requests[-1][1]] == ["user", "agent", "tool"]

    run(main())


MESSAGE = Message.user("Please fail.")


def sync_outcome(reasoner: Any) -> tuple:
    agent = make(reasoner)
    events, replies = agent.events(), agent.outbox()
    agent.inbox().send(MESSAGE)
    with pytest.raises(TurnFailed) as info:
        agent.block(timeout=5)
    seen = []
    while True:
        try:
            seen.append(events.try_recv())
        except (Empty, Closed):
            break
    with pytest.raises(Closed):
        replies.try_recv()
    return summary(agent, info.value, seen)


def async_outcome(reasoner: Any) -> tuple:
    async def main() -> tuple:
        agent = AsyncSvit(make(reasoner))
        events, replies = agent.events(), agent.outbox()
        await agent.send(MESSAGE)
        with pytest.raises(TurnFailed) as info:
            await agent.block(timeout=5)
        assert [m async for m in replies] == []
        return summary(agent.svit, info.value, [e async for e in events])

    return run(main())


def set_aside_items(agent: Svit) -> list[Any]:
    assert agent.read("/inbox") == []
    return [entry["item"] for entry in agent.read("/thread/turns/set_aside")]


def summary(agent: Svit, error: TurnFailed, events: list) -> tuple:
    return (
        str(error),
        agent.failure,
        set_aside_items(agent),
        [e.type for e in agent.recent_events(10)],
        [type(e).__name__ for e in events],
        [e.text for e in events if isinstance(e, Failed)],
    )


class Raising:
    async def complete(self, system_prompt: str, messages: Any, tools: Any) -> Reply:
        await asyncio.sleep(0)
        raise ReasonerFailed("provider unavailable")


class TimingOut:
    async def complete(self, system_prompt: str, messages: Any, tools: Any) -> Reply:
        await asyncio.wait_for(asyncio.Event().wait(), 0.05)
        raise AssertionError("unreachable")


def raise_failed(conversation: Any) -> str:
    raise ReasonerFailed("provider unavailable")


def time_out(conversation: Any) -> str:
    concurrent.futures.Future().result(timeout=0.05)
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    "async_reasoner, sync_steps, text",
    [(Raising(), [raise_failed], "provider unavailable"), (TimingOut(), [time_out], "TimeoutError")],
    ids=["raises", "times-out"],
)
def test_failing_async_reasoner_fails_the_turn_like_a_sync_one(async_reasoner, sync_steps, text):
    expected = sync_outcome(ScriptedReasoner(sync_steps))
    assert async_outcome(async_reasoner) == expected
    error, failure, set_aside, log, kinds, failed = expected
    assert text in error and failure == failed[0] and text in failure
    assert set_aside == [MESSAGE.to_json()]
    assert log == ["input.message", "turn.failed"]
    assert kinds[0] == "Committed" and kinds[-1] == "Failed"


def test_async_reasoner_without_an_event_loop_fails_the_turn_cleanly():
    agent = make(AsyncScripted(["never"]))
    agent.inbox().send(MESSAGE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TurnFailed, match="needs an AsyncSvit"):
            agent.block(timeout=5)
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]
    assert set_aside_items(agent) == [MESSAGE.to_json()]


def test_event_loop_shutdown_mid_call_fails_the_turn_instead_of_hanging():
    entered = threading.Event()

    class Forever:
        async def complete(self, system_prompt: str, messages: Any, tools: Any) -> Reply:
            entered.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    agent = make(Forever())

    async def main() -> None:
        facade = AsyncSvit(agent)
        await facade.send(MESSAGE)
        facade.start()
        await until(entered.is_set)
        # Returning leaves the call pending; asyncio.run cancels it on the way out.

    run(main())
    with pytest.raises(TurnFailed, match="cancelled"):
        agent.block(timeout=5)
    assert set_aside_items(agent) == [MESSAGE.to_json()]


def test_event_loop_closed_without_cancelling_the_call_fails_the_turn_instead_of_hanging():
    # run_until_complete + close never cancels the pending reasoner call: the loop thread
    # must notice the closed event loop rather than wait on it forever.
    entered = threading.Event()

    class Forever:
        async def complete(self, system_prompt: str, messages: Any, tools: Any) -> Reply:
            entered.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    agent = make(Forever())

    async def main() -> None:
        facade = AsyncSvit(agent)
        facade.start()
        await facade.send(MESSAGE)
        await until(entered.is_set)

    loop = asyncio.new_event_loop()
    loop.run_until_complete(main())
    loop.close()
    with pytest.raises(TurnFailed, match="event loop"):
        agent.block(timeout=10)
    assert set_aside_items(agent) == [MESSAGE.to_json()]


# ---------------------------------------------------------------------- AsyncOpenAIReasoner


def openai_options(server: FakeOpenAI, **options: Any) -> dict[str, Any]:
    return {"model": "fake-model", "base_url": server.base_url, "api_key": KEY, "max_retries": 0, **options}


def test_async_openai_sends_and_parses_like_the_sync_reasoner(server):
    calls = fake_openai.tool_calls(("write", {"path": "/memory/a", "value": [1, 2]}), ("read", {"path": "/memory/a"}))
    server.queue(calls, calls)
    earlier = ToolCall("c1", "read", {"path": "/"})
    conversation = [Message.user("go"), Message.agent("", [earlier]), Message.tool_result(earlier, '{"value": 1}')]
    expected = OpenAIReasoner(**openai_options(server)).complete("sys", conversation, TOOL_SPECS)

    async def main() -> Reply:
        reasoner = AsyncOpenAIReasoner(**openai_options(server))
        try:
            return await reasoner.complete("sys", conversation, TOOL_SPECS)
        finally:
            await reasoner.aclose()

    reply = run(main())
    assert reply == expected
    assert reply.tool_calls == (
        ToolCall("call_0", "write", {"path": "/memory/a", "value": [1, 2]}),
        ToolCall("call_1", "read", {"path": "/memory/a"}),
    )
    assert server.requests[0] == server.requests[1]
    assert [m["role"] for m in server.requests[1]["messages"]] == ["system", "user", "assistant", "tool"]
    assert server.authorizations == [f"Bearer {KEY}"] * 2


def test_async_openai_through_the_loop(server):
    server.queue(
        fake_openai.tool_calls(("write", {"path": "/memory/color", "value": "blue"})),
        fake_openai.text("I will remember blue."),
    )

    async def main() -> None:
        reasoner = AsyncOpenAIReasoner(**openai_options(server))
        agent = AsyncSvit(make(reasoner, facts={}))
        replies = agent.outbox()
        await agent.send("Remember blue.")
        await agent.block(timeout=10)
        await reasoner.aclose()
        assert [m.text async for m in replies] == ["I will remember blue."]
        assert agent.svit.read("/memory/color") == "blue" and agent.svit.read("/inbox") == []

    run(main())
    messages = server.requests[-1]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]


@pytest.mark.parametrize(
    "response, timeout, text",
    [
        (fake_openai.error(400, "model does not exist"), 10.0, "HTTP 400: model does not exist"),
        (fake_openai.slow(10, fake_openai.text("too late")), 0.3, "model request timed out after 0.3s"),
    ],
    ids=["http-error", "timeout"],
)
def test_async_openai_failures_fail_the_turn_like_the_sync_reasoner(server, response, timeout, text):
    server.queue(response, response)
    sync_agent = make(OpenAIReasoner(**openai_options(server, timeout=timeout)))
    sync_agent.inbox().send(MESSAGE)
    with pytest.raises(TurnFailed):
        sync_agent.block(timeout=10)

    async def main() -> Svit:
        reasoner = AsyncOpenAIReasoner(**openai_options(server, timeout=timeout))
        agent = AsyncSvit(make(reasoner))
        await agent.send(MESSAGE)
        with pytest.raises(TurnFailed):
            await agent.block(timeout=10)
        await reasoner.aclose()
        return agent.svit

    async_agent = run(main())
    assert async_agent.failure == sync_agent.failure
    assert text in async_agent.failure and KEY not in async_agent.failure
    assert set_aside_items(async_agent) == set_aside_items(sync_agent) == [MESSAGE.to_json()]


# ---------------------------------------------------------------------- README


def test_readme_asyncio_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    found = [block for block in blocks if "AsyncSvit" in block]
    assert len(found) == 1, "the README has one asyncio example"
    source = textwrap.dedent(found[0])  # it sits in a list item
    exec(compile(source, "README.md", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out.strip().splitlines()[-1] == "['Noted: blue.']"


def test_a_failure_outside_a_turn_is_reported_not_a_quiet_stop():
    agent = make(ScriptedReasoner(["ok"]))

    def broken_inbox() -> Any:
        raise PersistenceUnavailable("the store went away")

    agent.process.inbox_front = broken_inbox  # the loop's read of its inbox fails
    with pytest.raises(TurnFailed, match="the store went away"):
        agent.block(timeout=5)
    assert "the store went away" in agent.failure
