"""The store's record encodings over :mod:`svit.cbor`, and their strict decoders.

Every record of the history (base, head, transaction, store snapshot, fork reference,
tombstone) is a sealed map (:func:`svit.cbor.seal`): the one deterministic encoding,
keys in UTF-8 byte order, with a hash field holding the BLAKE3 of the encoding of the
other fields. Decoding is strict (one item, no indefinite lengths, no duplicate keys,
no foreign tags, exactly the declared fields, the deterministic bytes) because stored
bytes are checked, never trusted: a flipped byte anywhere is either a decode failure,
a hash mismatch or a non-canonical encoding, and each is reported as
``InvalidPersistence`` naming the record. The ``*_FIELDS`` tuples declare which fields
a record has, not their order on disk.

Tree nodes are stored content-addressed by their structural digest: a container is
``[kind, items]`` where a child container is ``tag(NODE_TAG, digest)`` and a leaf is
inline. Its digest is recomputable from its own bytes (leaf digests from the values,
child digests from the references), so a stored tree is verified top-down as a Merkle
tree without rebuilding it.
"""

from __future__ import annotations

import functools
import re
import struct
from typing import Any

import blake3

from .. import cbor, tree
from ..errors import InvalidPersistence, InvalidValue
from ..tree import Node

__all__ = [
    "NODE_TAG",
    "TRANSACTION_FORMAT",
    "BASE_FORMAT",
    "HEAD_FORMAT",
    "SNAPSHOT_FORMAT",
    "FORK_FORMAT",
    "TOMBSTONE_FORMAT",
    "NODE_FORMAT",
    "TRANSACTION_FIELDS",
    "BASE_FIELDS",
    "HEAD_FIELDS",
    "SNAPSHOT_FIELDS",
    "FORK_FIELDS",
    "TOMBSTONE_FIELDS",
    "Ref",
    "loads_strict",
    "dumps",
    "hashed_record",
    "decode_record",
    "is_hex_hash",
    "is_u64",
    "encode_node",
    "container_children",
    "verify_node",
]

#: Tag of a reference to a stored child container (spells "SVND"); only in node records.
NODE_TAG = 0x53564E44
# Format 2: every record in the one deterministic encoding of :mod:`svit.cbor` (format
# 1 wrote its fields in declared order). Node bytes did not change, so nodes stay at 1.
TRANSACTION_FORMAT = "svit-transaction@2"
BASE_FORMAT = "svit-base@2"
HEAD_FORMAT = "svit-head@2"
SNAPSHOT_FORMAT = "svit-store-snapshot@2"
FORK_FORMAT = "svit-fork@2"
TOMBSTONE_FORMAT = "svit-tombstone@2"
NODE_FORMAT = "svit-node@1"

TRANSACTION_FIELDS = (
    "event_format",
    "address",
    "position",
    "previous_hash",
    "process_version_before",
    "process_version_after",
    "mutations",
    "touched_paths",
    "source",
    "resulting_root_hash",
)
BASE_FIELDS = ("base_format", "address", "covered_position", "anchor_event_hash", "process_version", "root_hash", "origin")
HEAD_FIELDS = ("head_format", "address", "base_hash", "position", "hash", "process_version", "root_hash")
SNAPSHOT_FIELDS = (
    "snapshot_format",
    "address",
    "covered_position",
    "head_hash",
    "process_version",
    "root_hash",
    "process_snapshot",
)
FORK_FIELDS = (
    "fork_format",
    "child_address",
    "parent_address",
    "parent_position",
    "parent_head_hash",
    "parent_process_version",
    "parent_root_hash",
)
TOMBSTONE_FIELDS = ("tombstone_format", "address", "process_version", "root_hash", "removed_at")

_Q = struct.Struct(">Q").pack
_H = blake3.blake3


class Ref:
    """A decoded reference to a stored child container."""

    __slots__ = ("digest",)

    def __init__(self, digest: bytes) -> None:
        self.digest = digest


def _node_ref(value: Any) -> Ref:
    if type(value) is not bytes or len(value) != 32:
        raise ValueError("malformed node reference")
    return Ref(value)


_NODE_TAGS = {cbor.SCRIPT_TAG: cbor.script_from_tag, NODE_TAG: _node_ref}


def loads_strict(data: bytes, what: str, *, refs: bool = False) -> Any:
    """Exactly one CBOR item, strictly; any failure is InvalidPersistence naming ``what``."""
    if type(data) is not bytes:
        raise InvalidPersistence(f"{what}: stored value is not bytes")
    try:
        return cbor.decode_item(data, tags=_NODE_TAGS if refs else None)
    except cbor.CBORDecodeError as exc:
        raise InvalidPersistence(f"{what}: {exc.detail}") from None


def dumps(value: Any) -> bytes:
    """The deterministic encoding of a record value (:func:`svit.cbor.encode`)."""
    return cbor.encode(value)


# ---------------------------------------------------------------------------
# Hashed records


def hashed_record(fields: tuple[str, ...], values: dict[str, Any], hash_field: str) -> tuple[bytes, str]:
    """(sealed record, hash) of ``values``' ``fields`` (:func:`svit.cbor.seal`)."""
    return cbor.seal({name: values[name] for name in fields}, hash_field)


