"""The batch builder restore uses: the same trees as the general builder, the same verdicts.

``svit._tree.decoded.build_decoded`` builds decoded snapshot data with every chunk's
bytes and digest made in batches (sibling records together); anything it does not
build is left to the general builder, which names the problem. These tests hold it to
the general builder chunk by chunk, and hold a restore through it to a restore without
it on valid and on damaged snapshots.
"""

import gc
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import svit.tree
from svit import cbor, tree
from svit._tree.build import build
from svit._tree.codec import node_cbor
from svit._tree.decoded import build_decoded
from svit._tree.node import Chunk, Node, leaves
from svit.errors import SvitError
from svit.limits import Limits
from svit.snapshot import TRAILER_BYTES, decode_snapshot, decode_snapshot_unverified, encode_snapshot
from svit.values import Script
from tests.conftest import with_trailer

ADDRESS = "svit://local/tests/restore-batch"
I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
KEY = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
SCALAR = st.none() | st.booleans() | I64 | st.floats(allow_nan=False, allow_infinity=False) | TEXT


@st.composite
def record_lists(draw):
    """Sibling small maps, most sharing a few key shapes (the batched case), some not."""
    shapes = draw(st.lists(st.lists(KEY, min_size=1, max_size=9, unique=True), min_size=1, max_size=3))
    count = draw(st.integers(1, 50))
    return [
        {key: draw(SCALAR) for key in shapes[draw(st.integers(0, len(shapes) - 1))]}
        for _ in range(count)
    ]


WIDE_MAP = st.dictionaries(KEY, SCALAR, min_size=9, max_size=150)
VALUES = st.recursive(
    SCALAR | record_lists() | WIDE_MAP | st.lists(SCALAR, min_size=30, max_size=80),
    lambda inner: st.lists(inner, max_size=40) | st.dictionaries(KEY, inner, max_size=40) | record_lists(),
    max_leaves=8,
)


def decoded(value):
    """What a snapshot body holding ``value`` decodes to: maps in canonical key order, 0.0 for -0.0."""
    return cbor.decode_item(cbor.encode(tree.from_value(value, scripts_allowed=True).to_value()))


def walk(chunk: Chunk):
    yield chunk
    if chunk.level:
        for child in chunk.items:
            yield from walk(child)


def containers(node: Node):
    yield node
    for part in leaves(node.value):
        for item in part.items:
            if type(item) is Node:
                yield from containers(item)


def assert_same_tree(fast: Node, slow: Node) -> None:
    """Every container, chunk, aggregate, byte and digest alike."""
    assert (fast.code, fast.count, fast.text, fast.height, fast.max_script) == (
        slow.code, slow.count, slow.text, slow.height, slow.max_script)
    fast_chunks, slow_chunks = list(walk(fast.value)), list(walk(slow.value))
    assert len(fast_chunks) == len(slow_chunks)
    for mine, theirs in zip(fast_chunks, slow_chunks):
        for field in ("code", "level", "keys", "bounds", "size", "count", "text", "height", "max_script", "rank",
                      "nested"):
            assert getattr(mine, field) == getattr(theirs, field), field
        assert mine.data == theirs.data
        assert mine.digest == theirs.digest
        if mine.level == 0:
            for a, b in zip(mine.items, theirs.items):
                assert type(a) is type(b)
                if type(a) is Node:
                    assert_same_tree(a, b)
                else:
                    assert a == b or (a != a and b != b)
    assert fast.digest == slow.digest


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(KEY, VALUES, max_size=4) | st.lists(VALUES, max_size=4))
def test_batch_builder_builds_what_the_general_builder_builds(value):
    data = decoded(value)
    fast = build_decoded(data)
    assert fast is not None
    assert_same_tree(fast, build(data, True, True))
    # Every chunk's bytes and digest, and every container's plain CBOR, are already made.
    for node in containers(fast):
        assert node.cbor is not None
        assert all(part.encoded and part.hashed for part in leaves(node.value))
    assert node_cbor(fast) == cbor.encode(data)


@settings(max_examples=30, deadline=None)
@given(st.dictionaries(KEY, VALUES, max_size=4))
def test_restore_of_random_values_is_the_original_and_snapshots_byte_identical(value):
    root = tree.from_value({"memory": value}, scripts_allowed=False)
    blob = encode_snapshot(ADDRESS, 3, root, Limits())
    _, _, restored, _ = decode_snapshot(blob)
    assert restored.hash == root.hash
    assert cbor.encode(restored.to_value()) == cbor.encode(root.to_value())
    assert encode_snapshot(ADDRESS, 3, restored, Limits()) == blob


