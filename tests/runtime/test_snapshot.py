"""svit-snapshot@1: determinism, round trips, and rejection of damaged or hostile bytes."""

import random

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from svit import tree
from svit.errors import InvalidLimits, InvalidSnapshot, SvitError
from svit.limits import Limits
from svit.snapshot import FORMAT, MAGIC, TRAILER_BYTES, decode_snapshot, encode_snapshot
from svit.values import Script, values_equal
from tests.conftest import with_trailer

ADDRESS = "svit://local/tests/snapshot"
I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
PLAIN = st.recursive(
    st.none() | st.booleans() | I64 | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TEXT, inner, max_size=5),
    max_leaves=30,
)


def sample_root():
    return tree.from_value(
        {
            "lib": {"main": Script("(define (main input) input)", "echo")},
            "memory": {"count": 1, "ratio": 1.0, "list": [True, None, "x", -5], "nested": {"e": {}}},
        },
        scripts_allowed=True,
    )


def body_of(blob: bytes) -> bytes:
    return blob[:-TRAILER_BYTES]


def test_round_trip():
    root = sample_root()
    limits = Limits(max_call_stack=8)
    blob = encode_snapshot(ADDRESS, 42, root, limits)
    address, version, restored, restored_limits = decode_snapshot(blob)
    assert (address, version, restored_limits) == (ADDRESS, 42, limits)
    assert restored.hash == root.hash
    assert values_equal(restored.to_value(), root.to_value())
    assert type(restored.to_value()["memory"]["ratio"]) is float
    assert type(restored.to_value()["memory"]["count"]) is int
    assert encode_snapshot(address, version, restored, restored_limits) == blob


@given(PLAIN)
@settings(max_examples=150)
def test_round_trip_any_value(value):
    root = tree.from_value({"memory": value}, scripts_allowed=False)
    blob = encode_snapshot(ADDRESS, 0, root, Limits())
    _, _, restored, _ = decode_snapshot(blob)
    assert restored.hash == root.hash
    assert values_equal(restored.to_value(), root.to_value())


def test_equal_trees_give_identical_bytes():
    a = tree.from_value({"b": [1, 2.0], "a": {"y": 1, "x": 2}}, scripts_allowed=False)
    b = tree.from_value({"a": {"x": 2, "y": 1}, "b": [1, 2.0]}, scripts_allowed=False)
    # built differently: by updates on another tree
    c = tree.from_value({"a": {"x": 0}, "b": [1, 2.0]}, scripts_allowed=False)
    c = tree.set_at(c, ("a", "y"), tree.from_value(1, scripts_allowed=False))
    c = tree.set_at(c, ("a", "x"), tree.from_value(2, scripts_allowed=False))
    blobs = {encode_snapshot(ADDRESS, 1, n, Limits()) for n in (a, b, c)}
    assert len(blobs) == 1
    assert encode_snapshot(ADDRESS, 1, a, Limits()) != encode_snapshot(ADDRESS, 2, a, Limits())


def test_envelope_layout():
    blob = encode_snapshot(ADDRESS, 3, sample_root(), Limits())
    envelope = cbor2.loads(body_of(blob), tag_hook=lambda tag, _i: ("tag", tag.tag, list(tag.value)))
    assert list(envelope) == ["format", "id", "limits", "root", "root_hash", "version"]
    assert envelope["format"] == FORMAT
    assert envelope["root"]["lib"]["main"] == ("tag", tree.CBOR_SCRIPT_TAG, ["(define (main input) input)", "echo"])
    assert blob[-TRAILER_BYTES:].startswith(MAGIC)


def test_every_truncation_is_rejected():
    blob = encode_snapshot(ADDRESS, 1, sample_root(), Limits())
    for cut in range(len(blob)):
        with pytest.raises(InvalidSnapshot):
            decode_snapshot(blob[:cut])
    with pytest.raises(InvalidSnapshot):
        decode_snapshot(blob + b"\x00")


def test_every_bit_flip_is_rejected():
    blob = encode_snapshot(ADDRESS, 1, tree.from_value({"m": [1, "ab"]}, scripts_allowed=False), Limits())
    for i in range(len(blob)):
        for bit in range(8):
            damaged = bytearray(blob)
            damaged[i] ^= 1 << bit
            with pytest.raises(InvalidSnapshot):
                decode_snapshot(bytes(damaged))


def test_bit_flips_sampled_on_a_large_snapshot():
    rng = random.Random(5)
    value = {f"k{i}": {"t": "x" * 50, "n": i, "f": i / 3} for i in range(500)}
    blob = encode_snapshot(ADDRESS, 1, tree.from_value(value, scripts_allowed=False), Limits())
    for _ in range(300):
        damaged = bytearray(blob)
        damaged[rng.randrange(len(blob))] ^= 1 << rng.randrange(8)
        with pytest.raises(InvalidSnapshot):
            decode_snapshot(bytes(damaged))


def _envelope(**changes):
    """An envelope that plain cbor2 encodes canonically (restore refuses any other order)."""
    root = tree.from_value({"m": [1, 2]}, scripts_allowed=False)
    env = {
        "format": FORMAT,
        "id": ADDRESS,
        "limits": dict(sorted(Limits().to_dict().items())),
        "root": root.to_value(),
        "root_hash": root.hash,
        "version": 1,
    }
    env.update(changes)
    return {k: v for k, v in sorted(env.items()) if v is not _DROP}


_DROP = object()


