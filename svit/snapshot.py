"""The snapshot file format ``svit-snapshot@2``.

Layout::

    body    = deterministic CBOR of the envelope map
              {format, id, limits, root, root_hash, version}   (keys in code-point order)
    trailer = MAGIC (8 bytes) || u64be(len(body)) || BLAKE3(body) (32 bytes)
    file    = body || trailer

The body encodes values with their kinds: an integer is a CBOR integer, a number is a
CBOR binary64 float (so ``1.0`` stays a float), maps are emitted in code-point key
order, and a script record is ``tag(0x53564954, [source, documentation])``. Encoding is
a pure function of the tree, so equal processes give byte-identical snapshots.

The trailer lets restore reject any truncation or bit flip before one byte of the body
is decoded. It is an integrity check, not an authenticity proof: anyone can recompute
it, so the body is still decoded as untrusted input. Before anything is built, the body
must be bounded by its limits and the host's: either it is so short that no tree it
encodes can exceed them (every node and every text byte costs at least one byte of the
body), or one pass over its item heads counts the tree's nodes, text bytes and depth
first. It must be the canonical encoding (the only bytes this module would write for
it): the scan checks every head, or, for a short body, the restored tree is written
again (from its chunks' own encodings) and compared, and where it differs the scan names
the first difference. Only our own tag is accepted, every value is
checked, the chunks are rebuilt (chunk boundaries are not in the file) and the root hash
is recomputed. docs/durability.md, "Restoring a snapshot", lists every check in order.
"""

from __future__ import annotations

from hmac import compare_digest
from typing import Any

import blake3

from . import cbor, tree
from .errors import InvalidLimits, InvalidSnapshot, InvalidValue, SvitError
from .limits import LIMIT_FIELDS, LIMIT_TABLE, Limits
from .paths import validate_address
from .tree import Node, from_decoded
from .values import MAX_NESTING

FORMAT = "svit-snapshot@2"
MAGIC = b"SVIT\x00sn2"
TRAILER_BYTES = len(MAGIC) + 8 + 32
MAX_SNAPSHOT_BYTES = 128 * 1024 * 1024
U64_MAX = 2**64 - 1

_ENVELOPE_KEYS = frozenset({"format", "id", "limits", "root", "root_hash", "version"})
_SORTED_LIMITS = tuple(sorted(LIMIT_FIELDS))
# Envelope (1) + root map + nesting the tree builder accepts, with room for the
# script tag and the one-item framing of :func:`svit.cbor.decode_item`.
_MAX_CBOR_DEPTH = MAX_NESTING + 8


def encode_snapshot(address: str, version: int, root: Node, limits: Limits) -> bytes:
    """Serialize one committed state; deterministic for equal inputs."""
    validate_address(address)
    if type(version) is not int or not 0 <= version <= U64_MAX:
        raise InvalidValue("version must be an unsigned 64-bit integer")
    if type(root) is not Node:
        raise InvalidValue("snapshot root must be a tree node")
    limits.validate()
    values = limits.to_dict()
    envelope = {
        "format": FORMAT,
        "id": address,
        "limits": {name: values[name] for name in _SORTED_LIMITS},
        "root": cbor.Raw(tree.node_cbor(root)),
        "root_hash": root.hash,
        "version": version,
    }
    body = cbor.encode(envelope)
    return body + MAGIC + len(body).to_bytes(8, "big") + blake3.blake3(body).digest()


# ---------------------------------------------------------------------------
# Decoding untrusted bytes


def _check_trailer(data: bytes) -> int:
    """The body's length once the trailer proves it intact (the body is not copied)."""
    if len(data) < TRAILER_BYTES:
        raise InvalidSnapshot("snapshot is truncated or corrupted")
    body_length = len(data) - TRAILER_BYTES
    trailer = data[body_length:]
    if (
        trailer[: len(MAGIC)] != MAGIC
        or int.from_bytes(trailer[len(MAGIC) : len(MAGIC) + 8], "big") != body_length
    ):
        raise InvalidSnapshot("snapshot is truncated or corrupted")
    with memoryview(data) as view:
        digest = blake3.blake3(view[:body_length]).digest()
    if not compare_digest(trailer[len(MAGIC) + 8 :], digest):
        raise InvalidSnapshot("snapshot is truncated or corrupted")
    return body_length


# ---------------------------------------------------------------------------
# The bounded canonical scan: every item head of the body is read and checked before a
# single object of the tree is built, so a snapshot larger than its limits (or than the
# host's) is refused having cost one pass over its bytes and no memory.

