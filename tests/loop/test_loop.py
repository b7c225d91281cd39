"""The reasoning loop (reference §11.2-§11.4, §13 items 69-74 and 77)."""

from __future__ import annotations

import json
import threading

import pytest

from svit import Limits, Message, Ports, Process, Svit
from svit.errors import InvalidValue, ScriptFailed, SvitError
from svit.loop import (
    CanonicalEvent,
    Closed,
    Committed,
    Empty,
    Failed,
    InboxClosed,
    InvalidThread,
    Lagged,
    MemoryEventLog,
    MessageEvent,
    MissingReasoner,
    ReasonerFailed,
    Reply,
    ToolCall,
    TurnFailed,
)
from svit.loop.observers import Broadcast
from svit.loop.set_aside import retry_set_aside
from svit.loop.tools import TOOL_SPECS, run_tool
from svit.ports.llm import LlmPort
from svit.ports.spawn import SpawnPort
from svit.reasoners import ScriptedReasoner

ADDRESS = "svit://local/tests/agent"
tool = ScriptedReasoner.tool


def make(reasoner, **memory):
    builder = Svit.builder(ADDRESS).reasoner(reasoner)
    for name, value in memory.items():
        builder.memory(name, value)
    return builder.build()


def drain(observer):
    items = []
    while True:
        try:
            items.append(observer.try_recv())
        except (Empty, Closed):
            return items


# ---------------------------------------------------------------------- build and /thread


def test_item69_missing_reasoner_and_default_prompt():
    with pytest.raises(MissingReasoner) as info:
        Svit.builder(ADDRESS).build()
    assert info.value.code == "missing_reasoner"
    assert isinstance(info.value, SvitError)

    agent = make(ScriptedReasoner([]))
    assert agent.read("/thread/instructions") is None
    prompt = agent.read("/thread/system_prompt")
    assert f"Process address: {ADDRESS}" in prompt
    assert "<instructions>" not in prompt
    for word in ("/lib", "port-call", "jq", "search", "value-map", "external effects"):
        assert word in prompt


def test_instructions_are_wrapped_and_blank_ones_dropped():
    agent = Svit.builder(ADDRESS).instructions("Be brief.").reasoner(ScriptedReasoner([])).build()
    assert agent.read("/thread/instructions") == "Be brief."
    assert agent.system_prompt.endswith(f"\n\nProcess address: {ADDRESS}\n\n<instructions>\nBe brief.\n</instructions>")
    blank = Svit.builder(ADDRESS).instructions("  \n").reasoner(ScriptedReasoner([])).build()
    assert blank.read("/thread/instructions") is None
    assert "<instructions>" not in blank.system_prompt


def test_item72_thread_metadata_keys():
    agent = make(ScriptedReasoner([]))
    assert agent.discover("/thread") == ["format", "instructions", "process_id", "session_id", "system_prompt"]
    assert agent.read("/thread/format") == "svit-thread@8"
    assert agent.read("/thread/process_id") == ADDRESS
    assert agent.read("/thread/session_id") == agent.session_id


def test_resume_keeps_session_and_fork_starts_a_new_one():
    agent = Svit.builder(ADDRESS).instructions("Stay calm.").reasoner(ScriptedReasoner([])).build()
    restored = Svit.resume(Process.restore(agent.snapshot())).reasoner(ScriptedReasoner([])).build()
    assert restored.session_id == agent.session_id
    assert restored.version == agent.version  # nothing differed, nothing committed

    child = Svit.resume(agent.fork_process("svit://local/tests/child")).reasoner(ScriptedReasoner([])).build()
    assert child.session_id != agent.session_id
    assert child.read("/thread/process_id") == "svit://local/tests/child"
    assert child.read("/thread/instructions") == "Stay calm."
    assert "Process address: svit://local/tests/child" in child.system_prompt


def test_resume_rejects_materialized_history_and_missing_process_id():
    process = Process.builder(ADDRESS).build()
    process.replace_thread_state({"format": "svit-thread@8", "process_id": ADDRESS, "events": []})
    version = process.version
    with pytest.raises(InvalidThread, match="materialized history"):
        Svit.resume(process).ports(Ports().port("echo", lambda i: i)).reasoner(ScriptedReasoner([])).build()
    assert process.version == version and process.read("/ports") == {}  # refused before any commit
    process.replace_thread_state({"format": "svit-thread@8"})
    with pytest.raises(InvalidThread, match="process_id"):
        Svit.resume(process).reasoner(ScriptedReasoner([])).build()


