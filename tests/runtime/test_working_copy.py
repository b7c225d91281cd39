"""An activation's working copy costs nothing until it is written, and hashes at the commit.

A read-only activation commits the very tree it started from; an edit makes chunks whose
bytes and digests wait until something asks; a failed activation leaves every byte as it
was; and whatever sequence of writes and removes a working copy went through (with or
without hashing in between), the committed hash is the one the same edits made by host
writes give, and the one a fresh build of the final value gives (DESIGN §5.2).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from svit import Limits, Process, tree
from svit.errors import SvitError

ADDRESS = "svit://local/test/working-copy"
LIMITS = Limits(max_value_entries=100_000, max_tree_nodes=200_000)
#: Wide enough for several leaf chunks and an inner chunk above them.
WIDE = 300


def initial_memory() -> dict[str, Any]:
    """Integers and small maps (so leaves hold both raw scalars and child containers)."""
    return {f"k{i:03d}": ({"x": i, "y": str(i)} if i % 3 == 0 else i) for i in range(WIDE)}


def process(script: str = '(define (main input) (read "/memory/k001"))') -> Process:
    builder = Process.builder(ADDRESS).limits(LIMITS).library("run", script)
    for key, value in initial_memory().items():
        builder.memory(key, value)
    return builder.build()


def test_a_read_only_activation_commits_the_tree_it_started_from() -> None:
    p = process()
    root = p.root
    digest = root.hash
    activation = p.exec("/lib/run")
    assert activation.output == 1
    assert p.root is root  # not one node copied
    assert activation.root_hash == digest == p.root_hash
    assert activation.changed == []


def test_an_edit_hashes_nothing_until_the_digest_is_asked_for() -> None:
    base = tree.from_value(initial_memory(), scripts_allowed=False)
    assert base.hash  # the committed tree is hashed
    edited = tree.set_at(base, ("k003", "x"), tree.leaf_node(7))
    edited = tree.set_at(edited, ("k004",), tree.leaf_node(8))
    chunk = edited.value
    assert chunk.level >= 1, "the test needs an inner chunk"
    assert not chunk.hashed and not chunk.encoded
    assert edited.hash == tree.from_value(edited.to_value(), scripts_allowed=False).hash
    assert chunk.hashed and chunk.encoded
    assert base.value.hashed  # the base is untouched and still hashed


def test_a_committed_activation_hashes_its_root_only_when_root_hash_is_read() -> None:
    p = process('(define (main input) (do (write "/memory/k001" 41) (write "/memory/k004" 42) 0))')
    assert p.root_hash  # the starting root is hashed
    activation = p.exec("/lib/run")
    root = p.root
    memory = tree.get(root, ("memory",))
    assert memory is not None
    # Neither the commit's check of the new /memory nor the result hashed anything.
    assert not root.value.hashed and not memory.value.hashed
    expected = tree.from_value(root.to_value(), scripts_allowed=True).hash
    assert activation.root_hash == expected == p.root_hash
    assert root.value.hashed
    # Read again, equal, compared and represented like the plain record it is.
    assert activation.root_hash == expected
    same = type(activation)(activation.output, activation.logs, activation.messages, activation.version,
                            expected, activation.changed)
    assert same == activation
    assert f"root_hash={expected!r}" in repr(activation)
    with pytest.raises(AttributeError):
        activation.version = 7  # type: ignore[misc]


def test_a_failed_activation_after_writes_leaves_the_snapshot_bytes_as_they_were() -> None:
    p = process(
        '(define (main input) (do (write "/memory/k003/x" 9) (write "/memory/new" (value-map "a" 1))'
        ' (remove "/memory/k004") (write "/memory/k005" "five") (/ 1 0)))'
    )
    before = (p.version, p.root_hash, p.snapshot())
    with pytest.raises(SvitError):
        p.exec("/lib/run")
    assert (p.version, p.root_hash, p.snapshot()) == before


def test_a_rolled_back_write_inside_a_committed_activation_leaves_no_trace() -> None:
    # The writes are undone when safe-call captures the failure, then the run commits.
    p = process(
        '(define (main input) (do (safe-call (lambda (x) (do (write "/memory/k001" 100)'
        ' (write "/memory/k003/x" 5) (/ 1 x))) 0) (read "/memory/k001")))'
    )
    expected = p.root_hash
    activation = p.exec("/lib/run")
    assert activation.output == 1
    assert activation.root_hash == expected == p.root_hash
    assert activation.changed == []


# ---------------------------------------------------------------------------
# The same edits, three ways


KEYS = [f"k{i:03d}" for i in range(0, WIDE, 7)] + ["new1", "new2", "zz"]

edits = st.lists(
    st.tuples(
        st.sampled_from(["write", "write-nested", "write-map", "remove"]),
        st.sampled_from(KEYS),
        st.integers(-1000, 1000),
    ),
    min_size=1,
    max_size=25,
)


def valid_edits(ops: list[tuple[str, str, int]]) -> tuple[list[tuple[str, list[str], Any]], dict[str, Any]]:
    """The ops that apply to the memory as it is by then, as ``(op, path, value)``, and the result."""
    model = initial_memory()
    done: list[tuple[str, list[str], Any]] = []
    for op, key, number in ops:
        if op == "write":
            model[key] = number
            done.append(("write", [key], number))
        elif op == "write-map":
            model[key] = {"n": number}
            done.append(("write", [key], {"n": number}))
        elif op == "write-nested":
            if type(model.get(key)) is not dict:
                continue
            model[key]["x"] = number
            done.append(("write", [key, "x"], number))
        elif key in model:
            del model[key]
            done.append(("remove", [key], None))
    return done, model


def lisp_value(value: Any) -> str:
    if type(value) is dict:
        return "(value-map " + " ".join(f'"{k}" {lisp_value(v)}' for k, v in value.items()) + ")"
    return str(value)


def script_for(done: list[tuple[str, list[str], Any]]) -> str:
    forms = []
    for op, path, value in done:
        text = "/memory/" + "/".join(path)
        forms.append(f'(write "{text}" {lisp_value(value)})' if op == "write" else f'(remove "{text}")')
    return "(define (main input) (do " + " ".join(forms) + " 0))"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits, st.booleans())
def test_edits_through_the_working_copy_commit_to_the_host_writes_hash(
        ops: list[tuple[str, str, int]], hash_between: bool) -> None:
    done, model = valid_edits(ops)
    by_script = process(script_for(done))
    assert by_script.root.hash  # the committed tree is hashed, as after any commit
    by_script.exec("/lib/run")

    by_host = process(script_for(done))
    for op, path, value in done:
        text = "/memory/" + "/".join(path)
        if op == "write":
            by_host.write(text, value)
        else:
            by_host.remove(text)
        if hash_between:
            assert by_host.root.hash  # each intermediate tree hashed: later edits patch encoded chunks

    assert by_script.read("/memory") == model
    assert by_script.root_hash == by_host.root_hash
    memory = by_script.node_hash("/memory")
    assert memory == by_host.node_hash("/memory") == tree.from_value(model, scripts_allowed=False).hash


@settings(max_examples=40, deadline=None)
@given(edits, st.lists(st.booleans(), min_size=25, max_size=25))
def test_chunk_bytes_made_late_or_patched_equal_a_fresh_encoding(
        ops: list[tuple[str, str, int]], hash_after: list[bool]) -> None:
    done, model = valid_edits(ops)
    node = tree.from_value(initial_memory(), scripts_allowed=False)
    assert node.hash
    for (op, path, value), asked in zip(done, hash_after):
        if op == "write":
            node = tree.set_at(node, tuple(path), tree.from_value(value, scripts_allowed=False))
        else:
            node = tree.remove_at(node, tuple(path))
        if asked:
            assert node.hash
    fresh = tree.from_value(model, scripts_allowed=False)
    assert node.hash == fresh.hash
    assert node.value.data == fresh.value.data
    assert tree.node_cbor(node) == tree.node_cbor(fresh)


def test_a_container_held_twice_in_one_leaf_is_encoded_in_full() -> None:
    # Both entries hold equal maps (one digest twice): rewriting "the" reference in
    # place would be ambiguous, so the edited leaf is encoded from its entries.
    base = tree.from_value({"a": {"v": 1}, "b": {"v": 1}}, scripts_allowed=False)
    assert base.hash
    edited = tree.set_at(base, ("b", "v"), tree.leaf_node(2))
    assert edited.hash == tree.from_value({"a": {"v": 1}, "b": {"v": 2}}, scripts_allowed=False).hash