#: What the envelope's fields other than ``root`` may hold together (items, text bytes):
#: six fields, the limits map and an address need far less.
ENVELOPE_MAX_ITEMS = 256
ENVELOPE_MAX_TEXT_BYTES = 64 * 1024
#: Below the root, the deepest valid tree: a thread record (``max_value_depth``) inside
#: ``/thread/events`` inside ``/thread`` inside the root.
ROOT_DEPTH_ALLOWANCE = 3
_NEGATIVE_ZERO = 0x8000_0000_0000_0000
# The smallest argument each head width may carry (below it a shorter head exists).
_HEAD_MINIMUM = {24: 24, 25: 0x100, 26: 0x1_0000, 27: 0x1_0000_0000}


class _Budget:
    """Nodes and text bytes an item may hold, and how deep it may nest."""

    __slots__ = ("max_nodes", "max_text", "max_depth", "nodes_limit", "text_limit")

    def __init__(self, max_nodes: int, max_text: int, max_depth: int, nodes_limit: str, text_limit: str) -> None:
        self.max_nodes, self.max_text, self.max_depth = max_nodes, max_text, max_depth
        self.nodes_limit, self.text_limit = nodes_limit, text_limit


def _over(limit: str, allowed: int) -> InvalidSnapshot:
    return InvalidSnapshot(f"snapshot exceeds {limit} ({allowed})")


def _not_canonical(what: str, position: int) -> InvalidSnapshot:
    return InvalidSnapshot(f"snapshot body is not canonical CBOR: {what} at byte {position}")


def _malformed(what: str, position: int) -> InvalidSnapshot:
    return InvalidSnapshot(f"snapshot body is malformed: {what} at byte {position}")


def _non_finite(info: int, bits: int) -> bool:
    """Whether a half (info 25) or single (info 26) float's exponent is all ones."""
    return (bits >> 10) & 0x1F == 0x1F if info == 25 else (bits >> 23) & 0xFF == 0xFF


def _head(data: bytes, position: int, end: int) -> tuple[int, int, int, int]:
    """``(major, additional info, argument, end of head)`` of a canonical definite head."""
    if position >= end:
        raise _malformed("truncated item", position)
    initial = data[position]
    major, info = initial >> 5, initial & 0x1F
    if info < 24:
        return major, info, info, position + 1
    if info > 27:
        if info == 31:
            raise _not_canonical("indefinite length", position)
        raise _malformed("reserved additional information", position)
    width = 1 << (info - 24)
    stop = position + 1 + width
    if stop > end:
        raise _malformed("truncated item head", position)
    argument = int.from_bytes(data[position + 1 : stop], "big")
    if major == 7:
        if info == 24:
            if argument < 32:
                raise _malformed("simple value in a two-byte head", position)
        elif info != 27:
            # A non-finite float is refused as a value (numbers must be finite) later.
            if not _non_finite(info, argument):
                raise _not_canonical("float narrower than binary64", position)
        elif argument == _NEGATIVE_ZERO:
            raise _not_canonical("negative zero (written as 0.0)", position)
    elif argument < _HEAD_MINIMUM[info]:
        raise _not_canonical("integer or length head longer than needed", position)
    return major, info, argument, stop


