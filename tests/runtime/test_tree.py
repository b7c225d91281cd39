"""The immutable tree: hashes, aggregates, path-copying updates, validation."""

import zlib

import blake3
import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from svit import tree
from svit.errors import InvalidPath, InvalidValue, ResourceLimitExceeded
from svit.limits import Limits
from svit.values import Script, values_equal

I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
KEY = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
SCALARS = (
    st.none() | st.booleans() | I64 | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_categories=("Cs",)), max_size=10)
)
PLAIN = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(KEY, inner, max_size=6),
    max_leaves=40,
)
CONTAINER = st.dictionaries(KEY, PLAIN, max_size=8)


def _crc_rank(key: str) -> int:
    code = zlib.crc32(key.encode())
    if code & 31 != 31:
        return 0
    rank, code = 1, code >> 5
    while code & 7 == 7 and rank < 10:
        rank, code = rank + 1, code >> 3
    return rank


def _cuts(ranks: list[int], level: int, minimum: int, cap: int, eager: list[bool] | None = None) -> list[list[int]]:
    """Positions grouped into chunks, written as the rule reads: scan left to right, cut
    after an item whose rank exceeds ``level`` once the chunk holds ``minimum``, after an
    ``eager`` item once it holds 48 (map leaves), or at ``cap``."""
    groups: list[list[int]] = [[]]
    for position, rank in enumerate(ranks):
        groups[-1].append(position)
        size = len(groups[-1])
        if (size >= minimum and rank > level) or size == cap or (eager is not None and size >= 48 and eager[position]):
            groups.append([])
    return [group for group in groups if group]


def reference_hash(value) -> bytes:
    """DESIGN §5.2 written out directly, independent of the tree's own code: chunk the
    entries, BLAKE3 each chunk's CBOR, a container's digest is its root chunk's."""
    H = lambda b: blake3.blake3(b).digest()
    t = type(value)
    if t not in (list, dict):
        if t is float and value == 0:
            value = 0.0
        if t is Script:
            return H(cbor2.dumps(cbor2.CBORTag(0x53564954, [value.source, value.documentation])))
        return H(cbor2.dumps(value))

    def item(v):
        if type(v) in (list, dict):
            return cbor2.CBORTag(0x53564E44, reference_hash(v))
        if type(v) is Script:
            return cbor2.CBORTag(0x53564954, [v.source, v.documentation])
        return 0.0 if type(v) is float and v == 0 else v

    if t is dict:
        keys = sorted(value)
        groups = _cuts([_crc_rank(k) for k in keys], 0, 8, 128, [zlib.crc32(k.encode()) & 7 == 7 for k in keys])
        level = [(H(cbor2.dumps(["m", {keys[i]: item(value[keys[i]]) for i in g}])), _crc_rank(keys[g[-1]])) for g in groups] if keys else [(H(cbor2.dumps(["m", {}])), 0)]
        height = 1
        while len(level) > 1:
            groups = _cuts([rank for _, rank in level], height, 4, 64)
            level = [(H(cbor2.dumps(["M", b"".join(level[i][0] for i in g)])), level[g[-1]][1]) for g in groups]
            height += 1
        return level[0][0]
    groups = [list(range(i, min(i + 32, len(value)))) for i in range(0, len(value), 32)] or [[]]
    digests = [H(cbor2.dumps(["a", [item(value[i]) for i in g]])) for g in groups]
    while len(digests) > 1:
        digests = [H(cbor2.dumps(["A", b"".join(digests[i:i + 16])])) for i in range(0, len(digests), 16)]
    return digests[0]


def reference_aggregates(value, depth=0):
    """(count, text, deepest depth) per reference §3.2."""
    t = type(value)
    if t is dict:
        count, text, deepest = 1, 0, depth
        for k, v in value.items():
            c, x, d = reference_aggregates(v, depth + 1)
            count, text, deepest = count + c, text + x + len(k.encode()), max(deepest, d)
        return count, text, deepest
    if t is list:
        count, text, deepest = 1, 0, depth
        for v in value:
            c, x, d = reference_aggregates(v, depth + 1)
            count, text, deepest = count + c, text + x, max(deepest, d)
        return count, text, deepest
    if t is str:
        return 1, len(value.encode()), depth
    if t is Script:
        return 1, len(value.source.encode()) + len(value.documentation.encode()), depth
    return 1, 0, depth


