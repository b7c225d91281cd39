"""Chunked containers: one tree per content, bounded chunks, O(log n) change, stored chunks that verify."""

from __future__ import annotations

import random
import zlib

import blake3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from svit import Process, cbor, tree
from svit._tree import chunks
from svit._tree.node import leaves
from svit.limits import Limits

KEYS = st.text(st.characters(blacklist_categories=("Cs",)), max_size=4) | st.integers(0, 3000).map(lambda i: f"k{i:04d}")
VALUES = st.none() | st.integers(-5, 5) | st.text(max_size=3) | st.lists(st.integers(0, 3), max_size=2)


def build(value):
    return tree.from_value(value, scripts_allowed=False)


def chunk_tree(node):
    """Every chunk of a container node's own chunk tree (not of nested containers)."""
    found, stack = [], [node.value]
    while stack:
        chunk = stack.pop()
        found.append(chunk)
        if chunk.level:
            stack.extend(chunk.items)
    return found


def assert_well_formed(node):
    """Sizes within the rules; every leaf at the same depth; bounds route correctly."""
    code = node.code
    parts = chunk_tree(node)
    minimum, cap = (chunks.LEAF_MIN, chunks.LEAF_CAP) if code == tree.MAP else (1, chunks.ARRAY_LEAF)
    inner_cap = chunks.INNER_CAP if code == tree.MAP else chunks.ARRAY_INNER
    for part in parts:
        if part.level == 0:
            assert len(part.items) <= cap
        else:
            assert 1 <= len(part.items) <= inner_cap
            assert all(child.level == part.level - 1 for child in part.items)
        if part is not node.value:
            assert part.items  # only an empty container has an empty chunk, its root
        if part.level and code == tree.MAP:
            assert part.bounds == tuple(child.keys[-1] if child.level == 0 else child.bounds[-1] for child in part.items)
        elif part.level:
            assert part.bounds[-1] == part.size == sum(child.size for child in part.items)
    assert node.value.level == 0 or len(node.value.items) > 1  # no root with a single child
    if code == tree.MAP:
        keys = node.child_names()
        assert keys == sorted(keys) and len(set(keys)) == len(keys)
        for key in keys:
            assert chunks.map_find(node.value, key) is not chunks.ABSENT
    last_leaf = list(leaves(node.value))[-1]
    assert all(len(part.items) >= minimum for part in leaves(node.value) if part is not last_leaf)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), KEYS, VALUES), max_size=160), st.randoms(use_true_random=False))
def test_a_map_has_one_tree_whatever_history_built_it(operations, rng):
    plain: dict = {}
    node = build({"nested": {}})
    for step, (is_set, key, value) in enumerate(operations):
        inner = tree.get(node, ("nested",))
        if is_set or key not in plain:
            plain[key] = value
            inner = tree.set_at(inner, (key,), build(value))
        else:
            del plain[key]
            inner = tree.remove_at(inner, (key,))
        node = tree.set_at(node, ("nested",), inner)
        if step % 7 == 0:  # encodings kept on unchanged containers stay true after edits
            assert tree.node_cbor(node) == cbor.encode({"nested": dict(sorted(plain.items()))})
    assert tree.node_cbor(node) == cbor.encode({"nested": dict(sorted(plain.items()))})
    node = tree.get(node, ("nested",))
    fresh = build(plain)
    assert node.digest == fresh.digest
    assert node.to_value() == dict(sorted(plain.items()))
    assert (node.count, node.text, node.height, node.size) == (fresh.count, fresh.text, fresh.height, fresh.size)
    # Inserted in another order, one at a time: the same tree again.
    shuffled = list(plain.items())
    rng.shuffle(shuffled)
    other = build({})
    for key, value in shuffled:
        other = tree.set_at(other, (key,), build(value))
    assert other.digest == fresh.digest
    assert_well_formed(node)


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "set", "remove", "front"]), st.integers(0, 10**6), VALUES), max_size=200))
def test_an_array_has_one_tree_whatever_history_built_it(operations):
    plain: list = []
    node = build([])
    for operation, where, value in operations:
        if operation == "append" or not plain:
            plain.append(value)
            node = tree.append_items(node, [build(value)])
        elif operation == "set":
            index = where % len(plain)
            plain[index] = value
            node = tree.set_at(node, (str(index),), build(value))
        else:
            index = 0 if operation == "front" else where % len(plain)
            del plain[index]
            node = tree.remove_at(node, (str(index),))
    assert node.digest == build(plain).digest
    assert node.to_value() == plain
    assert_well_formed(node)