def test_tampered_value_with_fresh_trailer_is_a_hash_mismatch():
    env = _envelope(root={"m": [1, 3]})
    with pytest.raises(InvalidSnapshot, match="root hash mismatch"):
        decode_snapshot(with_trailer(cbor2.dumps(env)))
    # the untampered envelope, encoded by plain cbor2, is accepted
    decode_snapshot(with_trailer(cbor2.dumps(_envelope())))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"format": "svit-snapshot@1"}, "unsupported format .svit-snapshot@1."),
        ({"format": 10}, "unsupported format"),
        ({"extra": 1}, "unknown field"),
        ({"version": _DROP}, "missing field"),
        ({"version": -1}, "version"),
        ({"version": 2**64}, "malformed"),  # a bignum tag
        ({"version": "1"}, "version"),
        ({"id": "http://x"}, "address"),
        ({"root_hash": 5}, "root_hash"),
        ({"root": {"m": float("nan")}}, "finite"),
        ({"root": {"m": 2**63}}, "64-bit"),
        ({"root": {"m": b"bytes"}}, "unsupported value type"),
        ({"root": {1: 2}}, "keys must be text"),
        ({"root": {"b": 1, "a": 2}}, "canonical order"),
    ],
)
def test_schema_errors(changes, message):
    with pytest.raises(InvalidSnapshot, match=message):
        decode_snapshot(with_trailer(cbor2.dumps(_envelope(**changes))))


def test_limits_are_checked():
    too_big = dict(sorted(dict(Limits().to_dict(), max_call_stack=10**9).items()))
    with pytest.raises(InvalidLimits):
        decode_snapshot(with_trailer(cbor2.dumps(_envelope(limits=too_big))))
    unknown = dict(sorted(dict(Limits().to_dict(), max_bananas=1).items()))
    with pytest.raises(InvalidLimits):
        decode_snapshot(with_trailer(cbor2.dumps(_envelope(limits=unknown))))
    with pytest.raises(InvalidLimits):
        encode_snapshot(ADDRESS, 1, sample_root(), Limits(max_value_depth=129))


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\xff",
        cbor2.dumps(_envelope()) + b"\x00",  # trailing item
        cbor2.dumps(_envelope())[:-1],
        cbor2.dumps(cbor2.CBORTag(1, 0)),  # datetime tag
        cbor2.dumps(_envelope(root=cbor2.CBORTag(2, b"\x01" * 9))),  # bignum
        cbor2.dumps(_envelope(root=cbor2.CBORTag(99999, 1))),  # unknown tag
        cbor2.dumps(_envelope(root=cbor2.CBORTag(tree.CBOR_SCRIPT_TAG, ["only source"]))),
        cbor2.dumps(_envelope(root=cbor2.CBORTag(tree.CBOR_SCRIPT_TAG, [1, ""]))),
        bytes.fromhex("d81c81d81d00"),  # shared reference cycle
        b"\x9f\x01\xff",  # indefinite array
        b"\xa2\x61a\x01\x61a\x02",  # duplicate keys
        b"\x81" * 5000 + b"\x01",  # very deep nesting
        b"\x9b" + b"\xff" * 8,  # absurd array length
        b"\x7b" + b"\x7f" * 8,  # absurd text length
        b"\x62\xff\xfe",  # invalid UTF-8
        b"\xf7",  # undefined
        cbor2.dumps([1, 2]),
    ],
)
def test_hostile_bodies_with_valid_trailer(body):
    with pytest.raises(InvalidSnapshot):
        decode_snapshot(with_trailer(body))


def test_deep_root_is_rejected():
    deep: object = 1
    for _ in range(300):
        deep = [deep]
    with pytest.raises(InvalidSnapshot):
        decode_snapshot(with_trailer(cbor2.dumps(_envelope(root=deep))))


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_random_bodies_only_raise_svit_errors(body):
    with pytest.raises(SvitError):
        decode_snapshot(with_trailer(body))
    with pytest.raises(SvitError):
        decode_snapshot(body)


@settings(max_examples=100)
@given(st.data())
def test_mutated_valid_bodies_only_raise_svit_errors(data):
    body = bytearray(cbor2.dumps(_envelope(root={"m": [1, "x", {"k": 2.5}], "s": "text"})))
    for _ in range(data.draw(st.integers(1, 4))):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    try:
        decode_snapshot(with_trailer(bytes(body)))
    except SvitError:
        pass


def test_size_cap_and_input_types():
    blob = encode_snapshot(ADDRESS, 1, sample_root(), Limits())
    with pytest.raises(InvalidSnapshot, match="snapshot byte limit exceeded"):
        decode_snapshot(blob, max_bytes=len(blob) - 1)
    assert decode_snapshot(bytearray(blob))[1] == 1
    assert decode_snapshot(memoryview(blob))[1] == 1
    with pytest.raises(InvalidSnapshot):
        decode_snapshot("text")  # type: ignore[arg-type]


def test_encode_validates_inputs():
    root = sample_root()
    from svit.errors import InvalidValue

    with pytest.raises(InvalidValue):
        encode_snapshot("nope", 1, root, Limits())
    with pytest.raises(InvalidValue):
        encode_snapshot(ADDRESS, -1, root, Limits())


def test_system_runtime_names_the_format_snapshots_are_written_in():
    from svit import Process, snapshot

    process = Process.builder("svit://local/tests/runtime-format").build()
    assert process.read("/system/runtime")["snapshot_format"] == snapshot.FORMAT == "svit-snapshot@2"
    assert snapshot.FORMAT.encode() in process.snapshot()
