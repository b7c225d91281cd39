"""Restore checks sizes while it reads the bytes, and accepts only canonical CBOR.

A snapshot is hostile input: its tree must be refused as soon as its heads show it is
larger than its limits (or the host's bounds) allow, before any of it is built, and a
snapshot restores only from the one byte string that encodes it.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from svit import Limits, Process, tree
from svit.errors import InvalidLimits, InvalidPersistence, InvalidSnapshot
from svit.snapshot import TRAILER_BYTES, decode_snapshot, encode_snapshot
from svit.store.archive import InvalidArchive, ProcessRecord, decode_generation, encode_generation
from svit.store.store import ProcessStore
from tests.bounds import assert_memory_within, measure
from tests.conftest import with_trailer

ADDRESS = "svit://local/tests/restore-bounds"


def snapshot_with(memory, limits: Limits, *, declared: Limits | None = None) -> bytes:
    """A snapshot whose /memory is ``memory``; ``declared`` overrides the limits the
    envelope states (a hostile snapshot claims small limits for a big tree)."""
    base = Process.builder(ADDRESS).limits(limits).build()
    _address, version, root, _limits = decode_snapshot(base.snapshot())
    root = tree.set_at(root, ("memory",), tree.from_value(memory, scripts_allowed=False))
    return encode_snapshot(ADDRESS, version, root, declared or limits)


# ---------------------------------------------------------------------------
# Sizes are checked before the tree is built

SMALL_NODES = Limits(max_tree_nodes=2_000)


def allowed_restore_peak(limits: Limits, memory) -> int:
    """Traced peak of restoring a valid snapshot as large as ``limits`` allow."""
    blob = snapshot_with(memory, limits)
    cost = measure(lambda: Process.restore(blob), memory=True)
    assert cost.error is None, cost.error
    return cost.peak_bytes


def test_a_tree_over_its_node_limit_is_refused_before_it_is_built():
    # 200,000 entries under a declared limit of 2,000 nodes: building it first took
    # about 190 MiB; refused from its heads it costs next to nothing.
    allowed = allowed_restore_peak(SMALL_NODES, {f"k{i}": [i] for i in range(900)})
    hostile = snapshot_with({f"k{i}": [i] for i in range(200_000)}, Limits(max_tree_nodes=10_000_000), declared=SMALL_NODES)
    cost = measure(lambda: Process.restore(hostile), memory=True)
    assert isinstance(cost.error, InvalidSnapshot), cost.error
    assert cost.error.code == "invalid_snapshot"
    assert "process tree nodes limit (2000)" in cost.error.message
    assert_memory_within(cost, allowed)


def test_a_body_longer_than_its_bounds_is_scanned_before_it_is_decoded():
    # Restore decodes the whole body with cbor2; a body with more bytes than its node or
    # text bound could be a tree over them, so the scan comes first.
    allowed = allowed_restore_peak(SMALL_NODES, {f"k{i}": [i] for i in range(900)})
    hostile = snapshot_with({f"k{i}": [i] for i in range(200_000)}, Limits(max_tree_nodes=10_000_000), declared=SMALL_NODES)
    cost = measure(lambda: Process.restore(hostile), memory=True)
    assert isinstance(cost.error, InvalidSnapshot) and "process tree nodes limit" in cost.error.message, cost.error
    assert_memory_within(cost, allowed)
    blob = canonical_snapshot({"a": [1, 2.5, "x"]})
    assert Process.restore(blob).snapshot() == blob


def test_a_tree_over_its_text_limit_is_refused_before_it_is_built():
    small_text = Limits(max_tree_text_bytes=64 * 1024)
    allowed = allowed_restore_peak(small_text, {"t": "x" * 60_000})
    # Many small strings, so building them first costs far more than their bytes.
    hostile = snapshot_with(
        [f"{i:08d}" for i in range(300_000)], Limits(max_tree_nodes=10_000_000, max_tree_text_bytes=2**29),
        declared=small_text,
    )
    cost = measure(lambda: Process.restore(hostile), memory=True)
    assert isinstance(cost.error, InvalidSnapshot), cost.error
    assert "process tree text bytes limit (65536)" in cost.error.message
    assert_memory_within(cost, allowed)


def test_the_host_bounds_what_a_restore_may_build():
    blob = snapshot_with({f"k{i}": i for i in range(500)}, Limits())
    assert Process.restore(blob).read("/memory/k499") == 499
    with pytest.raises(InvalidSnapshot, match="process tree nodes limit \\(100\\)"):
        Process.restore(blob, max_tree_nodes=100)
    with pytest.raises(InvalidSnapshot, match="process tree text bytes limit \\(100\\)"):
        Process.restore(blob, max_tree_text_bytes=100)
    with pytest.raises(InvalidSnapshot, match="byte limit"):
        Process.restore(blob, max_bytes=len(blob) - 1)
    # The host's bound only lowers the snapshot's own: a larger one changes nothing.
    assert Process.restore(blob, max_tree_nodes=10**9).limits == Limits()
    with pytest.raises(InvalidLimits):
        Process.restore(blob, max_tree_nodes=-1)


def test_the_node_and_text_counts_are_exact():
    value = {"a": ["xyz", 1, 2.5, None, True], "b": {"é": "ü" * 3, "": []}}
    blob = snapshot_with(value, Limits())
    restored = Process.restore(blob)
    _address, _version, root, _limits = decode_snapshot(blob)
    assert Process.restore(blob, max_tree_nodes=root.count, max_tree_text_bytes=root.text).root_hash == restored.root_hash
    with pytest.raises(InvalidSnapshot, match="nodes"):
        Process.restore(blob, max_tree_nodes=root.count - 1)
    with pytest.raises(InvalidSnapshot, match="text bytes"):
        Process.restore(blob, max_tree_text_bytes=root.text - 1)


def test_nesting_is_bounded_by_the_value_depth_limit():
    deep: object = 1
    for _ in range(40):
        deep = [deep]
    limits = Limits(max_value_depth=8)
    blob = snapshot_with(deep, Limits(max_value_depth=64), declared=limits)
    with pytest.raises(InvalidSnapshot, match="nesting is too deep"):
        Process.restore(blob)


def test_the_envelope_outside_the_root_is_bounded():
    import cbor2

    envelope = cbor2.loads(snapshot_with({}, Limits())[:-TRAILER_BYTES], tag_hook=lambda tag, _i: tag)
    envelope["aaa"] = list(range(300_000))  # an unknown field sorts first; still scanned, not built
    body = cbor2.dumps(dict(sorted(envelope.items())))
    cost = measure(lambda: Process.restore(with_trailer(body)), memory=True)
    assert isinstance(cost.error, InvalidSnapshot) and "envelope item limit" in cost.error.message, cost.error
    assert_memory_within(cost, 64 * 1024)


def test_the_store_and_the_archive_restore_through_the_same_bounds(tmp_path):
    allowed = allowed_restore_peak(SMALL_NODES, {f"k{i}": [i] for i in range(900)})
    hostile = snapshot_with({f"k{i}": [i] for i in range(200_000)}, Limits(max_tree_nodes=10_000_000), declared=SMALL_NODES)

    store = ProcessStore.open(str(tmp_path / "store"))

    def from_store():
        return store._restore(hostile, "stored snapshot")

    try:
        cost = measure(from_store, memory=True)
    finally:
        store.close()
    assert isinstance(cost.error, InvalidPersistence) and "process tree nodes limit" in cost.error.message, cost.error
    assert_memory_within(cost, allowed)

    generation = encode_generation(
        store_id="s", generation=1, sequence=1, cut_time=0, writer="w",
        processes=[ProcessRecord(ADDRESS, 0, "0" * 64, hostile)], tombstones=[],
    )
    cost = measure(lambda: decode_generation(generation), memory=True)
    assert isinstance(cost.error, InvalidArchive) and "process tree nodes limit" in cost.error.message, cost.error
    assert_memory_within(cost, allowed + len(generation))


# ---------------------------------------------------------------------------
# Canonical CBOR only

I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
PLAIN = st.recursive(
    st.none() | st.booleans() | I64 | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)
# Something of every kind a mutation needs, whatever the drawn value holds.
FIXED = {"ints": [0, 23, 24, 255, 256, 65535, 65536, -1, -25], "floats": [0.0, 1.5, 0.1], "map": {"a": 1, "b": "two"}}


def items(body: bytes) -> list[dict]:
    """Every item of a CBOR body with where its head and contents lie (a test's own reader)."""
    found: list[dict] = []

    def walk(position: int, key: bool = False) -> int:
        initial = body[position]
        major, info = initial >> 5, initial & 0x1F
        width = 0 if info < 24 else 1 << (info - 24)
        argument = info if info < 24 else int.from_bytes(body[position + 1 : position + 1 + width], "big")
        item = {"start": position, "head_end": position + 1 + width, "major": major, "info": info,
                "argument": argument, "key": key, "children": []}
        found.append(item)
        cursor = item["head_end"]
        if major in (2, 3):
            cursor += argument
        elif major == 4:
            for _ in range(argument):
                item["children"].append(cursor)
                cursor = walk(cursor)
        elif major == 5:
            for _ in range(argument):
                item["children"].append(cursor)
                cursor = walk(walk(cursor, key=True))
        elif major == 6:
            cursor = walk(cursor)
        item["end"] = cursor
        return cursor

    assert walk(0) == len(body)
    return found


def head(major: int, argument: int, width: int) -> bytes:
    info = {1: 24, 2: 25, 4: 26, 8: 27}[width]
    return bytes([major << 5 | info]) + argument.to_bytes(width, "big")


def widen(body: bytes, item: dict) -> bytes:
    width = {24: 1, 25: 2, 26: 4, 27: 8}.get(item["info"], 0)
    wider = next(w for w in (1, 2, 4, 8) if w > width)
    return body[: item["start"]] + head(item["major"], item["argument"], wider) + body[item["head_end"] :]


def indefinite(body: bytes, item: dict) -> bytes:
    marker = bytes([item["major"] << 5 | 31])
    # A string becomes one definite chunk inside an indefinite string.
    inside = body[item["start"] : item["end"]] if item["major"] in (2, 3) else body[item["head_end"] : item["end"]]
    return body[: item["start"]] + marker + inside + b"\xff" + body[item["end"] :]


def narrow_float(body: bytes, item: dict) -> bytes:
    value = struct.unpack(">d", body[item["start"] + 1 : item["end"]])[0]
    try:
        half = struct.pack(">e", value)
    except OverflowError:
        half = None
    fits_half = half is not None and struct.unpack(">e", half)[0] == value
    narrow = b"\xf9" + half if fits_half else b"\xfa" + struct.pack(">f", value)
    return body[: item["start"]] + narrow + body[item["end"] :]


def negative_zero(body: bytes, item: dict) -> bytes:
    return body[: item["start"]] + b"\xfb" + struct.pack(">d", -0.0) + body[item["end"] :]


def _entries(body: bytes, item: dict) -> list[tuple[int, int]]:
    """(start, end) of each key-value entry of a map item."""
    starts = item["children"]
    return [(s, starts[i + 1] if i + 1 < len(starts) else item["end"]) for i, s in enumerate(starts)]


def swap_entries(body: bytes, item: dict) -> bytes:
    (a0, a1), (b0, b1) = _entries(body, item)[:2]
    return body[:a0] + body[b0:b1] + body[a0:a1] + body[b1:]


def repeat_key(body: bytes, item: dict) -> bytes:
    (a0, a1), (b0, b1) = _entries(body, item)[:2]
    first_key_end = next(i["end"] for i in items(body) if i["start"] == a0)
    second_key_end = next(i["end"] for i in items(body) if i["start"] == b0)
    return body[:b0] + body[a0:first_key_end] + body[second_key_end:]


def is_float(item: dict) -> bool:
    return item["major"] == 7 and item["info"] == 27


def fits_narrower(body: bytes, item: dict) -> bool:
    value = struct.unpack(">d", body[item["start"] + 1 : item["end"]])[0]
    try:
        return struct.unpack(">f", struct.pack(">f", value))[0] == value
    except OverflowError:
        return False


MUTATIONS = {
    "longer than needed": (lambda i, b: i["major"] <= 6 and i["info"] != 27, widen),
    "indefinite length": (lambda i, b: i["major"] in (2, 3, 4, 5), indefinite),
    "narrower than binary64": (lambda i, b: is_float(i) and fits_narrower(b, i), narrow_float),
    "negative zero": (lambda i, b: is_float(i), negative_zero),
    "not in canonical order": (lambda i, b: i["major"] == 5 and i["argument"] >= 2, swap_entries),
    "repeated map key": (lambda i, b: i["major"] == 5 and i["argument"] >= 2, repeat_key),
}


def canonical_snapshot(value) -> bytes:
    builder = Process.builder(ADDRESS).memory("value", value).memory("fixed", FIXED)
    return builder.library("echo", "(define (main input) input)", documentation="é").build().snapshot()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PLAIN)
def test_a_canonical_snapshot_restores_to_identical_bytes(value):
    blob = canonical_snapshot(value)
    assert Process.restore(blob).snapshot() == blob


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PLAIN, st.sampled_from(sorted(MUTATIONS)), st.data())
def test_every_non_canonical_encoding_is_refused(value, kind, data):
    body = canonical_snapshot(value)[:-TRAILER_BYTES]
    eligible, mutate = MUTATIONS[kind]
    sites = [item for item in items(body) if eligible(item, body)]
    mutated = mutate(body, data.draw(st.sampled_from(sites)))
    assert mutated != body
    with pytest.raises(InvalidSnapshot, match=kind):
        Process.restore(with_trailer(mutated))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PLAIN)
def test_the_bounds_are_exact_for_any_tree(value):
    blob = canonical_snapshot(value)
    _address, _version, root, _limits = decode_snapshot(blob)
    Process.restore(blob, max_tree_nodes=root.count, max_tree_text_bytes=root.text)
    with pytest.raises(InvalidSnapshot, match="nodes"):
        Process.restore(blob, max_tree_nodes=root.count - 1)
    if root.text:
        with pytest.raises(InvalidSnapshot, match="text bytes"):
            Process.restore(blob, max_tree_text_bytes=root.text - 1)
