"""svit.cbor: one deterministic encoding, one strict decoder, one seal."""

from __future__ import annotations

import random

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from svit import cbor, tree
from svit.limits import Limits
from svit.snapshot import TRAILER_BYTES, encode_snapshot
from svit.values import Script

ADDRESS = "svit://local/test/cbor"

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.binary(max_size=64)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=6),
    max_leaves=40,
)


def _shuffled(value, rng: random.Random):
    """The same value with every map's entries inserted in another order."""
    if type(value) is dict:
        items = list(value.items())
        rng.shuffle(items)
        return {key: _shuffled(item, rng) for key, item in items}
    if type(value) is list:
        return [_shuffled(item, rng) for item in value]
    return value


@settings(max_examples=300, deadline=None)
@given(values, st.integers(min_value=0, max_value=2**32))
def test_encode_is_deterministic_and_decode_inverts_it(value, seed):
    data = cbor.encode(value)
    assert cbor.encode(_shuffled(value, random.Random(seed))) == data
    assert cbor.decode(data) == value
    assert cbor2.loads(data) == value  # the encoding is plain CBOR any decoder reads


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8), scalars, min_size=2, max_size=8))
def test_map_keys_are_in_utf8_byte_order(mapping):
    decoded_order = list(cbor2.loads(cbor.encode(mapping)))
    assert decoded_order == sorted(mapping, key=lambda key: key.encode("utf-8"))
    assert decoded_order == sorted(mapping)  # the same as code-point order


@settings(max_examples=200, deadline=None)
@given(values, st.binary(min_size=1, max_size=4))
def test_trailing_bytes_are_refused(value, extra):
    with pytest.raises(cbor.CBORDecodeError) as caught:
        cbor.decode(cbor.encode(value) + extra)
    assert caught.value.reason in ("trailing", "malformed")


@pytest.mark.parametrize(
    "data, reason",
    [
        (cbor2.dumps({"b": 1, "aa": 2}, canonical=True), "non_canonical"),  # length-first key order
        (bytes.fromhex("f93c00"), "non_canonical"),  # 1.0 as a half float
        (bytes.fromhex("1801"), "non_canonical"),  # 1 with a two-byte head
        (bytes.fromhex("9f01ff"), "malformed"),  # indefinite-length array
        (bytes.fromhex("a2616101616102"), "malformed"),  # a repeated key
        (cbor2.dumps(cbor2.CBORTag(1, 0)), "malformed"),  # a date tag
        (cbor2.dumps(2**70), "malformed"),  # a bignum
        (b"", "malformed"),
        (bytes.fromhex("fb7ff8000000000000"), "non_canonical"),  # NaN, even as binary64
        (bytes.fromhex("a1016178"), "non_canonical"),  # an integer map key
    ],
)
def test_non_canonical_and_foreign_input_is_refused(data, reason):
    with pytest.raises(cbor.CBORDecodeError) as caught:
        cbor.decode(data)
    assert caught.value.reason == reason


def test_length_first_order_is_accepted_only_where_it_agrees():
    # "a" before "bb" in both orders: those bytes are this encoding too
    assert cbor.decode(cbor2.dumps({"bb": 1, "a": 2}, canonical=True)) == {"a": 2, "bb": 1}


def test_refusals_are_value_errors_with_a_reason():
    with pytest.raises(ValueError):
        cbor.decode(b"\x01\x02")
    for bad in ({1: 2}, 2**64, object(), "\ud800", float("nan"), float("inf")):
        with pytest.raises(ValueError):
            cbor.encode(bad)


def test_script_records_and_raw_items():
    script = Script("(define (main input) input)", "doc")
    data = cbor.encode({"s": script, "r": cbor.Raw(cbor.encode([1, 2]))})
    assert cbor.decode(data) == {"r": [1, 2], "s": script}
    assert cbor.SCRIPT_TAG == tree.CBOR_SCRIPT_TAG


def test_seal_and_unseal():
    body = {"format": "x@1", "n": 3, "data": {"b": [1.5, None], "a": "é"}}
    sealed, digest = cbor.seal(body, "x_hash")
    record = cbor.unseal(sealed, "x_hash")
    assert record == {**body, "x_hash": digest}
    assert list(record) == sorted(record)  # the hash field sits in key order
    tampered = cbor.encode({**body, "n": 4, "x_hash": digest})
    with pytest.raises(cbor.CBORDecodeError) as caught:
        cbor.unseal(tampered, "x_hash")
    assert caught.value.reason == "hash_mismatch"
    with pytest.raises(cbor.CBORDecodeError) as unsealed:
        cbor.unseal(cbor.encode(body), "x_hash")
    assert unsealed.value.reason == "unsealed"
    with pytest.raises(ValueError):
        cbor.seal({**body, "x_hash": "0"}, "x_hash")


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=6), st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
                       | st.floats(allow_nan=False, allow_infinity=False).map(lambda f: f or 0.0) | st.text(max_size=8)
                       | st.lists(st.integers(0, 9), max_size=3), max_size=8))
def test_tree_nodes_are_this_encoding(mapping):
    node = tree.from_value({"m": mapping}, scripts_allowed=False)
    assert tree.node_cbor(node) == cbor.encode(node.to_value())


def test_snapshot_body_is_this_encoding():
    root = tree.from_value(
        {"children": {}, "inbox": [], "lib": {}, "memory": {"b": 1, "aa": [1.0, "x"]}, "mounts": {}, "ports": {},
         "system": {"outbox": []}, "tasks": {}, "thread": None},
        scripts_allowed=True,
    )
    blob = encode_snapshot(ADDRESS, 3, root, Limits())
    body = blob[:-TRAILER_BYTES]
    envelope = cbor.decode(body)
    assert list(envelope) == ["format", "id", "limits", "root", "root_hash", "version"]
    assert cbor.encode(envelope) == body