def test_store_option_uses_the_handle_the_store_creates():
    created = []

    class FakeStore:
        def create(self, process):
            created.append(process)
            return process

    agent = Svit.builder(ADDRESS).reasoner(ScriptedReasoner([])).store(FakeStore()).build()
    assert len(created) == 1 and agent.process is created[0]


# ---------------------------------------------------------------------- turns


def test_item70_scripted_write_then_answer():
    reasoner = ScriptedReasoner([tool("write", path="/memory/color", value="blue"), "Remembered blue."])
    agent = make(reasoner, facts={})
    replies = agent.outbox()
    agent.start()
    agent.inbox().send(Message.user("Remember blue."))
    reply = replies.recv(timeout=10)
    agent.block()
    assert reply.role == "agent" and reply.text == "Remembered blue."
    assert agent.read("/memory/color") == "blue"
    assert agent.read("/inbox") == []
    with pytest.raises(InboxClosed) as info:
        agent.inbox().send(Message.user("Too late."))
    assert info.value.code == "inbox_closed"
    # The model saw the system prompt, the tools and the tool result before answering.
    system, conversation, tools = reasoner.requests[-1]
    assert system == agent.system_prompt
    assert tools == ["discover", "read", "stat", "write", "remove", "exec"]
    assert [m.role for m in conversation] == ["user", "agent", "tool"]
    assert json.loads(conversation[-1].text) == {"changed": ["/memory/color"], "path": "/memory/color", "version": 3}


def test_item71_iteration_limit_fails_the_turn_and_sets_the_item_aside():
    agent = Svit.builder(ADDRESS).max_iterations(1).max_attempts(1).reasoner(
        ScriptedReasoner([tool("read", path="/memory")], repeat_last=True)
    ).build()
    replies, events = agent.outbox(), agent.events()
    agent.start()
    sent = Message.user("Loop forever.")
    agent.inbox().send(sent)
    with pytest.raises(TurnFailed, match="maximum reason/act iterations reached before a final answer"):
        agent.block()
    with pytest.raises(Closed):
        replies.recv(timeout=1)
    assert agent.read("/inbox") == []
    assert [entry["item"] for entry in agent.read("/thread/turns/set_aside")] == [sent.to_json()]
    failed = [e for e in drain(events) if isinstance(e, Failed)]
    assert len(failed) == 1 and "maximum reason/act iterations" in failed[0].text
    assert failed[0].item_id == sent.id and failed[0].error["code"] == "turn_failed"
    with pytest.raises(InboxClosed):
        agent.inbox().send(Message.user("after failure"))


def test_inbox_is_fifo_and_acknowledged_only_after_success():
    holder = {}
    seen_heads = []

    def answer(conversation):
        # While the turn runs, its item is still the committed inbox head.
        seen_heads.append(holder["agent"].read("/inbox")[0]["content"][0]["text"])
        return f"echo: {conversation[-1].text}"

    agent = make(ScriptedReasoner([answer, answer, answer]))
    holder["agent"] = agent
    replies = agent.outbox()
    for text in ("one", "two", "three"):
        agent.inbox().send(Message.user(text))  # committed before the loop exists
    assert len(agent.read("/inbox")) == 3
    agent.start()
    agent.block()
    assert [replies.recv(timeout=1).text for _ in range(3)] == ["echo: one", "echo: two", "echo: three"]
    assert seen_heads == ["one", "two", "three"]
    assert agent.read("/inbox") == []


