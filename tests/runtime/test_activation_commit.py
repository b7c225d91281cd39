"""The in-memory activation commit: what it checks when only /memory can have changed,
and that what it publishes hashes as if every hash were taken at once."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from svit import Limits, Process, tree
from svit.activation import script_compiler
from svit.errors import SvitError
from svit.namespace import validate_root

EDIT = """
(define (main input)
  (let ((op (map-get input "op")))
    (do
      (if (= op "write") (write (map-get input "path") (map-get input "value")) 0)
      (if (= op "remove") (remove (map-get input "path")) 0)
      (if (= op "send") (send! "svit://local/test/peer" (map-get input "value")) 0)
      (if (= op "fail") (do (write "/memory/partial" 1) (first 1)) 0)
      0)))
"""

_KEYS = st.sampled_from(["a", "b", "c", "count"])
_SCALARS = st.one_of(st.integers(-5, 5), st.booleans(), st.none(), st.sampled_from(["", "x", "long text " * 4]))
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(["p", "q", "r"]), inner, max_size=3)),
    max_leaves=8,
)
_STEPS = st.one_of(
    st.fixed_dictionaries({"op": st.just("write"), "path": _KEYS.map(lambda k: f"/memory/{k}"), "value": _VALUES}),
    st.fixed_dictionaries({"op": st.just("remove"), "path": _KEYS.map(lambda k: f"/memory/{k}")}),
    st.fixed_dictionaries({"op": st.just("send"), "value": _SCALARS}),
    st.fixed_dictionaries({"op": st.just("fail")}),
)


def editor(address: str, limits: Limits | None = None) -> Process:
    builder = Process.builder(address).memory("count", 0).library("edit", EDIT)
    return (builder.limits(limits) if limits is not None else builder).build()


def state(p: Process) -> tuple[int, str, bytes]:
    return p.version, p.root_hash, p.snapshot()


def run(p: Process, step: dict[str, Any]) -> bool:
    try:
        p.exec("/lib/edit", step)
    except SvitError:
        return False
    return True


@given(steps=st.lists(_STEPS, min_size=1, max_size=12))
@settings(max_examples=40, deadline=None)
def test_hashes_taken_late_equal_hashes_taken_at_every_commit(steps: list[dict[str, Any]]) -> None:
    # One process is hashed (and snapshotted) after every activation, the other only at
    # the end: the chunks of the second are encoded and hashed once, from a long chain of
    # edits, and must come out exactly as the first's and as a tree built afresh.
    eager, late = editor("svit://local/test/eager"), editor("svit://local/test/eager")
    for step in steps:
        assert run(eager, step) == run(late, step)
        eager.snapshot()
        assert eager.root_hash == tree.from_value(eager.root.to_value(), scripts_allowed=True).hash
    assert state(late) == state(eager)
    assert late.node_hash("/memory") == eager.node_hash("/memory")


@given(steps=st.lists(_STEPS, min_size=1, max_size=12))
@settings(max_examples=40, deadline=None)
def test_a_failed_activation_leaves_version_root_and_snapshot_bytes_as_they_were(steps: list[dict[str, Any]]) -> None:
    # Tight limits, so writes and sends run into the whole tree's size, a value's size or
    # the outbox's, besides the script's own failure; every commit made is fully valid.
    limits = Limits(max_tree_nodes=75, max_value_entries=20, max_text_bytes=700)
    p = editor("svit://local/test/failing", limits)
    for step in steps:
        before = state(p)
        if run(p, step):
            assert p.version == before[0] + 1
            validate_root(p.root, p.address, limits, script_compiler(limits))
        else:
            assert state(p) == before


def test_a_memory_write_past_the_whole_trees_size_fails_and_changes_nothing() -> None:
    # The commit of a /memory-only change still checks the whole tree's node count.
    p = editor("svit://local/test/tree-size", Limits(max_tree_nodes=60))
    assert run(p, {"op": "write", "path": "/memory/a", "value": [1, 2]})
    before = state(p)
    with pytest.raises(SvitError, match="process tree nodes"):
        p.exec("/lib/edit", {"op": "write", "path": "/memory/b", "value": list(range(9))})
    assert state(p) == before


def test_a_script_write_past_the_librarys_text_bytes_fails_though_memory_is_untouched() -> None:
    # Each script fits max_text_bytes, the two together do not: /lib changed, so the commit
    # checks /lib as a whole, not /memory alone.
    source = '(define (main input) "' + "x" * 300 + '")'
    one = len(EDIT.encode()) + len("edit") + len(source) + len("one")  # /lib's text bytes with one script more
    p = editor("svit://local/test/lib-text", Limits(max_text_bytes=one + 100))
    assert run(p, {"op": "write", "path": "/lib/one", "value": {"source": source}})
    before = state(p)
    with pytest.raises(SvitError, match="maximum text bytes"):
        p.exec("/lib/edit", {"op": "write", "path": "/lib/two", "value": {"source": source}})
    assert state(p) == before


def test_a_send_past_the_outboxs_entries_fails_though_memory_is_untouched() -> None:
    # Messages change /system/outbox: the commit checks it, not /memory alone.
    p = editor("svit://local/test/outbox", Limits(max_value_entries=12))
    sent = 0
    with pytest.raises(SvitError, match="maximum value entries"):
        for _ in range(12):
            p.exec("/lib/edit", {"op": "send", "value": 1})
            sent += 1
    assert 0 < sent < 12
    assert len(p.outbox()) == sent


def test_an_in_memory_activation_publishes_what_a_recording_sink_would_see() -> None:
    # Without a sink no transition is described; with one, each activation's transition
    # is the committed root, version and mutations, and the two processes stay equal.
    seen: list[Any] = []

    class Recorder:
        def commit(self, transition: Any) -> None:
            seen.append(transition)

        def effects_guard(self) -> Any:
            raise AssertionError("no external effects here")

    plain = editor("svit://local/test/sink")
    recorded = Process(plain.address, plain.root, plain.version, plain.limits, sink=Recorder())
    for by in (1, 5, -2):
        step = {"op": "write", "path": "/memory/count", "value": by}
        a, b = plain.exec("/lib/edit", step), recorded.exec("/lib/edit", step)
        assert (a.version, a.root_hash, a.changed) == (b.version, b.root_hash, b.changed)
        assert (seen[-1].version_after, seen[-1].root_after.hash) == (recorded.version, plain.root_hash)
        assert [m.path for m in seen[-1].mutations] == ["/memory/count"]
    assert state(plain)[:2] == state(recorded)[:2]
