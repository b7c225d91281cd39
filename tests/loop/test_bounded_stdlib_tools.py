"""Reference §13 item 78: bounded jq and search reached through the model's exec tool."""

from __future__ import annotations

from svit import Svit
from svit.reasoners import ScriptedReasoner

tool = ScriptedReasoner.tool


def test_item78_inline_jq_and_search_bounds_reach_the_model_as_errors() -> None:
    long_pattern = "a" * (5 * 1024)
    reasoner = ScriptedReasoner(
        [
            [
                tool("exec", source='(define (main input) (jq "def f: f; f" input))', input={"x": 1}),
                tool("exec", source=f'(define (main input) (search "/memory/text" "{long_pattern}"))', input=None),
                tool("exec", source='(define (main input) (jq ".x" input))', input={"x": 1}),
            ],
            "done",
        ]
    )
    agent = Svit.builder("svit://local/tests/item78").memory("text", "alpha\nbeta").reasoner(reasoner).build()
    replies = agent.outbox()
    agent.inbox().send("probe the bounds")
    agent.block()
    assert replies.recv(timeout=5).text == "done"
    results = [m.text for m in agent.messages() if m.role == "tool"]
    assert results[0].startswith("error: script_failed") and "unbounded construct" in results[0]
    assert results[1].startswith("error: script_failed") and "pattern limit exceeded" in results[1]
    assert not results[2].startswith("error") and "[1]" in results[2].replace(" ", "")  # control: a bounded filter works