def _scan_item(data: bytes, position: int, end: int, budget: _Budget) -> tuple[int, int, int]:
    """Check one canonical item at ``position``; ``(end of item, nodes, text bytes)``.

    Nodes are counted as the tree counts them (every value, a script record as one);
    text bytes as the tree does (strings, map keys, script source and documentation).
    Raises ``InvalidSnapshot`` at the first head past a budget, before reading further.
    """
    max_nodes, max_text, max_depth = budget.max_nodes, budget.max_text, budget.max_depth
    nodes = text = 0
    # The innermost open container lives in locals (entries left, is a map, next item
    # is a key, previous key); the ones around it wait on ``outer``.
    outer: list[tuple[int, bool, bytes | None]] = []
    left, in_map, want_key, previous = 1, False, False, None
    while True:
        # The head, inlined for the common one-byte case.
        if position >= end:
            raise _malformed("truncated item", position)
        initial = data[position]
        major = initial >> 5
        info = initial & 0x1F
        if info < 24:
            argument = info
            position += 1
        elif info == 24 and major != 7 and position + 1 < end and data[position + 1] >= 24:
            argument = data[position + 1]
            position += 2
        else:
            major, info, argument, position = _head(data, position, end)
        if want_key:
            # A map key: text, strictly increasing in code-point (UTF-8 byte) order.
            if major != 3:
                raise _malformed("map keys must be text", position)
            stop = position + argument
            if stop > end:
                raise _malformed("text runs past the body", position)
            text += argument
            if text > max_text:
                raise _over(budget.text_limit, max_text)
            key = data[position:stop]
            if previous is not None and key <= previous:
                raise _not_canonical(
                    "repeated map key" if key == previous else "map keys are not in canonical order", position
                )
            previous, want_key, position = key, False, stop
            continue
        nodes += 1
        if nodes > max_nodes:
            raise _over(budget.nodes_limit, max_nodes)
        if major == 3 or major == 2:
            position += argument
            if position > end:
                raise _malformed("text runs past the body", position)
            text += argument
            if text > max_text:
                raise _over(budget.text_limit, max_text)
        elif major == 4 or major == 5:
            if argument:
                if argument > (end - position) // (2 if major == 5 else 1):
                    raise _malformed("length exceeds the body", position)
                if len(outer) >= max_depth:
                    raise InvalidSnapshot("snapshot nesting is too deep")
                outer.append((left, in_map, previous))
                left, in_map, previous = argument, major == 5, None
                want_key = in_map
                continue
        elif major == 6:
            if argument != cbor.SCRIPT_TAG:
                raise _malformed("unsupported CBOR tag", position)
            major, info, argument, position = _head(data, position, end)
            if major != 4 or argument != 2:
                raise _malformed("malformed script record", position)
            for _part in range(2):
                major, info, argument, position = _head(data, position, end)
                if major != 3:
                    raise _malformed("malformed script record", position)
                position += argument
                if position > end:
                    raise _malformed("text runs past the body", position)
                text += argument
                if text > max_text:
                    raise _over(budget.text_limit, max_text)
        # One value is complete: close every container it completes.
        left -= 1
        while not left:
            if not outer:
                return position, nodes, text
            left, in_map, previous = outer.pop()
            left -= 1
        want_key = in_map


def _text_at(data: bytes, position: int, end: int) -> tuple[bytes | None, int]:
    """An envelope key (short text) and where its value starts; None if it is not one."""
    major, _info, argument, stop = _head(data, position, end)
    if major != 3 or argument > ENVELOPE_MAX_TEXT_BYTES or stop + argument > end:
        return None, position
    return data[stop : stop + argument], stop + argument


def _scan_body(
    data: bytes, end: int, max_tree_nodes: int | None, max_tree_text_bytes: int | None
) -> None:
    """Refuse a body that is not exactly one canonical envelope, or whose tree is larger
    than its limits (capped by the hard maxima and by the host's bounds) allow."""
    major, _info, count, position = _head(data, 0, end)
    if major != 5:
        raise InvalidSnapshot("snapshot envelope must be a map")
    if count > len(_ENVELOPE_KEYS) + 1 or count > (end - position) // 2:
        raise InvalidSnapshot("snapshot envelope has too many fields")
    limits: Limits | None = None
    previous: bytes | None = None
    used_items = used_text = 0
    for _ in range(count):
        key, value_start = _text_at(data, position, end)
        if key is None:
            raise _malformed("envelope keys must be short text", position)
        if previous is not None and key <= previous:
            raise _not_canonical(
                "repeated map key" if key == previous else "map keys are not in canonical order", position
            )
        previous = key
        if key == b"root":
            nodes, text, depth = _bounds(limits, max_tree_nodes, max_tree_text_bytes)
            budget = _Budget(nodes, text, depth, "the process tree nodes limit", "the process tree text bytes limit")
            position, _nodes, _text = _scan_item(data, value_start, end, budget)
            continue
        remaining = _Budget(
            ENVELOPE_MAX_ITEMS - used_items,
            ENVELOPE_MAX_TEXT_BYTES - used_text,
            4,
            "the envelope item limit",
            "the envelope text limit",
        )
        position, items, text_bytes = _scan_item(data, value_start, end, remaining)
        used_items += items
        used_text += text_bytes + len(key)
        if key == b"limits":
            # Small by the envelope budget; needed now, to bound the root that follows.
            limits = Limits.from_dict(_decode_body(data[value_start:position]))
    if position != end:
        raise InvalidSnapshot("snapshot body has trailing data")