def build(value, scripts=False):
    return tree.from_value(value, scripts_allowed=scripts)


def check_node(node):
    value = node.to_value()
    assert node.digest == reference_hash(value)
    count, text, height = reference_aggregates(value)
    assert (node.count, node.text, node.height) == (count, text, height)


@given(PLAIN)
def test_round_trip_hash_and_aggregates(value):
    node = build(value)
    assert values_equal(node.to_value(), value)  # -0.0 is stored as 0.0, which compares equal
    check_node(node)
    assert node.hash == node.digest.hex() and len(node.hash) == 64


def test_kinds_hash_differently():
    assert build(1).hash != build(1.0).hash
    assert build(True).hash != build(1).hash
    assert build(0.0).hash == build(-0.0).hash
    assert build({"a": 1}).hash != build({"a": 1.0}).hash
    assert build([]).hash != build({}).hash


def test_to_value_is_fresh():
    node = build({"a": [1, {"b": "x"}], "c": {"d": 1}})
    out = node.to_value()
    out["a"][1]["b"] = "changed"
    out["c"]["d"] = 2
    out["new"] = 1
    assert node.to_value() == {"a": [1, {"b": "x"}], "c": {"d": 1}}
    assert list(build({"b": 1, "a": 2, "c": 3}).to_value()) == ["a", "b", "c"]


@pytest.mark.parametrize(
    "bad, message",
    [
        (float("nan"), "numbers must be finite"),
        ({"a": [float("-inf")]}, "numbers must be finite"),
        (2**63, "outside signed 64-bit range"),
        ({"a": -(2**63) - 1}, "outside signed 64-bit range"),
        ({1: 1}, "map keys must be text"),
        ({"a": {("t",): 1}}, "map keys must be text"),
        ({"a": set()}, "unsupported value type"),
        ([object()], "unsupported value type"),
        ({"s": Script("x")}, "script records are only valid below /lib"),
        (["\udfff"], "valid Unicode"),
    ],
)
def test_from_value_rejects(bad, message):
    with pytest.raises(InvalidValue, match=message):
        build(bad)


def test_scripts_below_lib():
    node = build({"s": Script("(+ 1 2)", "doc")}, scripts=True)
    assert node.max_script == 7
    assert node.text == 1 + 7 + 3
    check_node(node)
    leaf = tree.get(node, ("s",))
    assert leaf.kind == "script" and leaf.to_value() == Script("(+ 1 2)", "doc")


def test_get():
    node = build({"a": [10, {"b": None}], "s": "x"})
    assert tree.get(node, ()).to_value() == node.to_value()
    assert tree.get(node, ("a", "0")).to_value() == 10
    assert tree.get(node, ("a", "1", "b")).kind == "null"
    assert tree.get(node, ("missing",)) is None
    assert tree.get(node, ("missing", "deeper")) is None
    assert tree.get(node, ("a", "7")) is None
    for bad in (("a", "x"), ("a", "-1"), ("a", "+1"), ("a", "١")):
        with pytest.raises(InvalidPath):
            tree.get(node, bad)
    with pytest.raises(InvalidPath):
        tree.get(node, ("s", "x"))
    with pytest.raises(InvalidPath):
        tree.get(node, ("a", "0", "x"))
    assert tree.node_hash(node, ("a",)) == build([10, {"b": None}]).hash
    assert tree.node_hash(node, ("nope",)) is None


def test_set_and_remove_semantics():
    root = build({"m": {"a": 1}, "l": [1, 2, 3]})
    r1 = tree.set_at(root, ("m", "b"), build({"x": 2}))
    assert r1.to_value() == {"l": [1, 2, 3], "m": {"a": 1, "b": {"x": 2}}}
    r2 = tree.set_at(r1, ("l", "1"), build("two"))
    assert r2.to_value()["l"] == [1, "two", 3]
    r3 = tree.remove_at(r2, ("l", "0"))
    assert r3.to_value()["l"] == ["two", 3]
    r4 = tree.set_at(r3, (), build({"fresh": True}))
    assert r4.to_value() == {"fresh": True}
    # the old roots are untouched
    assert root.to_value() == {"l": [1, 2, 3], "m": {"a": 1}}
    for node in (r1, r2, r3, r4):
        check_node(node)


