"""The native tree builder and CBOR decoder (svit/_treecore.c) against the Python reference.

svit.tree keeps its Python builder as the definition of a node; the native module must
produce exactly the same nodes (kinds, stored items, digests, counts, text bytes,
heights, script sizes, child digests) and exactly the same errors, from host data and
from snapshot bytes alike, and must never crash or leak on hostile input.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import random
import struct
import subprocess
import sys
import textwrap
import tracemalloc

import blake3
import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from svit import Process, snapshot, tree
from svit.errors import InvalidSnapshot, InvalidValue, SvitError
from svit.values import MAX_NESTING, Script

native = pytest.mark.skipif(not tree.NATIVE_BUILDER, reason="svit._treecore is not built")

I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
KEY = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
LONG_TEXT = st.integers(min_value=1000, max_value=3000).map(lambda n: "é" * (n // 2) + "x" * (n % 7))
LEAF = (
    st.none()
    | st.booleans()
    | I64
    | st.integers(min_value=-300, max_value=1100)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.0, -0.0, 1.0, -1.5])
    | st.text(max_size=40).filter(lambda t: not any(0xD800 <= ord(c) <= 0xDFFF for c in t))
    | LONG_TEXT
    | st.builds(Script, st.text(st.characters(blacklist_categories=("Cs",)), max_size=30), KEY)
)
VALUE = st.recursive(
    LEAF,
    lambda inner: st.lists(inner, max_size=8) | st.dictionaries(KEY, inner, max_size=8),
    max_leaves=30,
)
CONTAINER = st.lists(VALUE, max_size=6) | st.dictionaries(KEY, VALUE, max_size=6)

BAD_LEAF = st.sampled_from(
    [
        math.nan,
        math.inf,
        -math.inf,
        2**63,
        -(2**63) - 1,
        2**200,
        "lone \ud800 surrogate",
        b"bytes",
        {1, 2},
        (1, 2),
        object(),
        type("TextSubclass", (str,), {})("x"),
        type("DictSubclass", (dict,), {})(),
    ]
)
BAD_KEY = st.sampled_from([1, None, ("t",), "bad \udfff key", type("KeySubclass", (str,), {})("k")])
INVALID = st.recursive(
    LEAF | BAD_LEAF,
    lambda inner: st.lists(inner, max_size=6)
    | st.dictionaries(KEY | BAD_KEY, inner, max_size=6),
    max_leaves=25,
)


def same_node(a, b, path="/"):
    """Every field of two trees, recursively, including the types and signs of leaves."""
    assert type(a) is tree.Node and type(b) is tree.Node, path
    assert a[0] == b[0] and a[2] == b[2] and a[3:7] == b[3:7], path
    assert list(a[7]) == list(b[7]), path
    if a[0] == tree.MAP:
        assert list(a[1]) == list(b[1]), path
        pairs = zip(a[1].values(), b[1].values())
    else:
        assert len(a[1]) == len(b[1]), path
        pairs = zip(a[1], b[1])
    for x, y in pairs:
        assert type(x) is type(y), path
        if type(x) is tree.Node:
            same_node(x, y, path + "*/")
        elif type(x) is float:
            assert x == y and math.copysign(1, x) == math.copysign(1, y), path
        else:
            assert x == y, path


def python_build(value, scripts_allowed=True, strict=False):
    return tree._build_python(value, scripts_allowed, strict)


def native_build(value, scripts_allowed=True, strict=False):
    return tree._native.build(value, scripts_allowed, strict)


def outcome(build, value, scripts_allowed):
    try:
        return "ok", build(value, scripts_allowed)
    except InvalidValue as exc:
        return "error", exc.message


@contextlib.contextmanager
def python_only():
    """Run svit.tree (and so restore) on the Python builder alone."""
    saved = tree._native, tree.NATIVE_BUILDER
    tree._native, tree.NATIVE_BUILDER = None, False
    try:
        yield
    finally:
        tree._native, tree.NATIVE_BUILDER = saved


def test_native_builder_is_present_where_required():
    # CI builds the extension and sets SVIT_REQUIRE_NATIVE=1; a silent fallback there
    # would leave every native test skipped and restore several times slower.
    if os.environ.get("SVIT_REQUIRE_NATIVE") != "1":
        pytest.skip("only where SVIT_REQUIRE_NATIVE=1 asks for the native module")
    assert tree.NATIVE_BUILDER and tree._native is not None


# ---------------------------------------------------------------------------- BLAKE3


@native
@pytest.mark.parametrize("compressor", tree._native.compressors() if tree.NATIVE_BUILDER else [])
def test_single_chunk_blake3_matches_the_blake3_package_at_every_length(compressor):
    rng = random.Random(7)
    for length in range(0, 1025):
        data = bytes(rng.getrandbits(8) for _ in range(length))
        assert tree._native.blake3_chunk(data, compressor) == blake3.blake3(data).digest(), length


@native
@pytest.mark.parametrize("hasher", tree._native.lane_hashers() if tree.NATIVE_BUILDER else [])
def test_side_by_side_hashing_matches_the_blake3_package(hasher):
    # Groups of every size and block count, in every lane position; odd positions take
    # the kind-byte-then-payload form the decoder uses for leaves.
    rng = random.Random(11)
    sizes = [0, 1, 2, 63, 64, 65, 127, 128, 129, 1023, 1024]
    for count in (0, 1, 7, 8, 9, 15, 16, 17, 33, 100):
        inputs = [bytes(rng.getrandbits(8) for _ in range(rng.choice(sizes + [rng.randrange(1025)]))) for _ in range(count)]
        assert tree._native.blake3_many(inputs, hasher) == [blake3.blake3(x).digest() for x in inputs]
    with pytest.raises(ValueError):
        tree._native.blake3_many([b"x" * 1025], hasher)
    assert tree._native.LANE_HASHER in tree._native.lane_hashers()


@native
def test_blake3_chunk_refuses_what_it_cannot_hash():
    with pytest.raises(ValueError, match="at most 1024"):
        tree._native.blake3_chunk(b"x" * 1025)
    with pytest.raises(ValueError, match="no such compressor"):
        tree._native.blake3_chunk(b"x", "no-such-unit")
    assert tree._native.COMPRESSOR in tree._native.compressors()


# ---------------------------------------------------------------------------- building


@native
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CONTAINER, st.booleans())
def test_native_build_equals_python_build(value, scripts_allowed):
    python, built = outcome(python_build, value, scripts_allowed), outcome(native_build, value, scripts_allowed)
    assert python[0] == built[0]
    if python[0] == "ok":
        same_node(built[1], python[1])
    else:
        assert built[1] == python[1]


@native
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(INVALID, max_size=4) | st.dictionaries(KEY | BAD_KEY, INVALID, max_size=4), st.booleans())
def test_native_and_python_reject_alike(value, scripts_allowed):
    python, built = outcome(python_build, value, scripts_allowed), outcome(native_build, value, scripts_allowed)
    assert python[0] == built[0], (python, built)
    if python[0] == "ok":
        same_node(built[1], python[1])
    else:
        assert built[1] == python[1]


@native
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(KEY, VALUE, min_size=2, max_size=6))
def test_strict_mode_accepts_canonical_order_only(mapping):
    def canonical_order(value):
        if type(value) is dict:
            return {key: canonical_order(value[key]) for key in sorted(value)}
        if type(value) is list:
            return [canonical_order(item) for item in value]
        return value

    ordered = canonical_order(mapping)
    same_node(native_build(ordered, strict=True), python_build(ordered, strict=True))
    shuffled = dict(reversed(list(ordered.items())))
    for build in (native_build, python_build):
        with pytest.raises(InvalidValue, match="not in canonical order"):
            build(shuffled, strict=True)


@native
def test_nesting_limit_is_the_same_for_both_builders():
    def nested(depth, inner):
        value = inner
        for _ in range(depth):
            value = [value]
        return value

    for inner in ([], ["text"], {}, {"k": "v"}, 1):
        for depth in (MAX_NESTING - 1, MAX_NESTING, MAX_NESTING + 1, MAX_NESTING + 50):
            results = {outcome(build, nested(depth, inner), True)[0] for build in (native_build, python_build)}
            assert len(results) == 1, (inner, depth)
    with pytest.raises(InvalidValue, match="maximum nesting depth exceeded"):
        native_build(nested(MAX_NESTING + 1, {}))


@native
def test_native_nodes_work_with_every_tree_operation():
    value = {"b": [1, 2.5, {"deep": "x" * 2000}], "a": {"z": None, "y": True}, "lib": Script("(+ 1 2)", "doc")}
    built, reference = native_build(value), python_build(value)
    same_node(built, reference)
    updated = tree.set_at(built, ("b", "2", "deep"), tree.leaf_node("changed"))
    expected = tree.set_at(reference, ("b", "2", "deep"), tree.leaf_node("changed"))
    same_node(updated, expected)
    assert tree.to_value(updated) == tree.to_value(expected)
    assert tree.node_cbor(built) == tree.node_cbor(reference)
    same_node(tree.remove_at(built, ("a", "y")), tree.remove_at(reference, ("a", "y")))


@native
def test_native_nodes_are_not_tracked_by_the_cycle_collector():
    built = native_build({"rows": [{"n": i, "tags": ["a", "b"]} for i in range(50)]})
    assert not gc.is_tracked(built)
    assert not gc.is_tracked(built[1]) and not gc.is_tracked(built[7])
    row = built[1]["rows"][1][0]
    assert not gc.is_tracked(row) and not gc.is_tracked(row[1])
    gc.collect()  # nothing reachable only through untracked nodes is lost
    assert tree.to_value(built)["rows"][49] == {"n": 49, "tags": ["a", "b"]}


def _growth(action, rounds):
    action()
    gc.collect()
    tracemalloc.start()
    try:
        action()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(rounds):
            action()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@native
def test_building_and_failing_do_not_leak():
    good = {"rows": [{"n": i, "text": "é" * 10, "f": -0.0, "s": Script("x", "")} for i in range(40)]}
    bad_late = {"a": [1, 2, {"b": "ok", "c": [math.nan]}], "z": "late"}
    bad_key = {"a": 1, "b": {"x": 1, 2: 3}}
    encoded = tree.node_cbor(python_build(good))
    truncated = encoded[: len(encoded) // 2]

    def churn():
        native_build(good)
        for broken in (bad_late, bad_key):
            with pytest.raises(InvalidValue):
                native_build(broken)
        tree.decode_node(encoded, 0)
        with pytest.raises(ValueError):
            tree.decode_node(truncated, 0)

    # A leaked reference per call would grow by at least rounds * (a node or a str).
    assert _growth(churn, 300) < 64 * 1024


# ---------------------------------------------------------------------------- decoding


def python_decode(data: bytes):
    try:
        return "ok", tree.from_decoded(snapshot._decode_body(data))
    except (InvalidSnapshot, InvalidValue):
        return "rejected", None


def native_decode(data: bytes):
    try:
        node, end = tree.decode_node(data, 0)
    except (ValueError, InvalidValue):
        return "rejected", None
    return ("ok", node) if end == len(data) else ("rejected", None)


def canonical(value) -> bytes:
    return tree.node_cbor(python_build(value))


@native
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUE)
def test_decoding_canonical_bytes_gives_the_built_tree(value):
    node = tree._top(value, True, False) if type(value) in (dict, list) else tree.leaf_node(value)
    data = tree.node_cbor(node)
    decoded, end = tree.decode_node(data, 0)
    assert end == len(data)
    if type(value) in (dict, list):
        same_node(decoded, python_build(value))
    else:
        assert decoded[2] == node[2] and type(decoded[1]) is type(node[1])
    assert tree.cbor_item_end(data, 0) == len(data)


# Items a hostile snapshot might carry, written by hand: non-minimal heads, every float
# width, simple values, foreign tags, byte strings, indefinite lengths, bad UTF-8.
HOSTILE_ITEMS = [
    b"\x18\x05",  # 5 with a one-byte head
    b"\x1b\x00\x00\x00\x00\x00\x00\x00\x05",  # 5 with an eight-byte head
    b"\x1b\x80\x00\x00\x00\x00\x00\x00\x00",  # 2**63
    b"\x3b\x7f\xff\xff\xff\xff\xff\xff\xff",  # -2**63
    b"\x3b\x80\x00\x00\x00\x00\x00\x00\x00",  # -2**63 - 1
    b"\xf9\x3c\x00",  # 1.0 as a half float
    b"\xfa\x3f\xc0\x00\x00",  # 1.5 as a single float
    b"\xf9\x80\x00",  # -0.0 as a half float
    b"\xf9\x7e\x00",  # NaN
    b"\xfa\x7f\x80\x00\x00",  # infinity
    b"\xf7",  # undefined
    b"\xf0",  # simple value 16
    b"\xf8\xff",  # simple value 255
    b"\xff",  # break
    b"\x42ab",  # a byte string
    b"\x5f\x41a\xff",  # an indefinite byte string
    b"\x9f\x01\xff",  # an indefinite array
    b"\xbf\x61a\x01\xff",  # an indefinite map
    b"\x62\xc3\x28",  # invalid UTF-8
    b"\x63\xed\xa0\x80",  # an encoded surrogate
    b"\xc1\x01",  # tag 1 (epoch time)
    b"\xc2\x41\x01",  # tag 2 (bignum)
    b"\xd9\xd9\xf7\x01",  # the self-describe tag
    b"\xda\x53\x56\x49\x54\x82\x61a\x60",  # our script tag around ["a", ""]
    b"\xda\x53\x56\x49\x54\x82\x61a\x01",  # the script tag around ["a", 1]
    b"\xda\x53\x56\x49\x54\x81\x61a",  # the script tag around ["a"]
    b"\xda\x53\x56\x49\x54\x61a",  # the script tag around "a"
    b"\xa2\x61b\x01\x61a\x02",  # keys out of order
    b"\xa2\x61a\x01\x61a\x02",  # a duplicate key
    b"\xa1\x01\x02",  # an integer key
    b"\xa1\x81\x01\x02",  # an array key
    b"\xa1\x60\x01",  # the empty key
    b"\x1c",  # reserved additional information
    b"\x9b\x7f\xff\xff\xff\xff\xff\xff\xff",  # an array claiming 2**63 - 1 items
    b"\xbb\x40\x00\x00\x00\x00\x00\x00\x00",  # a map claiming 2**62 entries
    b"\x7b\xff\xff\xff\xff\xff\xff\xff\xff",  # a text claiming 2**64 - 1 bytes
]


@native
@pytest.mark.parametrize("item", HOSTILE_ITEMS, ids=lambda item: item.hex())
def test_hostile_items_are_judged_alike(item):
    for data in (item, b"\x81" + item, b"\xa1\x61k" + item):
        python, built = python_decode(data), native_decode(data)
        assert python[0] == built[0], data.hex()
        if python[0] == "ok":
            if type(python[1][1]) in (dict, tuple):
                same_node(built[1], python[1])
            assert built[1][2] == python[1][2]


@native
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CONTAINER.filter(lambda v: outcome(python_build, v, True)[0] == "ok"), st.data())
def test_mutated_bytes_are_judged_alike(value, data):
    encoded = bytearray(canonical(value))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        choice = data.draw(st.sampled_from(["flip", "set", "cut", "insert"]))
        position = data.draw(st.integers(min_value=0, max_value=max(0, len(encoded) - 1)))
        if choice == "flip" and encoded:
            encoded[position] ^= 1 << data.draw(st.integers(min_value=0, max_value=7))
        elif choice == "set" and encoded:
            encoded[position] = data.draw(st.integers(min_value=0, max_value=255))
        elif choice == "cut":
            del encoded[position:]
        else:
            encoded[position:position] = data.draw(st.binary(min_size=1, max_size=4))
    mutated = bytes(encoded)
    python, built = python_decode(mutated), native_decode(mutated)
    assert python[0] == built[0], mutated.hex()
    if python[0] == "ok":
        assert built[1][2] == python[1][2]
        if type(python[1][1]) in (dict, tuple):
            same_node(built[1], python[1])


@native
@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_never_crash_the_reader(data):
    for call in (tree.decode_node, tree.cbor_item_end, tree.cbor_head):
        try:
            call(data, 0)
        except (ValueError, InvalidValue):
            pass
    assert native_decode(data)[0] == python_decode(data)[0]


@native
def test_reader_offsets_are_checked():
    for call in (tree.decode_node, tree.cbor_item_end, tree.cbor_head):
        for offset in (-1, 4, 100):
            with pytest.raises(ValueError):
                call(b"\x83\x01\x02\x03"[:3], offset)


# ---------------------------------------------------------------------------- restore


def restored(blob: bytes):
    try:
        process = Process.restore(blob)
    except SvitError as exc:
        return "rejected", exc.code, exc.message
    return "ok", (process.address, process.version, process.root[2], process.snapshot())


@native
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(KEY, VALUE.filter(lambda v: outcome(python_build, {"v": v}, False)[0] == "ok"), max_size=8),
       st.data())
def test_restore_is_the_same_with_and_without_the_native_decoder(memory, data):
    process = Process.builder("svit://local/tests/native").memory("data", memory).build()
    blob = process.snapshot()
    body = bytearray(blob[: -snapshot.TRAILER_BYTES])
    if data.draw(st.booleans()) and body:
        position = data.draw(st.integers(min_value=0, max_value=len(body) - 1))
        body[position] ^= 1 << data.draw(st.integers(min_value=0, max_value=7))
    sealed = bytes(body) + snapshot.MAGIC + len(body).to_bytes(8, "big") + blake3.blake3(bytes(body)).digest()
    native_result = restored(sealed)
    with python_only():
        python_result = restored(sealed)
    assert native_result == python_result


# ---------------------------------------------------------------------------- encoding


@native
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUE, st.data())
def test_native_encoding_equals_the_reference_encoder(value, data):
    node = tree.from_value(value, scripts_allowed=True)
    assert tree._native.encode(node) == tree._node_cbor_python(node)
    if node.is_container and node.child_names():
        # after a path-copying update, whose new nodes are made by the Python side
        name = data.draw(st.sampled_from(node.child_names()))
        updated = tree.set_at(node, (name,), tree.from_value({"new": [1.5, "x"]}, scripts_allowed=False))
        assert tree._native.encode(updated) == tree._node_cbor_python(updated)
        encoded = tree._native.encode(updated)
        same_node(tree.decode_node(encoded, 0)[0], updated)


@native
def test_snapshots_are_byte_identical_with_and_without_the_native_module():
    process = (
        Process.builder("svit://local/tests/native-encode")
        .memory("rows", [{"n": i, "x": -0.0 if i % 2 else 2.5, "t": "é" * i} for i in range(30)])
        .library("echo", "(define (main input) input)", documentation="echo")
        .build()
    )
    process.exec("/lib/echo", {"k": [1, 2, 3]})
    native_bytes = process.snapshot()
    with python_only():
        python_bytes = process.snapshot()
        python_restored = Process.restore(native_bytes).snapshot()
    assert native_bytes == python_bytes == python_restored == Process.restore(python_bytes).snapshot()


@native
def test_encode_refuses_what_is_not_a_node():
    for bad in ({"a": 1}, [1], "text", None):
        with pytest.raises(TypeError):
            tree._native.encode(bad)


def reseal(body: bytes) -> bytes:
    return body + snapshot.MAGIC + len(body).to_bytes(8, "big") + blake3.blake3(body).digest()


def envelope_with(root: bytes, **fields) -> bytes:
    """A snapshot body with ``root`` spliced in as raw CBOR and envelope fields overridable."""
    process = Process.builder("svit://local/tests/native-envelope").build()
    envelope = cbor2.loads(process.snapshot()[: -snapshot.TRAILER_BYTES])
    envelope.update(fields)
    envelope["root"] = cbor2.CBORTag(55799, None)  # a marker to replace by the raw root
    marker = cbor2.dumps(cbor2.CBORTag(55799, None))
    body = cbor2.dumps(dict(sorted(envelope.items())))
    return body.replace(marker, root)


# Root faults combined with envelope faults: the native path must report exactly what the
# general path reports (same code, same message), whichever fault the reader meets first.
ROOT_FAULTS = [
    bytes.fromhex("a3616101616202616103"),  # {a, b, a}: a duplicate key that is not adjacent
    bytes.fromhex("a2616281fb7ff8000000000000616101"),  # a NaN inside, keys out of order
    bytes.fromhex("a1616bf800"),  # a one-byte simple value
    bytes.fromhex("82 1b8000000000000000 c101".replace(" ", "")),  # 2**63, then a foreign tag
    bytes.fromhex("8142ab62c328"),  # a byte string, then invalid UTF-8 (truncated array)
    b"\x81" * 170 + b"\xa0",  # nested deeper than any tree may be
]
ENVELOPE_FAULTS = [
    {},
    {"format": "svit-snapshot@0"},
    {"version": -1},
    {"root_hash": 7},
    {"extra": 1},
]


@native
@pytest.mark.parametrize("root", ROOT_FAULTS, ids=lambda root: root[:12].hex())
@pytest.mark.parametrize("fields", ENVELOPE_FAULTS, ids=lambda fields: ",".join(fields) or "valid-envelope")
def test_restore_reports_the_same_error_on_both_paths(root, fields):
    blob = reseal(envelope_with(root, **fields))
    native_result = restored(blob)
    with python_only():
        python_result = restored(blob)
    assert native_result[0] == "rejected"
    assert native_result == python_result


@native
def test_restore_reports_the_same_error_when_limits_are_bad_too():
    # A faulty root must not let the envelope's limits error win on one path only.
    process = Process.builder("svit://local/tests/native-envelope").build()
    envelope = cbor2.loads(process.snapshot()[: -snapshot.TRAILER_BYTES])
    limits = dict(envelope["limits"], max_value_depth="deep")
    blob = reseal(envelope_with(ROOT_FAULTS[0], limits=limits))
    native_result = restored(blob)
    with python_only():
        assert restored(blob) == native_result


@native
def test_claimed_lengths_cannot_multiply_memory():
    # Every level claims as many items as bytes remain; only one level's worth of items
    # really exists. The reader must fail without allocating for every claim.
    size = 1_000_000
    data = b"".join(b"\x9b" + struct.pack(">Q", size - 9 * (k + 1) - 1) for k in range(150))
    data += bytes(size - len(data))
    tracemalloc.start()
    try:
        with pytest.raises(ValueError):
            tree.decode_node(data, 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024


@native
def test_deep_values_are_safe_on_small_thread_stacks():
    # Some platforms give threads 128 KiB stacks; the deepest value a tree accepts must
    # build, encode and decode there (in a child process, so a crash fails the test).
    program = textwrap.dedent(
        """
        import threading
        from svit import tree
        from svit.values import MAX_NESTING

        def work():
            value = {}
            for _ in range(MAX_NESTING - 1):
                value = {"k": value}
            node = tree.from_value(value, scripts_allowed=False)
            data = tree.node_cbor(node)
            assert tree.decode_node(data, 0)[0] == node
            print("ok", node.height)

        threading.stack_size(128 * 1024)
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        """
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["ok", str(MAX_NESTING - 1)]


@native
def test_encoding_a_forged_node_is_an_error_not_a_crash():
    forged = [
        tree.Node((5,)),
        tree.Node((6, {1: 2}, b"", 1, 0, 0, -1, [])),
        tree.Node((5, "not a tuple", b"", 1, 0, 0, -1, [])),
        tree.Node((6, ["not a dict"], b"", 1, 0, 0, -1, [])),
        tree.Node(("6", {}, b"", 1, 0, 0, -1, [])),
        tree.Node((4, object(), b"", 1, 0, 0, -1, None)),
    ]
    chain = tree.from_value([], scripts_allowed=False)
    for _ in range(MAX_NESTING + 5):
        chain = tree.Node((5, (chain,), b"", 10**12, 10**15, 0, -1, []))
    for node in forged + [chain]:
        with pytest.raises(InvalidValue):
            tree.node_cbor(node)


@native
def test_decode_reads_bytes_only():
    data = tree.node_cbor(tree.from_value({"a": 1}, scripts_allowed=False))
    assert tree.decode_node(data, 0)[1] == len(data)
    for other in (bytearray(data), memoryview(data)):
        with pytest.raises(TypeError):
            tree.decode_node(other, 0)