def _decode_body(body: bytes) -> Any:
    """Exactly one CBOR item, strictly: no indefinite lengths, no duplicate keys, no foreign tags."""
    try:
        return cbor.decode_item(body, max_depth=_MAX_CBOR_DEPTH - 1)
    except cbor.CBORDecodeError as exc:
        if exc.reason == "too_deep":
            raise InvalidSnapshot("snapshot nesting is too deep") from None
        if exc.reason == "trailing":
            raise InvalidSnapshot("snapshot body has trailing data") from None
        suffix = f": {exc.kind}" if exc.kind is not None else ""
        raise InvalidSnapshot(f"snapshot body is malformed{suffix}") from None


def decode_snapshot(
    data: bytes,
    *,
    max_bytes: int | None = None,
    max_tree_nodes: int | None = None,
    max_tree_text_bytes: int | None = None,
) -> tuple[str, int, Node, Limits]:
    """Decode and verify snapshot bytes: the root hash is checked before returning."""
    address, version, root, limits, claimed = decode_snapshot_unverified(
        data, max_bytes=max_bytes, max_tree_nodes=max_tree_nodes, max_tree_text_bytes=max_tree_text_bytes
    )
    check_root_hash(root, claimed)
    return address, version, root, limits


def decode_snapshot_unverified(
    data: bytes,
    *,
    max_bytes: int | None = None,
    max_tree_nodes: int | None = None,
    max_tree_text_bytes: int | None = None,
) -> tuple[str, int, Node, Limits, str]:
    """Decode snapshot bytes into ``(address, version, root, limits, claimed_root_hash)``.

    ``max_bytes`` bounds the whole snapshot (default :data:`MAX_SNAPSHOT_BYTES`);
    ``max_tree_nodes`` and ``max_tree_text_bytes`` are the host's bounds on the tree,
    applied on top of the snapshot's own limits (which cannot exceed the hard maxima).
    The body is scanned head by head against those bounds, and checked to be canonical,
    before any of the tree is built (docs/durability.md, "Restoring a snapshot").

    The caller validates the root schema and then calls :func:`check_root_hash`, the
    reference's order (a forged identity reports the identity, not the hash). Raises
    only :class:`~svit.errors.SvitError` subclasses: ``InvalidSnapshot`` for
    anything wrong with the bytes or the envelope, ``InvalidLimits`` for limits outside
    their hard maxima. Root-schema validation belongs to the process layer.
    """
    for name, bound in (("max_tree_nodes", max_tree_nodes), ("max_tree_text_bytes", max_tree_text_bytes)):
        if bound is not None and (type(bound) is not int or bound < 0):
            raise InvalidLimits(f"restore bound {name} must be a non-negative integer")
    try:
        byte_bound = MAX_SNAPSHOT_BYTES if max_bytes is None else max_bytes
        return _decode(data, byte_bound, max_tree_nodes, max_tree_text_bytes)
    except SvitError:
        raise
    except RecursionError:
        raise InvalidSnapshot("snapshot nesting is too deep") from None
    except Exception as exc:  # defensive: nothing else may escape on untrusted bytes
        raise InvalidSnapshot(f"snapshot is malformed: {type(exc).__name__}") from None