@pytest.mark.parametrize(
    "op, segments",
    [
        ("set", ("missing", "x")),  # parent must exist
        ("set", ("l", "3")),  # no append by index
        ("set", ("l", "x")),
        ("set", ("m", "a", "deeper")),  # parent is a scalar
        ("remove", ("m", "zz")),
        ("remove", ("l", "9")),
        ("remove", ()),
        ("remove", ("missing", "x")),
    ],
)
def test_failed_updates_raise_and_leave_root_unchanged(op, segments):
    root = build({"m": {"a": 1}, "l": [1, 2, 3]})
    before = (root.hash, root.to_value())
    with pytest.raises(InvalidPath):
        if op == "set":
            tree.set_at(root, segments, build(1))
        else:
            tree.remove_at(root, segments)
    assert (root.hash, root.to_value()) == before


def test_unchanged_siblings_are_shared():
    root = build({"a": {"big": list(range(50))}, "b": {"c": 1}})
    sibling = tree.get(root, ("a",))
    updated = tree.set_at(root, ("b", "c"), build(2))
    assert tree.get(updated, ("a",)) is sibling
    assert tree.get(updated, ("a",)).hash == sibling.hash


def _apply(value, segments, new=None, remove=False):
    """The plain-data meaning of one update (mutates ``value``)."""
    if not segments:
        return new
    parent = value
    for seg in segments[:-1]:
        parent = parent[int(seg)] if isinstance(parent, list) else parent[seg]
    last = segments[-1]
    if isinstance(parent, list):
        if remove:
            del parent[int(last)]
        else:
            parent[int(last)] = new
    elif remove:
        del parent[last]
    else:
        parent[last] = new
    return value


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (str(i),))


@settings(max_examples=150)
@given(CONTAINER, st.lists(st.tuples(st.booleans(), st.integers(0, 10**6), PLAIN), max_size=12), st.data())
def test_random_updates_match_fresh_builds(start, operations, data):
    root = build(start)
    plain = root.to_value()
    for remove, pick, new in operations:
        candidates = [p for p in _paths(plain) if p]
        if remove and candidates:
            target = candidates[pick % len(candidates)]
            before = root
            root = tree.remove_at(root, target)
            plain = _apply(plain, target, remove=True)
        else:
            # set an existing path or insert a new key into an existing map
            maps = [p for p in _paths(plain) if isinstance(tree.get(root, p).to_value(), dict)]
            if candidates and pick % 2:
                target = candidates[pick % len(candidates)]
            else:
                parent = maps[pick % len(maps)]
                target = parent + (data.draw(KEY.filter(bool), label="key"),)
            if any(s in (".", "..") for s in target):
                continue
            node = build(new)
            old_siblings = {}
            if len(target) >= 1:
                parent_node = tree.get(root, target[:-1])
                if parent_node.kind == "map":
                    for name in parent_node.child_names():
                        if name != target[-1]:
                            old_siblings[name] = tree.get(parent_node, (name,)).hash
            before = root
            root = tree.set_at(root, target, node)
            plain = _apply(plain, target, new=new)
            for name, digest in old_siblings.items():
                assert tree.get(root, target[:-1] + (name,)).hash == digest
            assert tree.get(root, target).hash == node.hash
        assert before.hash == build(before.to_value()).hash
    fresh = build(plain)
    assert root.hash == fresh.hash
    assert values_equal(root.to_value(), fresh.to_value())
    check_node(root)


def test_large_map_updates_keep_order_and_hash():
    big = {f"k{i:05d}": i for i in range(2000)}
    root = build({"m": big})
    root = tree.set_at(root, ("m", "k00500x"), build("inserted"))
    root = tree.remove_at(root, ("m", "k00001"))
    root = tree.set_at(root, ("m", "k01999"), build([1]))
    big["k00500x"] = "inserted"
    del big["k00001"]
    big["k01999"] = [1]
    assert root.hash == build({"m": big}).hash
    assert list(root.to_value()["m"]) == sorted(big)
    check_node(root)