def test_failed_turn_sets_the_item_aside_and_a_resumed_loop_runs_it_once_retried():
    log = MemoryEventLog()

    def broken(conversation):
        raise ReasonerFailed("provider unavailable")

    agent = Svit.builder(ADDRESS).event_log(log).max_attempts(1).reasoner(ScriptedReasoner([broken])).build()
    events = agent.events()
    message = Message.user("Please retry me.")
    agent.inbox().send(message)
    with pytest.raises(TurnFailed, match="provider unavailable") as info:
        agent.block()
    assert "Traceback" not in str(info.value)
    assert agent.read("/inbox") == []
    assert [entry["item"] for entry in agent.read("/thread/turns/set_aside")] == [message.to_json()]
    assert agent.failure is not None and "provider unavailable" in agent.failure
    assert [e.type for e in agent.recent_events(10)] == ["input.message", "turn.failed"]
    assert any(isinstance(e, Failed) for e in drain(events))

    retry = ScriptedReasoner(["Done at last."])
    restored = Process.restore(agent.snapshot())
    retry_set_aside(restored, message.id)  # the operator puts it back (svit inbox retry)
    resumed = Svit.resume(restored).event_log(log).reasoner(retry).build()
    assert resumed.session_id == agent.session_id
    replies = resumed.outbox()
    resumed.block()
    assert replies.recv(timeout=1).text == "Done at last."
    assert resumed.read("/inbox") == [] and resumed.read("/thread/turns") is None
    # The failed attempt is history, but the retry's conversation does not repeat it.
    assert [m.text for m in retry.requests[0][1]] == ["Please retry me."]
    assert [m.role for m in resumed.messages()] == ["user", "user", "agent"]


def test_model_output_over_value_limits_fails_closed():
    agent = Svit.builder(ADDRESS).limits(Limits(max_text_bytes=16384)).max_attempts(1).reasoner(
        ScriptedReasoner(["x" * 20000])
    ).build()
    replies = agent.outbox()
    agent.inbox().send(Message.user("Say a lot."))
    with pytest.raises(TurnFailed, match="maximum text bytes exceeded"):
        agent.block()
    assert len(agent.read("/inbox")) == 0 and len(agent.read("/thread/turns/set_aside")) == 1
    with pytest.raises(Closed):
        replies.try_recv()


def test_reply_without_text_or_tool_calls_fails():
    agent = Svit.builder(ADDRESS).max_attempts(1).reasoner(ScriptedReasoner([Reply(text=None)])).build()
    agent.inbox().send(Message.user("hi"))
    with pytest.raises(TurnFailed, match="no final agent message"):
        agent.block()


def test_send_accepts_text_and_block_drains_without_start():
    agent = make(ScriptedReasoner(["first", "second"]))
    replies = agent.outbox()
    agent.inbox().send("a")
    agent.inbox().send("b")
    agent.block()
    assert [replies.recv(timeout=1).text for _ in range(2)] == ["first", "second"]
    with pytest.raises(Closed):
        replies.recv(timeout=1)