def decode_record(
    data: bytes, fields: tuple[str, ...], hash_field: str, what: str, *, format: str | None = None
) -> dict[str, Any]:
    """Decode and verify a sealed record: one deterministic item, exact fields, hash.

    With ``format`` (the value the first of ``fields`` must hold), a record that does
    not verify and claims another format is refused naming the format it claims (a
    store written by an older version). The caller still compares the format field of a
    record that verifies.
    """
    if type(data) is not bytes:
        raise InvalidPersistence(f"{what}: stored value is not bytes")
    try:
        return _unseal(data, fields, hash_field, what)
    except (cbor.CBORDecodeError, InvalidPersistence) as exc:
        found = _format_of(data, fields[0]) if format is not None else None
        if found is not None and found != format:
            raise InvalidPersistence(
                f"{what}: unsupported record format {found[:64]!r} (this version reads {format})") from None
        if isinstance(exc, InvalidPersistence):
            raise
        raise InvalidPersistence(f"{what}: {exc.detail}") from None


def _unseal(data: bytes, fields: tuple[str, ...], hash_field: str, what: str) -> dict[str, Any]:
    decoded = cbor.unseal(data, hash_field)
    if decoded.keys() != set(fields) | {hash_field}:
        raise InvalidPersistence(f"{what}: unexpected fields")
    return decoded


def _format_of(data: bytes, format_field: str) -> str | None:
    """The format a record that failed to verify claims, if it decodes far enough to say."""
    try:
        value = cbor.decode_item(data)
    except cbor.CBORDecodeError:
        return None
    found = value.get(format_field) if type(value) is dict else None
    return found if type(found) is str else None


_HEX_HASH = re.compile(r"[0-9a-f]{64}\Z")


def is_hex_hash(value: Any) -> bool:
    return type(value) is str and _HEX_HASH.match(value) is not None


def is_u64(value: Any) -> bool:
    return type(value) is int and 0 <= value < 2**64


# ---------------------------------------------------------------------------
# Tree nodes


_REF_HEAD = cbor.head(6, NODE_TAG) + cbor.head(2, 32)
_MAP_PREFIX = b"\x82\x61m"
_ARRAY_PREFIX = b"\x82\x61a"


@functools.lru_cache(maxsize=1 << 16)
def _key_item(key: str) -> bytes:
    """A map key's text item; keys repeat across the nodes of a commit."""
    return cbor.encode_text(key)


def encode_node(node: Node) -> bytes:
    """A container node with its child containers as digest references.

    The bytes are exactly ``cbor.encode(["m", {key: tag(NODE_TAG, digest) | leaf}])``
    (``"a"`` and a list for arrays), assembled directly: a commit stages a few of these
    and the tree keeps a map's entries in key order already.
    """
    # The tuple layout (kind, items, digest, ...) is documented in svit.tree's module docstring.
    kind, items = node[0], node[1]
    leaf = cbor.encode
    if kind == tree.MAP:
        parts = [_MAP_PREFIX, cbor.head(5, len(items))]
        append = parts.append
        for key, value in items.items():
            append(_key_item(key))
            append(_REF_HEAD + value[2] if type(value) is Node else leaf(value))
        return b"".join(parts)
    parts = [_ARRAY_PREFIX, cbor.head(4, len(items))]
    parts.extend(_REF_HEAD + value[2] if type(value) is Node else leaf(value) for value in items)
    return b"".join(parts)


def _encode_node_reference(node: Node) -> bytes:
    """The same encoding through the general encoder (kept to check :func:`encode_node` against)."""
    kind, items = node[0], node[1]

    def ref(value: Any) -> Any:
        return cbor.Raw(_REF_HEAD + value[2]) if type(value) is Node else value

    if kind == tree.MAP:
        return cbor.encode(["m", {k: ref(v) for k, v in items.items()}])
    return cbor.encode(["a", [ref(v) for v in items]])


def container_children(node: Node) -> list[Node]:
    """The child containers of a container node (leaves are inline in its record)."""
    items = node[1].values() if node[0] == tree.MAP else node[1]
    return [item for item in items if type(item) is Node]


def _child_digest(item: Any, what: str) -> bytes:
    if type(item) is Ref:
        return item.digest
    if type(item) in (dict, list):
        raise InvalidPersistence(f"{what}: container stored inline")
    try:
        digest: bytes = tree.leaf_node(item).digest
    except InvalidValue as exc:
        raise InvalidPersistence(f"{what}: {exc.detail}") from None
    return digest


def verify_node(digest: bytes, data: bytes) -> list[bytes]:
    """Check a stored node's bytes against its digest; return its child container digests."""
    what = f"tree node {digest.hex()[:16]}"
    decoded = loads_strict(data, what, refs=True)
    if type(decoded) is not list or len(decoded) != 2 or decoded[0] not in ("m", "a"):
        raise InvalidPersistence(f"{what}: malformed node record")
    kind, items = decoded
    refs: list[bytes] = []
    if kind == "m":
        if type(items) is not dict:
            raise InvalidPersistence(f"{what}: malformed map node")
        keys = list(items)
        if any(type(key) is not str for key in keys):
            raise InvalidPersistence(f"{what}: map keys must be text")
        if keys != sorted(keys):
            raise InvalidPersistence(f"{what}: map keys are not in canonical order")
        parts = [b"\x06", _Q(len(keys))]
        for key, item in items.items():
            raw = key.encode("utf-8")
            child = _child_digest(item, what)
            parts += (_Q(len(raw)), raw, child)
            if type(item) is Ref:
                refs.append(child)
        computed = _H(b"".join(parts)).digest()
    else:
        if type(items) is not list:
            raise InvalidPersistence(f"{what}: malformed array node")
        digests = [_child_digest(item, what) for item in items]
        refs = [item.digest for item in items if type(item) is Ref]
        computed = _H(b"\x05" + _Q(len(digests)) + b"".join(digests)).digest()
    if computed != digest:
        raise InvalidPersistence(f"{what}: content does not match its digest")
    return refs