def test_height_and_script_maxima_after_removal():
    root = build({"deep": [[[1]]], "flat": 1, "lib": {"a": Script("xxxx"), "b": Script("y")}}, scripts=True)
    assert root.height == 4 and root.max_script == 4
    root = tree.remove_at(root, ("deep",))
    assert root.height == 2
    root = tree.remove_at(root, ("lib", "a"))
    assert root.max_script == 1
    root = tree.remove_at(root, ("lib", "b"))
    assert root.max_script == -1
    check_node(root)
    assert tree.get(root, ("lib",)).height == 0


def test_validate_value_uses_cached_aggregates():
    limits = Limits(max_value_depth=2, max_value_entries=5, max_text_bytes=10, max_script_bytes=3)
    tree.validate_value(build({"a": [1]}), limits, scripts_allowed=False)
    with pytest.raises(InvalidValue, match="maximum nesting depth exceeded"):
        tree.validate_value(build({"a": [[1]]}), limits, scripts_allowed=False)
    tree.validate_value(build({"a": [[]]}), limits, scripts_allowed=False)  # empty container at depth 2
    with pytest.raises(InvalidValue, match="maximum value entries exceeded"):
        tree.validate_value(build([1, 2, 3, 4, 5]), limits, scripts_allowed=False)
    with pytest.raises(InvalidValue, match="maximum text bytes exceeded"):
        tree.validate_value(build({"abcdef": "ghijk"}), limits, scripts_allowed=False)
    with pytest.raises(ResourceLimitExceeded, match="script source"):
        tree.validate_value(build({"s": Script("abcd")}, scripts=True), limits, scripts_allowed=True)
    with pytest.raises(InvalidValue, match="only valid below /lib"):
        tree.validate_value(build({"s": Script("a")}, scripts=True), limits, scripts_allowed=False)


def test_deep_and_cyclic_inputs_are_value_errors():
    deep: list = [1]
    for _ in range(400):
        deep = [deep]
    with pytest.raises(InvalidValue, match="nesting"):
        build(deep)
    cyc: dict = {}
    cyc["self"] = cyc
    with pytest.raises(InvalidValue, match="nesting"):
        build(cyc)


def test_nodes_are_immutable():
    node = build({"a": 1})
    with pytest.raises((TypeError, AttributeError)):
        node[0] = 5  # type: ignore[index]
    with pytest.raises(AttributeError):
        node.digest = b""  # type: ignore[misc]
    assert node == build({"a": 1}) and hash(node) == hash(build({"a": 1}))
    assert node != build({"a": 2})


@given(
    base=st.dictionaries(KEY, PLAIN, min_size=1, max_size=40),
    edits=st.lists(st.tuples(st.integers(0, 39), PLAIN), min_size=1, max_size=6),
    hashed=st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_one_key_lookups_and_edits_agree_with_their_path_forms(base, edits, hashed):
    # find_key / set_key are find / set_at of one key; set_leaf_entry is set_at of the
    # key at a known place of a one-leaf map. Same values, aggregates and digests,
    # whether or not the map was hashed (and so encoded) before the edit.
    keyed = by_path = tree.from_value(base, scripts_allowed=False)
    for index, value in edits:
        key = sorted(base)[index % len(base)]
        if hashed:
            keyed.hash  # noqa: B018 (encode and hash before editing)
        assert tree.find_key(keyed, key) == tree.find(keyed, (key,))
        node = tree.from_value(value, scripts_allowed=False)
        leaf_chunk = keyed.value
        if leaf_chunk.level == 0:
            placed = tree.set_leaf_entry(keyed, leaf_chunk.keys.index(key), node)
            assert placed.to_value() == tree.set_at(keyed, (key,), node).to_value()
            assert placed.hash == tree.set_at(keyed, (key,), node).hash
        keyed = tree.set_key(keyed, key, node)
        by_path = tree.set_at(by_path, (key,), node)
        assert (keyed.count, keyed.text, keyed.height, keyed.max_script) == (
            by_path.count, by_path.text, by_path.height, by_path.max_script)
    assert keyed.to_value() == by_path.to_value()
    assert keyed.hash == by_path.hash == tree.from_value(by_path.to_value(), scripts_allowed=False).hash
    assert tree.find_key(keyed, "\x00absent") is tree.ABSENT or "\x00absent" in base