def test_a_restored_tree_has_every_chunk_encoded_and_hashed():
    """Restore builds through the batch builder: nothing is left to encode or hash later."""
    root = tree.from_value(SAMPLE, scripts_allowed=True)
    _, _, restored, _, _ = decode_snapshot_unverified(encode_snapshot(ADDRESS, 1, root, Limits()))
    for node in containers(restored):
        assert node.cbor is not None
        assert all(part.encoded and part.hashed for part in leaves(node.value))
    assert restored.hash == root.hash


@pytest.mark.parametrize("count", [1, 31, 32, 33, 64, 65, 600])
def test_arrays_of_records_at_every_leaf_boundary(count):
    value = {"rows": [{"id": i, "name": f"r{i}", "score": i / 7, "tags": None} for i in range(count)],
             "mixed": [{"a": i} if i % 3 else {"a": i, "b": "é" * i} for i in range(count)]}
    data = decoded(value)
    fast = build_decoded(data)
    assert fast is not None
    assert_same_tree(fast, build(data, True, True))
    assert node_cbor(fast) == cbor.encode(data)


def test_records_with_scripts_and_containers_are_built_one_by_one():
    value = {
        "lib": {"main": Script("(define (main input) input)", "echo")},
        "memory": {"rows": [{"a": 1, "b": [1, 2]}, {"a": 2, "b": {"c": None}}, {}, {"x": 1.5}]},
    }
    data = decoded(value)
    fast = build_decoded(data)
    assert fast is not None
    assert_same_tree(fast, build(data, True, True))


# Values the general builder refuses, each with the error it gives; the batch builder must
# leave every one of them to it (inside a batch of records and outside one).
INVALID = [
    ({"b": 1, "a": 2}, "map keys are not in canonical order"),
    ({"a": -0.0}, "negative zero is written as 0.0"),
    ({"a": math.inf}, "numbers must be finite"),
    ({"a": math.nan}, "numbers must be finite"),
    ({"a": 2**63}, "integer is outside signed 64-bit range"),
    ({"a": -(2**63) - 1}, "integer is outside signed 64-bit range"),
    ({"a": b"bytes"}, "unsupported value type"),
    ({1: "x"}, "map keys must be text"),
    ({"a": "\ud800"}, "text must be valid Unicode"),
    ({"\ud800": 1}, "text must be valid Unicode"),
]


@pytest.mark.parametrize(("bad", "message"), INVALID)
@pytest.mark.parametrize("where", ["alone", "among records", "in a wide map", "in a wide array"])
def test_invalid_values_are_left_to_the_general_builder(bad, message, where):
    good = [{"a": i, "b": "x"} for i in range(40)]
    value = {
        "alone": lambda: {"m": bad},
        "among records": lambda: {"m": good[:20] + [bad] + good[20:]},
        "in a wide map": lambda: {f"k{i:03d}": i for i in range(50)} | {"k025": bad},
        "in a wide array": lambda: list(range(50)) + [bad],
    }[where]()
    assert build_decoded(value) is None
    with pytest.raises(SvitError, match=message):
        tree.from_decoded(value)


def general_only(monkeypatch):
    monkeypatch.setattr(svit.tree, "build_decoded", lambda value: None)


def outcome(blob):
    try:
        address, version, root, limits, claimed = decode_snapshot_unverified(blob)
    except SvitError as exc:
        return "refused", type(exc).__name__, str(exc)
    return "accepted", address, version, root.hash, limits, claimed


SAMPLE = {
    "memory": {
        "rows": [{"n": i, "ok": i % 2 == 0, "text": f"row {i}"} for i in range(45)],
        "wide": {f"k{i:03d}": f"v{i}" for i in range(70)},
        "mixed": [1, -2.5, None, {"e": {}}, [True, "x"]],
    },
    "lib": {"s": Script("(define (main input) input)", "doc")},
}


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_batch_and_general_restores_agree_on_damaged_snapshots(data):
    blob = encode_snapshot(ADDRESS, 7, tree.from_value(SAMPLE, scripts_allowed=True), Limits())
    body = bytearray(blob[:-TRAILER_BYTES])
    for _ in range(data.draw(st.integers(1, 3))):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    damaged = with_trailer(bytes(body))
    batch = outcome(damaged)
    with pytest.MonkeyPatch.context() as patch:
        general_only(patch)
        general = outcome(damaged)
    assert batch == general


def test_restore_leaves_the_garbage_collector_alone(monkeypatch: pytest.MonkeyPatch):
    """A restore is one caller among many threads: it must not switch the collector off
    for the whole interpreter, not even for a while."""
    calls: list[str] = []
    monkeypatch.setattr(gc, "disable", lambda: calls.append("disable"))
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    blob = encode_snapshot(ADDRESS, 1, tree.from_value(SAMPLE, scripts_allowed=True), Limits())
    decode_snapshot(blob)
    with pytest.raises(SvitError):
        decode_snapshot(with_trailer(b"\xa1\x61x\x01"))
    assert calls == []
    assert gc.isenabled()
