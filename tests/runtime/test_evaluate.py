"""``evaluate``: one-off source run read-only on Process, a durable handle and Svit.

It returns the output and logs with the version unchanged; every change it asks for (a
write or remove of /memory, /lib or a mount, a send!, a port call) is refused by name
before it happens, and no safe helper can turn the refusal into a success.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from svit import Mount, Ports, Process, Svit
from svit.errors import InvalidValue, ReadOnlyEvaluation, ScriptFailed
from svit.reasoners import ScriptedReasoner
from svit.store import ProcessStore
from tests.bounds import unchanged

ADDR = "svit://local/test/evaluate"
READER = "(define (main input) (value-get (read \"/memory/box\") input))"
WRITER = "(define (main input) (write \"/memory/n\" input))"


def main(body: str) -> str:
    return f"(define (main input) {body})"


def process(**ports: Any) -> Process:
    builder = (
        Process.builder(ADDR).memory("n", 1).memory("box", {"a": [1, 2]})
        .library("reader", READER).library("writer", WRITER)
    )
    if ports:
        registry = Ports()
        for name, port in ports.items():
            registry = registry.port(name, port)
        builder = builder.ports(registry)
    return builder.build()


def test_evaluate_returns_output_and_logs_and_commits_nothing() -> None:
    p = process()
    with unchanged(p) as before:
        result = p.evaluate(main('(do (log-info! "seen" input) (+ input (read "/memory/n")))'), 41)
    assert result.output == 42 and result.logs == [{"message": "seen", "fields": 41}]
    assert result.committed is False and result.changed == [] and result.messages == []
    assert result.version == before.version == 0 and result.root_hash == p.root_hash


def test_a_nested_exec_of_a_reading_script_works() -> None:
    p = process()
    with unchanged(p):
        assert p.evaluate(main('(exec "/lib/reader" "/a/1")')).output == 2


@pytest.mark.parametrize(("body", "operation"), [
    ('(write "/memory/n" 2)', "write /memory/n"),
    ('(remove "/memory/box")', "remove /memory/box"),
    ('(write "/lib/extra" (value-map "source" "(define (main input) 1)"))', "write /lib/extra"),
    ('(remove "/lib/reader")', "remove /lib/reader"),
    ('(send! "svit://local/test/other" 1)', "send! svit://local/test/other"),
    ('(exec "/lib/writer" 5)', "write /memory/n"),
    ('(safe-call (lambda () (write "/memory/n" 3)))', "write /memory/n"),
    ('(result-ok? (dispatch-safe (dispatch-table "w" (lambda (x) (remove "/memory/n"))) "w" 1))', "remove /memory/n"),
])
def test_every_change_is_refused_by_name_and_nothing_moves(body: str, operation: str) -> None:
    p = process()
    with unchanged(p):
        with pytest.raises(ReadOnlyEvaluation) as caught:
            p.evaluate(main(body))
    assert caught.value.code == "read_only_evaluation"
    assert caught.value.message == f"read-only evaluation refused: {operation}"
    # The same source commits when run as an activation (the refusal is only evaluate's).
    p.exec_inline(main(body))
    assert p.version == 1


def test_a_port_is_never_called() -> None:
    calls: list[Any] = []

    def port(value: Any) -> Any:
        calls.append(value)
        return value

    p = process(echo=port)
    with unchanged(p):
        with pytest.raises(ReadOnlyEvaluation, match="port-call /ports/echo"):
            p.evaluate(main('(port-call "echo" 1)'))
    assert calls == []
    assert p.exec_inline(main('(port-call "echo" 7)')).output == 7 and calls == [7]


def test_a_writable_mount_is_not_written(tmp_path: Path) -> None:
    p = Process.builder(ADDR).mount("files", Mount.writable_folder(tmp_path)).build()
    with unchanged(p):
        with pytest.raises(ReadOnlyEvaluation, match="write /mounts/files/new.txt"):
            p.evaluate(main('(write "/mounts/files/new.txt" "text")'))
    assert list(tmp_path.iterdir()) == []


def test_hooks_hear_nothing_of_an_evaluation() -> None:
    heard: list[Any] = []

    class Hook:
        def before_activation(self, request: Any) -> Any:
            heard.append(request)
            return request

        def after_activation(self, event: Any) -> None:
            heard.append(event)

    p = Process.builder(ADDR).hook(Hook()).build()
    assert p.evaluate(main("1")).output == 1 and heard == []


def test_bad_source_fails_like_exec_inline() -> None:
    p = process()
    with unchanged(p):
        with pytest.raises(InvalidValue):
            p.evaluate(5)  # type: ignore[arg-type]
        with pytest.raises(ScriptFailed, match="must define main"):
            p.evaluate("(+ 1 2)")
        with pytest.raises(ScriptFailed, match="unexpected"):
            p.evaluate(main("1))"))


def test_a_durable_handle_evaluates_without_touching_the_store(tmp_path: Path) -> None:
    store = ProcessStore.open(tmp_path / "store")
    try:
        h = store.create(process())
        records = store.record_digests()
        with unchanged(h):
            assert h.evaluate(main('(read "/memory/box")')).output == {"a": [1, 2]}
            with pytest.raises(ReadOnlyEvaluation, match="write /memory/n"):
                h.evaluate(main('(write "/memory/n" 9)'))
        assert store.record_digests() == records and h.read("/memory/n") == 1
        assert store.resume(ADDR).version == h.version == 0
    finally:
        store.close()


def test_svit_refuses_a_port_call_in_an_evaluation() -> None:
    calls: list[Any] = []
    agent = Svit.resume(process()).reasoner(ScriptedReasoner([])).ports(
        Ports().port("echo", lambda value: calls.append(value) or value)).build()
    with unchanged(agent):
        assert agent.evaluate(main('(read "/memory/n")')).output == 1
        with pytest.raises(ReadOnlyEvaluation, match="port-call /ports/echo"):
            agent.evaluate(main('(port-call "echo" 1)'))
    assert calls == []


@settings(max_examples=25, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
))
def test_evaluate_reads_what_read_reads(value: Any) -> None:
    p = Process.builder(ADDR).memory("v", value).build()
    with unchanged(p):
        assert p.evaluate(main('(read "/memory/v")')).output == p.read("/memory/v") == value