def test_wide_containers_are_trees_of_chunks_of_the_expected_size():
    node = build({f"note-{i:06d}": i for i in range(20_000)})
    sizes = [len(part.items) for part in leaves(node.value)]
    assert 28 <= sum(sizes) / len(sizes) <= 64
    # Past LEAF_SOFT entries a cut comes one key in eight: long chunks are rare.
    assert sum(size > chunks.LEAF_SOFT + 40 for size in sizes) <= len(sizes) // 100
    assert node.value.level >= 2
    assert_well_formed(node)
    array = build(list(range(20_000)))
    assert [len(part.items) for part in leaves(array.value)][:-1] == [chunks.ARRAY_LEAF] * (len(list(leaves(array.value))) - 1)
    assert_well_formed(array)


def _keys_where(count: int, wanted) -> list[str]:
    """``count`` keys whose CRC-32 satisfies ``wanted`` (what an adversary can grind for)."""
    found, i = [], 0
    while len(found) < count:
        key = f"h{i}"
        if wanted(zlib.crc32(key.encode())):
            found.append(key)
        i += 1
    return found


def test_keys_that_never_allow_a_cut_still_make_bounded_chunks():
    # Keys chosen so that none may end a chunk: every chunk is cut at the cap.
    hostile = _keys_where(5_000, lambda code: code & 7 != 7)
    node = build(dict.fromkeys(hostile, 1))
    sizes = [len(part.items) for part in leaves(node.value)]
    assert max(sizes) == chunks.LEAF_CAP and len(sizes) == -(-5_000 // chunks.LEAF_CAP)
    assert_well_formed(node)
    # An insert into such a run re-cuts at most the chunks up to the run's end, never more
    # than the container holds, and the result is the canonical tree.
    updated = tree.set_at(node, (hostile[0] + "!",), build(2))
    assert updated.digest == build(dict.fromkeys([*hostile, hostile[0] + "!"], 1) | {hostile[0] + "!": 2}).digest


def test_keys_that_all_allow_a_cut_make_chunks_of_the_minimum_size():
    eager = _keys_where(2_000, lambda code: code & 31 == 31)
    node = build(dict.fromkeys(eager, None))
    sizes = [len(part.items) for part in leaves(node.value)]
    assert set(sizes[:-1]) == {chunks.LEAF_MIN}
    assert_well_formed(node)


def _fresh_chunks(new, old) -> int:
    known = {digest for digest, _ in tree.new_chunks(old.value, lambda _d: False)}
    return sum(1 for _ in tree.new_chunks(new.value, known.__contains__))


@pytest.mark.parametrize("width", [1_000, 30_000])
def test_one_write_into_a_wide_map_makes_a_few_new_chunks(width):
    node = build({f"k{i:06d}": i for i in range(width)})
    height = node.value.level + 1
    rng = random.Random(width)
    for _ in range(40):
        key = f"k{rng.randrange(width):06d}"
        assert _fresh_chunks(tree.set_at(node, (key,), build(-1)), node) == height  # one chunk per level
        inserted = tree.set_at(node, (key + "x",), build(-1))
        assert _fresh_chunks(inserted, node) <= 3 * (inserted.value.level + 1)
        assert _fresh_chunks(tree.remove_at(node, (key,)), node) <= 3 * height


def test_one_write_into_a_wide_array_makes_one_chunk_per_level():
    node = build(list(range(30_000)))
    height = node.value.level + 1
    for index in (0, 777, 29_999):
        assert _fresh_chunks(tree.set_at(node, (str(index),), build("x")), node) == height
    assert _fresh_chunks(tree.append_items(node, [build(1)]), node) <= height + 1


def test_every_stored_chunk_verifies_and_names_its_children():
    node = build({"wide": {f"k{i}": [i, {"x": str(i)}] for i in range(500)}, "list": list(range(100))})
    stored = dict(tree.new_chunks(node.value, lambda _d: False))
    reached, stack = set(), [node.digest]
    while stack:
        digest = stack.pop()
        if digest in reached:
            continue
        reached.add(digest)
        stack.extend(tree.verify_chunk(digest, stored[digest]))
    assert reached == set(stored)
    digest, data = next(iter(stored.items()))
    for position in range(0, len(data), max(1, len(data) // 16)):
        damaged = bytearray(data)
        damaged[position] ^= 0x01
        with pytest.raises(tree.ChunkError):
            tree.verify_chunk(digest, bytes(damaged))
    forged = b"\x82aM\x41\x00"  # an inner chunk whose digests are one byte long
    with pytest.raises(tree.ChunkError, match="malformed"):
        tree.verify_chunk(blake3.blake3(forged).digest(), forged)


def test_a_scalar_hash_is_blake3_of_its_cbor_and_computed_when_asked():
    import cbor2

    for value in (None, True, 7, 1.5, "é", -(2**63)):
        node = tree.leaf_node(value)
        assert node.digest == blake3.blake3(cbor2.dumps(value)).digest()
    assert tree.leaf_node(0.0).digest == tree.leaf_node(-0.0).digest
    assert tree.leaf_node(1).digest != tree.leaf_node(1.0).digest


LIMITS = Limits(max_tree_nodes=1_000_000, max_value_entries=1_000_000, max_tree_text_bytes=64 * 1024 * 1024)


def test_unchanged_subtrees_keep_their_hashes_across_commits_forks_snapshots_and_restores():
    memory = {"wide": {f"k{i:05d}": i for i in range(5_000)}, "other": {"a": [1, 2, 3]}}
    process = Process.builder("svit://local/tests/chunks").limits(LIMITS).memory("wide", memory["wide"]).memory(
        "other", memory["other"]).build()
    assert process.root_hash == process.node_hash("/")
    wide, other = process.node_hash("/memory/wide"), process.node_hash("/memory/other")
    process.write("/memory/wide/k00042", -1)
    assert process.node_hash("/memory/other") == other
    assert process.node_hash("/memory/wide") != wide
    process.write("/memory/wide/k00042", 42)
    assert process.node_hash("/memory/wide") == wide
    child = process.fork("svit://local/tests/chunks-child")
    assert child.node_hash("/memory/wide") == wide and child.node_hash("/memory/other") == other
    restored = Process.restore(process.snapshot())
    assert restored.root_hash == process.root_hash == restored.node_hash("/")
    assert restored.node_hash("/memory/wide") == wide
    assert restored.snapshot() == process.snapshot()


def test_the_rank_reads_the_crc_of_the_key():
    for key in ("a", "note-000001", "é", ""):
        code = zlib.crc32(key.encode())
        expected = 0
        if code & 31 == 31:
            expected, code = 1, code >> 5
            while code & 7 == 7 and expected < 10:
                expected, code = expected + 1, code >> 3
        assert chunks.key_rank(key) == expected


SMALL_VALUES = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-2, 2) | st.text(max_size=3) | \
    st.lists(st.integers(0, 3), max_size=2) | st.dictionaries(st.text(max_size=2), st.integers(0, 3), max_size=2)


def aggregates(chunk):
    return (chunk.code, chunk.level, chunk.keys, chunk.size, chunk.count, chunk.text, chunk.height,
            chunk.max_script, chunk.rank, chunk.nested)


@given(st.dictionaries(st.text(max_size=3), SMALL_VALUES, min_size=1, max_size=7), st.data())
@settings(max_examples=200, deadline=None)
def test_replacing_an_entry_of_a_one_leaf_map_equals_building_the_result(mapping, data):
    # One-leaf maps (records, the root's sections) take a shortcut when a key is replaced:
    # its chunk must be the one building the edited map makes, aggregates and bytes alike.
    node = build(mapping)
    assert node.value.level == 0
    key = data.draw(st.sampled_from(sorted(mapping)))
    value = data.draw(SMALL_VALUES)
    edited = tree.set_at(node, (key,), build(value))
    expected = build({**mapping, key: value})
    assert aggregates(edited.value) == aggregates(expected.value)
    assert edited.value.items == expected.value.items
    assert edited.digest == expected.digest and edited.value.data == expected.value.data
    assert (edited.count, edited.text, edited.height, edited.max_script) == \
        (expected.count, expected.text, expected.height, expected.max_script)
    assert node.to_value() == mapping  # the original is untouched
