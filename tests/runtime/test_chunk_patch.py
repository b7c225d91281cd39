"""Chunk bytes made by rewriting one reference of an encoded chunk, and the commit walk
that visits only the rewritten child: the same bytes, digests and new chunks as a fresh
build and a full walk."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from svit import tree
from svit._tree.node import Chunk, Node
from svit.values import Script

SCALARS = (st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6)
           | st.builds(Script, st.text(max_size=4), st.text(max_size=4)))
INNER = st.dictionaries(st.text(max_size=3), SCALARS, max_size=4) | st.lists(SCALARS, max_size=4)
ITEMS = SCALARS | INNER
#: Outer keys from a small set, so a container may be cut into several chunks (up to
#: 300 entries) and an edit may insert, replace or remove.
KEYS = st.integers(0, 299).map(lambda i: f"k{i:03d}")
#: Containers of several chunks: many entries made up from a size, a few drawn.
BIG_MAPS = st.builds(lambda n, drawn: {**{f"k{i:03d}": i * 7 for i in range(0, 300, 300 // n)}, **drawn},
                     st.integers(20, 300), st.dictionaries(KEYS, ITEMS, max_size=5))
BIG_ARRAYS = st.builds(lambda n, drawn: [*range(n), *drawn], st.integers(33, 600), st.lists(ITEMS, max_size=5))
CONTAINERS = (st.dictionaries(KEYS, ITEMS, max_size=300) | st.lists(ITEMS, max_size=300)
              | BIG_MAPS | BIG_ARRAYS)


def build(value: Any) -> Node:
    return tree.from_value(value, scripts_allowed=True)


def all_chunks(root: Chunk) -> dict[bytes, bytes]:
    return dict(tree.new_chunks(root, lambda _digest: False))


def edit(value: Any, node: Node, choice: int, op: str, item: Any) -> tuple[Any, Node]:
    """One edit at a position picked by ``choice``: set/replace a nested entry (the
    container's chunks are rewritten in place), replace or remove an entry, or insert one."""
    if isinstance(value, dict):
        keys = sorted(value)
        if op == "insert" or not keys:
            key = f"k{choice % 300:03d}"
            value = {**value, key: item}
            return value, tree.set_at(node, (key,), build(item))
        key = keys[choice % len(keys)]
        current = value[key]
    else:
        if op == "insert" or not value:
            return [*value, item], tree.append_items(node, [build(item)])
        key = str(choice % len(value))
        current = value[int(key)]
    if op == "remove":
        value = {k: v for k, v in value.items() if k != key} if isinstance(value, dict) else \
            [v for i, v in enumerate(value) if i != int(key)]
        return value, tree.remove_at(node, (key,))
    if op == "nested" and isinstance(current, dict):
        inner = {**current, "x": item if not isinstance(item, (dict, list)) else 0}
        new_value = {**value, key: inner} if isinstance(value, dict) else \
            [inner if i == int(key) else v for i, v in enumerate(value)]
        return new_value, tree.set_at(node, (key, "x"), build(inner["x"]))
    new_value = {**value, key: item} if isinstance(value, dict) else \
        [item if i == int(key) else v for i, v in enumerate(value)]
    return new_value, tree.set_at(node, (key,), build(item))


OPS = st.tuples(st.integers(0, 10_000), st.sampled_from(["insert", "replace", "remove", "nested", "nested"]), ITEMS)


@settings(max_examples=80, deadline=None)
@given(CONTAINERS, st.lists(OPS, min_size=1, max_size=6), st.lists(st.booleans(), min_size=6, max_size=6))
def test_patched_chunks_and_the_short_walk_equal_a_fresh_build_and_a_full_walk(
        value: Any, ops: list[tuple[int, str, Any]], hashed: list[bool]) -> None:
    node = build({"memory": value, "other": {"a": [1, 2], "b": "x"}})
    assert node.hash
    stored = all_chunks(node.value)
    for (choice, op, item), hash_now in zip(ops, hashed):
        value, memory = edit(value, tree.get(node, ("memory",)), choice, op, item)
        node = tree.set_at(node, ("memory",), memory)
        if not hash_now:
            continue
        fresh = build({"memory": value, "other": {"a": [1, 2], "b": "x"}})
        assert node.hash == fresh.hash
        assert node.value.data == fresh.value.data
        new = dict(tree.new_chunks(node.value, stored.__contains__, stored.__contains__))
        assert new == {d: b for d, b in all_chunks(fresh.value).items() if d not in stored}
        stored.update(new)
    assert tree.node_cbor(node) == tree.node_cbor(build({"memory": value, "other": {"a": [1, 2], "b": "x"}}))


def test_the_commit_walk_asks_only_about_the_rewritten_child() -> None:
    siblings = {f"s{i}": {"v": i} for i in range(8)}
    node = build({**siblings, "memory": {"count": 0}})
    assert node.hash
    stored = set(all_chunks(node.value))
    edited = tree.set_at(node, ("memory", "count"), tree.leaf_node(1))
    asked: list[bytes] = []

    def known(digest: bytes) -> bool:
        asked.append(digest)
        return digest in stored

    new = dict(tree.new_chunks(edited.value, known, stored.__contains__))
    memory = tree.get(edited, ("memory",))
    assert set(new) == {edited.value.digest, memory.value.digest}
    # The root and the new /memory chunk: no unchanged sibling is looked up.
    assert asked == [edited.value.digest, memory.value.digest]
    # Without the base known whole, every child is looked up.
    asked.clear()
    assert dict(tree.new_chunks(edited.value, known, lambda _digest: False)) == new
    assert len(asked) == 2 + len(siblings)


def test_a_reference_rewritten_again_is_found_where_it_was_written() -> None:
    # After "a" takes b's map, that map's reference occurs twice in the leaf: a search
    # cannot tell the two apart, but the entry rewritten last is where it was written.
    base = build({"a": {"v": 1}, "b": {"v": 2}})
    assert base.hash
    same = tree.set_at(base, ("a",), tree.get(base, ("b",)))
    assert same.hash
    assert same.value.patch is not None
    edited = tree.set_at(same, ("a",), build({"v": 3}))
    assert edited.hash == build({"a": {"v": 3}, "b": {"v": 2}}).hash
    assert edited.value.data == build({"a": {"v": 3}, "b": {"v": 2}}).value.data
    patch = edited.value.patch
    assert patch is not None and patch[:2] == same.value.patch[:2]


def test_a_scalar_rewritten_in_an_encoded_leaf_is_spliced_into_its_bytes() -> None:
    entries = {f"k{i:02d}": i for i in range(20)}
    base = build(entries)
    assert base.hash
    edited = base
    for value in (7, 300, 2**40, -1, 1.5, "text", None, True, Script("(+ 1 2)", "doc"), {"m": 1}, 5):
        # The same entry again and again, its encoding growing and shrinking.
        edited = tree.set_at(edited, ("k05",), build(value))
        entries["k05"] = value
        fresh = build(entries)
        assert edited.hash == fresh.hash
        assert edited.value.data == fresh.value.data
        assert edited.value.patch is not None


def test_an_ambiguous_scalar_is_encoded_in_full() -> None:
    # "a": 1 is the bytes 61 61 01, which the text of "b" also holds: no splice.
    base = build({"a": 1, "b": "aa\x01"})
    assert base.hash
    edited = tree.set_at(base, ("a",), build(2))
    assert edited.value.data == build({"a": 2, "b": "aa\x01"}).value.data
    assert edited.value.patch is None
    ones = build([1, 1, 1])
    assert ones.hash
    edited = tree.set_at(ones, ("1",), build(9))
    assert edited.value.data == build([1, 9, 1]).value.data
    assert edited.value.patch is None