def test_concurrent_senders_are_all_processed_once():
    agent = make(ScriptedReasoner([lambda c: c[-1].text], repeat_last=True))
    replies = agent.outbox()
    agent.start()
    threads = [threading.Thread(target=lambda i=i: agent.inbox().send(f"m{i}")) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    agent.block()
    texts = sorted(replies.recv(timeout=1).text for _ in range(8))
    assert texts == sorted(f"m{i}" for i in range(8))
    assert agent.read("/inbox") == []


# ---------------------------------------------------------------------- events and observers


def test_events_stream_and_canonical_log():
    agent = make(ScriptedReasoner([tool("write", path="/memory/n", value=1), "ok"]))
    events = agent.events()
    agent.inbox().send("set n")
    agent.block()
    received = drain(events)
    canonical = [e.event.type for e in received if isinstance(e, CanonicalEvent)]
    assert canonical == ["input.message", "output.message.completed", "tool.call.started", "tool.call.completed", "output.message.completed"]
    commits = [e.change for e in received if isinstance(e, Committed)]
    assert [c.paths for c in commits] == [["/inbox"], ["/memory/n"], ["/inbox"]]
    assert commits[1].hashes["/memory/n"] == agent.process.node_hash("/memory/n")
    projected = [e.message.role for e in received if isinstance(e, MessageEvent)]
    assert projected == ["user", "agent", "tool", "agent"]
    # Each message follows the canonical event it was projected from.
    kinds = [type(e).__name__ for e in received if not isinstance(e, Committed)]
    assert kinds[:2] == ["CanonicalEvent", "MessageEvent"]
    log = agent.recent_events(3)
    assert [e.sequence for e in log] == [3, 4, 5]
    assert all(e.session_id == agent.session_id for e in log)
    assert agent.read("/thread").keys() == {"format", "instructions", "process_id", "session_id", "system_prompt"}
    assert [m.text for m in agent.recent_messages(1)] == ["ok"]
    with pytest.raises(InvalidValue):
        agent.recent_events(0)


def test_lagging_observer_reports_the_loss():
    agent = make(ScriptedReasoner([]))
    events = agent.events()
    for i in range(70):
        agent.write(f"/memory/k{i}", i)
    with pytest.raises(Lagged) as info:
        events.try_recv()
    assert info.value.missed == 6
    kept = drain(events)
    assert len(kept) == 64
    assert kept[0].change.paths == ["/memory/k6"] and kept[-1].change.paths == ["/memory/k69"]


def test_observer_primitives():
    hub: Broadcast[int] = Broadcast(capacity=2)
    early, late = hub.subscribe(), None
    with pytest.raises(Empty):
        early.try_recv()
    with pytest.raises(Empty):
        early.recv(timeout=0.01)
    hub.publish(1)
    late = hub.subscribe()
    hub.publish(2)
    hub.publish(3)
    with pytest.raises(Lagged) as info:
        early.recv(timeout=0)
    assert info.value.missed == 1
    assert [early.recv(), early.recv()] == [2, 3]
    assert [late.recv(), late.recv()] == [2, 3]
    hub.close()
    with pytest.raises(Closed):
        early.recv(timeout=1)
    with pytest.raises(Closed):
        hub.subscribe().try_recv()


def test_recv_wakes_when_an_item_arrives():
    hub: Broadcast[str] = Broadcast()
    observer = hub.subscribe()
    timer = threading.Timer(0.05, hub.publish, args=("late",))
    timer.start()
    assert observer.recv(timeout=5) == "late"


# ---------------------------------------------------------------------- tools


def test_tool_errors_are_returned_as_text():
    reasoner = ScriptedReasoner(
        [
            [
                tool("read", path="no-slash"),
                tool("write", path="/system/identity/authenticated", value=True),
                tool("exec", input={}),
                tool("exec", path="/memory/x", input={}),
                tool("exec", source="(define (main input) (panic \"boom\"))", input={}),
                tool("fly", path="/"),
                ToolCall("bad", "read", "{not json"),
                tool("remove", path="/memory/missing"),
                tool("discover"),
            ],
            "I saw the errors.",
        ]
    )
    agent = make(reasoner)
    replies = agent.outbox()
    agent.inbox().send("try things")
    agent.block()
    assert replies.recv(timeout=1).text == "I saw the errors."
    results = [m.text for m in agent.messages() if m.role == "tool"]
    assert len(results) == 9
    assert all(text.startswith("error: ") for text in results)
    assert results[0].startswith("error: invalid_path: ")
    assert results[1].startswith("error: invalid_path: ")
    assert results[2] == "error: invalid_path: invalid state path: exec requires source or a /lib path"
    assert "exec requires source or a /lib path" in results[3]
    assert results[4].startswith("error: script_failed: ") and "boom" in results[4]
    assert results[5] == "error: unknown_tool: unknown tool: fly"
    assert results[6].startswith("error: invalid_tool_arguments: ")
    assert results[7].startswith("error: invalid_path: ")
    assert results[8] == "error: invalid_tool_arguments: invalid tool arguments: `path` must be a string"
    assert agent.version == 3  # thread init, enqueue, acknowledge: no failed tool committed


def test_tool_shapes():
    agent = (
        Svit.builder(ADDRESS)
        .memory("count", 1)
        .library("bump", "(define (main input) (do (write \"/memory/count\" (+ (read \"/memory/count\") 1)) (send! \"svit://local/tests/peer\" \"hi\") (read \"/memory/count\")))", documentation="Adds one")
        .reasoner(ScriptedReasoner([]))
        .build()
    )

    def call(name, **arguments):
        text, ok = run_tool(agent, ToolCall("c", name, arguments))
        assert ok, text
        return json.loads(text)

    assert call("discover", path="/memory") == {"entries": ["count"], "path": "/memory"}
    assert call("read", path="/memory/count") == {"path": "/memory/count", "value": 1, "version": agent.version}
    assert call("read", path="/memory/absent")["value"] is None
    assert call("read", path="/lib/bump")["value"]["documentation"] == "Adds one"
    assert call("stat", path="/memory")["value"]["kind"] == "directory"
    before = agent.version
    assert call("write", path="/memory/note", value={"a": [1, 2.5]}) == {"changed": ["/memory/note"], "path": "/memory/note", "version": before + 1}
    assert call("remove", path="/memory/note") == {"changed": ["/memory/note"], "path": "/memory/note", "version": before + 2}
    result = call("exec", path="/lib/bump", input=None)
    assert result["output"] == 2 and result["version"] == before + 3
    assert result["messages"] == [{"body": "hi", "id": f"{ADDRESS}:{before + 3}:0", "to": "svit://local/tests/peer"}]
    inline = call("exec", source="(define (main input) (value-get input \"/x\"))", input={"x": 7})
    assert inline["output"] == 7 and inline["messages"] == []
    assert agent.read("/lib") .keys() == {"bump"}  # inline source is never stored


def test_tool_specs_are_json_schemas():
    names = [spec.name for spec in TOOL_SPECS]
    assert names == ["discover", "read", "stat", "write", "remove", "exec"]
    for spec in TOOL_SPECS:
        assert spec.parameters["type"] == "object"
        json.dumps(spec.to_json())
    by_name = {spec.name: spec for spec in TOOL_SPECS}
    assert by_name["write"].parameters["required"] == ["path", "value"]
    assert set(by_name["exec"].parameters["properties"]) == {"source", "path", "input", "dry_run"}


def test_hooks_see_tool_activations():
    seen = []

    class Recorder:
        def after_activation(self, event):
            seen.append((event.script, event.status))

    reasoner = ScriptedReasoner([tool("exec", source="(define (main input) 1)", input=None), "done"])
    agent = Svit.builder(ADDRESS).hook(Recorder()).reasoner(reasoner).build()
    agent.inbox().send("run")
    agent.block()
    assert seen == [("<inline>", "committed")]


# ---------------------------------------------------------------------- ports


def test_svit_without_ports_has_an_empty_catalog_and_no_authority():
    agent = make(ScriptedReasoner([]))
    assert agent.read("/ports") == {}
    with pytest.raises(ScriptFailed, match="port not found"):
        agent.exec_inline('(define (main input) (port-call "http" input))', {})


def test_item73_resume_without_ports_empties_the_catalog():
    nested = ScriptedReasoner(["nested answer"])
    agent = Svit.builder(ADDRESS).ports(Ports().port("llm", LlmPort(nested))).reasoner(ScriptedReasoner([])).build()
    assert agent.read("/ports/llm/effect") == "external"
    assert agent.read("/ports/llm/name") == "llm"
    output = agent.exec_inline('(define (main input) (port-call "llm" input))', {"prompt": "hello?"})
    assert output.output == "nested answer"
    restored = Process.restore(agent.snapshot())
    assert restored.read("/ports").keys() == {"llm"}  # stale catalog in the snapshot
    resumed = Svit.resume(restored).reasoner(ScriptedReasoner([])).build()
    assert resumed.read("/ports") == {}
    with pytest.raises(ScriptFailed, match="port not found"):
        resumed.exec_inline('(define (main input) (port-call "llm" input))', {"prompt": "hello?"})


def test_item74_oversized_port_output_cannot_be_returned():
    ports = Ports().port("big", lambda input: "x" * (2 * 1024 * 1024))
    agent = Svit.builder(ADDRESS).ports(ports).reasoner(ScriptedReasoner([])).build()
    version = agent.version
    with pytest.raises(SvitError, match="maximum text bytes exceeded"):
        agent.exec_inline('(define (main input) (port-call "big" input))', {})
    assert agent.version == version
    # Reduced before use, the same output is fine.
    small = agent.exec_inline('(define (main input) (jq "length" (port-call "big" input)))', {})
    assert small.output == [2 * 1024 * 1024]


def test_llm_port_limits_and_failures():
    def broken(conversation):
        raise RuntimeError("secret provider detail")

    port = LlmPort(ScriptedReasoner([broken]))
    assert port.descriptor().effect == "external"
    for bad in ({"prompt": ""}, {"prompt": "x" * (256 * 1024 + 1)}, {"text": "hi"}, "hi"):
        with pytest.raises(Exception, match="llm prompt is empty or exceeds its limit"):
            port.execute(None, bad)
    with pytest.raises(Exception, match="^llm request failed$"):
        port.execute(None, {"prompt": "x" * (256 * 1024)})
    tools_only = LlmPort(ScriptedReasoner([tool("read", path="/")]))
    with pytest.raises(Exception, match="llm request failed"):
        tools_only.execute(None, {"prompt": "hi"})
    agent = Svit.builder(ADDRESS).ports(Ports().port("llm", port)).reasoner(ScriptedReasoner([])).build()
    with pytest.raises(ScriptFailed, match="port /ports/llm failed: llm prompt is empty or exceeds its limit"):
        agent.exec_inline('(define (main input) (port-call "llm" input))', {"prompt": ""})


def test_item77_spawn_retains_one_child_and_refuses_a_duplicate_id():
    child_reasoner = ScriptedReasoner([tool("write", path="/memory/answer", value=42), "The answer is 42."])
    spawn = SpawnPort(child_reasoner)
    agent = (
        Svit.builder(ADDRESS)
        .memory("question", "life")
        .instructions("Be exact.")
        .ports(Ports().port("spawn", spawn))
        .reasoner(ScriptedReasoner([]))
        .build()
    )
    assert agent.read("/ports/spawn/effect") == "child-process"
    script = '(define (main input) (port-call "spawn" input))'
    child_id = "svit://local/tests/agent/child-1"
    children_before = agent.read("/children")
    result = agent.exec_inline(script, {"id": child_id, "task": "Answer the question."})
    assert result.output == {"id": child_id, "response": "The answer is 42."}
    with pytest.raises(ScriptFailed, match="child address already exists"):
        agent.exec_inline(script, {"id": child_id, "task": "Again."})
    assert agent.child_ids() == [child_id] == spawn.child_ids()
    child = Process.restore(agent.child_snapshot(child_id))
    assert child.address == child_id
    assert child.read("/system/lineage/parent") == ADDRESS
    assert child.read("/thread/process_id") == child_id
    assert child.read("/thread/instructions") == "Be exact."
    assert child.read("/memory") == {"answer": 42, "question": "life"}
    assert child.read("/inbox") == []
    assert agent.read("/memory") == {"question": "life"}  # the parent is untouched
    assert agent.read("/children") == children_before
    assert child.read("/ports") == {}  # children get no authority unless the host grants it


def test_spawn_input_errors_and_missing_host():
    spawn = SpawnPort(ScriptedReasoner([]))
    agent = Svit.builder(ADDRESS).ports(Ports().port("spawn", spawn)).reasoner(ScriptedReasoner([])).build()
    script = '(define (main input) (port-call "spawn" input))'
    with pytest.raises(ScriptFailed, match="spawn id must be a valid svit:// address"):
        agent.exec_inline(script, {"id": "not an address", "task": "x"})
    with pytest.raises(ScriptFailed, match="spawn task is empty"):
        agent.exec_inline(script, {"id": "svit://local/tests/c", "task": ""})
    with pytest.raises(ScriptFailed, match="child turn failed"):  # the child reasoner has no steps
        agent.exec_inline(script, {"id": "svit://local/tests/c", "task": "x"})
    assert spawn.child_ids() == []
    # A bare process (or a fork handed out by the host) gives ports no Svit context.
    bare = agent.fork_process("svit://local/tests/bare")
    with pytest.raises(ScriptFailed, match="spawn requires a Svit host"):
        bare.exec_inline(script, {"id": "svit://local/tests/c2", "task": "x"})


def test_model_spawns_a_child_through_the_exec_tool():
    child_reasoner = ScriptedReasoner(["child says hi"])
    spawn_source = '(define (main input) (port-call "spawn" input))'
    parent_reasoner = ScriptedReasoner(
        [
            tool("exec", source=spawn_source, input={"id": "svit://local/tests/kid", "task": "Say hi."}),
            lambda conversation: "child replied: " + json.loads(conversation[-1].text)["output"]["response"],
        ]
    )
    agent = Svit.builder(ADDRESS).ports(Ports().port("spawn", SpawnPort(child_reasoner))).reasoner(parent_reasoner).build()
    replies = agent.outbox()
    agent.inbox().send("Delegate a greeting.")
    agent.block()
    assert replies.recv(timeout=1).text == "child replied: child says hi"
    assert agent.child_ids() == ["svit://local/tests/kid"]
    # The parent's pending item (still unacknowledged during the spawn) is not the child's.
    child = Process.restore(agent.child_snapshot("svit://local/tests/kid"))
    assert child.read("/inbox") == []
    assert child_reasoner.requests[0][1][0].text == "Say hi."


def test_acknowledgement_conflict_fails_the_turn_without_a_reply():
    holder = {}

    def meddle(conversation):
        # Someone else changes the committed inbox head while the turn runs.
        process = holder["agent"].process
        process.acknowledge_inbox(process.inbox_front())
        process.enqueue_inbox(Message.user("replacement").to_json())
        return "answer"

    agent = make(ScriptedReasoner([meddle, "second answer"]))
    holder["agent"] = agent
    replies = agent.outbox()
    agent.inbox().send("original")
    agent.block()  # the conflicted turn is not counted against anything: the new head is next
    assert [m.text for m in drain(replies)] == ["second answer"]  # never "answer"
    failed = [e for e in agent.recent_events(10) if e.type == "turn.failed"]
    assert len(failed) == 1 and failed[0].data["failure"]["code"] == "inbox_conflict"
    assert agent.read("/inbox") == [] and agent.read("/thread/turns") is None


def test_design_snippet_order_send_then_subscribe():
    """DESIGN.md §3 subscribes to the outbox after sending; a fast reply is not lost."""
    agent = make(ScriptedReasoner(["Remembered."]))
    agent.start()
    agent.inbox().send(Message.user("Remember blue."))
    agent.block()  # the reply is certainly published before anyone subscribed
    first = agent.outbox()
    assert first.recv(timeout=10).text == "Remembered."
    with pytest.raises(Closed):
        first.recv(timeout=1)
    with pytest.raises(Closed):  # handed over once, not replayed to every later observer
        agent.outbox().recv(timeout=1)


def test_unobserved_retention_is_bounded_and_reports_loss():
    hub: Broadcast[int] = Broadcast(capacity=3, retain_unobserved=True)
    for i in range(5):
        hub.publish(i)
    observer = hub.subscribe()
    with pytest.raises(Lagged) as info:
        observer.try_recv()
    assert info.value.missed == 2
    assert drain(observer) == [2, 3, 4]
    other = hub.subscribe()
    hub.publish(5)
    assert observer.try_recv() == 5 and other.try_recv() == 5


def test_a_retained_item_is_queued_before_a_racing_subscribe_can_look():
    # With nobody subscribed, a published item is kept for the next subscriber. It must
    # be queued while the hub's lock is held: otherwise a subscribe between choosing the
    # holding queue and filling it finds it empty, and the item goes to a later subscriber.
    from svit.loop.observers import Observer

    hub: Broadcast[str] = Broadcast(retain_unobserved=True)
    held_during_push = []

    class Watching(Observer[str]):
        def push(self, item: str) -> None:
            held_during_push.append(hub._lock.locked())
            super().push(item)

    hub._pending = Watching(hub._capacity)
    hub.publish("reply")
    assert held_during_push == [True]
    assert hub.subscribe().try_recv() == "reply"


def test_a_tool_tells_the_model_only_the_kind_of_a_host_exception():
    """A mount provider's OSError names a host path: the model (whose input goes to its
    provider) is told its kind, as a script is, never its text."""
    from svit.mounts.value import ValueMount

    class Denied(ValueMount):
        def stat(self, path, limits=None):
            raise PermissionError(13, "Permission denied", "/srv/private/keys.json")

    agent = (Svit.builder(ADDRESS).mount("docs", Denied("docs", {"a": 1}, False))
             .reasoner(ScriptedReasoner([])).build())
    text, ok = run_tool(agent, ToolCall("c", "read", {"path": "/mounts/docs/a"}))
    assert not ok and text == "error: internal: PermissionError"