def _decode(
    data: Any, max_bytes: int, max_tree_nodes: int | None, max_tree_text_bytes: int | None
) -> tuple[str, int, Node, Limits, str]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidSnapshot("snapshot must be bytes")
    if isinstance(data, memoryview):
        if data.nbytes > max_bytes:
            raise InvalidSnapshot("snapshot byte limit exceeded")
        data = data.tobytes()
    if len(data) > max_bytes:
        raise InvalidSnapshot("snapshot byte limit exceeded")
    if type(data) is not bytes:
        data = bytes(data)
    body_length = _check_trailer(data)
    nodes_bound, text_bound, depth_bound = _root_bounds(data, body_length, max_tree_nodes, max_tree_text_bytes)
    short = body_length <= nodes_bound and body_length <= text_bound
    body = data[:body_length]
    if short:
        try:
            envelope = cbor.decode_item(body, max_depth=_MAX_CBOR_DEPTH - 1)
        except cbor.CBORDecodeError:
            _scan_body(data, body_length, max_tree_nodes, max_tree_text_bytes)  # names the problem
            envelope = _decode_body(body)
    else:
        _scan_body(data, body_length, max_tree_nodes, max_tree_text_bytes)
        envelope = _decode_body(body)
    if type(envelope) is not dict:
        raise InvalidSnapshot("snapshot envelope must be a map")
    if "format" in envelope and envelope["format"] != FORMAT:
        raise InvalidSnapshot(f"unsupported format {str(envelope['format'])[:64]!r}")
    if envelope.keys() != _ENVELOPE_KEYS:
        extra = sorted(map(str, envelope.keys() - _ENVELOPE_KEYS))
        missing = sorted(_ENVELOPE_KEYS - envelope.keys())
        detail = f"unknown field {extra[0]!r}" if extra else f"missing field {missing[0]!r}"
        raise InvalidSnapshot(f"snapshot envelope: {detail}")
    address = envelope["id"]
    try:
        validate_address(address)
    except InvalidValue:
        raise InvalidSnapshot("snapshot id is not a valid process address") from None
    version = envelope["version"]
    if type(version) is not int or not 0 <= version <= U64_MAX:
        raise InvalidSnapshot("snapshot version must be an unsigned 64-bit integer")
    claimed = envelope["root_hash"]
    if type(claimed) is not str:
        raise InvalidSnapshot("snapshot root_hash must be text")
    limits = Limits.from_dict(envelope["limits"])
    try:
        root = from_decoded(envelope["root"])
    except InvalidValue as exc:
        if short:  # keys out of order or a negative zero: the scan names where
            _scan_body(data, body_length, max_tree_nodes, max_tree_text_bytes)
        raise InvalidSnapshot(f"invalid root value: {exc.detail}") from None
    if root.height > depth_bound:
        raise InvalidSnapshot("snapshot nesting is too deep")
    if short and cbor.encode(dict(envelope, root=cbor.Raw(tree.node_cbor(root)))) != body:
        # Not the one encoding of what it holds: the scan names the first difference.
        _scan_body(data, body_length, max_tree_nodes, max_tree_text_bytes)
        raise InvalidSnapshot("snapshot body is not canonical CBOR")
    return address, version, root, limits, claimed


def _root_bounds(data: bytes, end: int, max_tree_nodes: int | None, max_tree_text_bytes: int | None) -> tuple[int, int, int]:
    """The root's bounds (:func:`_bounds`) from the limits the envelope states before the
    root; hard maxima when they cannot be read cheaply (the scan then reports what is wrong)."""
    return _bounds(_peek_limits(data, end), max_tree_nodes, max_tree_text_bytes)


def _bounds(limits: Limits | None, max_tree_nodes: int | None, max_tree_text_bytes: int | None) -> tuple[int, int, int]:
    """(nodes, text bytes, depth) the root may hold at most: the snapshot's limits (hard
    maxima when unknown) capped by the host's bounds."""
    if limits is None:
        limits = Limits(**{name: LIMIT_TABLE[name][1] for name in LIMIT_FIELDS})
    nodes, text = limits.max_tree_nodes, limits.max_tree_text_bytes
    if max_tree_nodes is not None:
        nodes = min(nodes, max_tree_nodes)
    if max_tree_text_bytes is not None:
        text = min(text, max_tree_text_bytes)
    return nodes, text, min(limits.max_value_depth + ROOT_DEPTH_ALLOWANCE, MAX_NESTING)


def _peek_limits(data: bytes, end: int) -> Limits | None:
    """The envelope's limits when they come before the root (they do: keys are sorted)."""
    major, _info, count, position = _head(data, 0, end)
    if major != 5 or count > len(_ENVELOPE_KEYS) + 1:
        return None
    remaining = _Budget(ENVELOPE_MAX_ITEMS, ENVELOPE_MAX_TEXT_BYTES, 4, "the envelope item limit", "the envelope text limit")
    for _ in range(count):
        key, value_start = _text_at(data, position, end)
        if key is None or key == b"root":
            return None
        position, _items, _text = _scan_item(data, value_start, end, remaining)
        if key == b"limits":
            return Limits.from_dict(_decode_body(data[value_start:position]))
    return None


def check_root_hash(root: Node, claimed: str) -> None:
    """The last restore step (after schema validation, as the reference orders it)."""
    if root.hash != claimed:
        raise InvalidSnapshot("root hash mismatch")


__all__ = [
    "FORMAT",
    "MAGIC",
    "MAX_SNAPSHOT_BYTES",
    "TRAILER_BYTES",
    "encode_snapshot",
    "decode_snapshot",
    "decode_snapshot_unverified",
    "check_root_hash",
]
