"""Deterministic CBOR encodings of everything the store records, and their strict decoders.

Every record of the history (base, head, transaction, store snapshot, fork reference)
is a CBOR map whose fields come in a fixed order and whose last field is a BLAKE3 hash
over the CBOR encoding of the preceding fields. Decoding is strict (no indefinite
lengths, no duplicate keys, no foreign tags, exact field list, canonical re-encoding)
because stored bytes are checked, never trusted: a flipped byte anywhere is either a
decode failure, a hash mismatch or a non-canonical encoding, and each is reported as
``InvalidPersistence`` naming the record.

Tree nodes are stored content-addressed by their structural digest: a container is
``[kind, items]`` where a child container is ``tag(NODE_TAG, digest)`` and a leaf is
inline. Its digest is recomputable from its own bytes (leaf digests from the values,
child digests from the references), so a stored tree is verified top-down as a Merkle
tree without rebuilding it.
"""

from __future__ import annotations

import os
import re
import struct
from typing import Any, Iterable

import blake3
import cbor2

from .. import tree
from ..errors import InvalidPersistence, InvalidValue, SvitError
from ..paths import format_path, parse
from ..tree import CBOR_SCRIPT_TAG, Encoded, Node, cbor_default
from ..values import MAX_NESTING, Script

#: Tag of a reference to a stored child container (spells "SVND"); only in node records.
NODE_TAG = 0x53564E44
TRANSACTION_FORMAT = "svit-transaction@1"
BASE_FORMAT = "svit-base@1"
HEAD_FORMAT = "svit-head@1"
SNAPSHOT_FORMAT = "svit-store-snapshot@1"
FORK_FORMAT = "svit-fork@1"
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

_Q = struct.Struct(">Q").pack
_H = blake3.blake3
_MAX_DEPTH = MAX_NESTING + 16
_BUILTIN_TAGS = (0, 1, 2, 3, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258, 260, 261, 1004, 43000, 55799)


def _reject(*_args: Any) -> Any:
    raise ValueError("unsupported CBOR tag")


_SEMANTIC_REJECTS = {tag: _reject for tag in _BUILTIN_TAGS}


class Ref:
    """A decoded reference to a stored child container."""

    __slots__ = ("digest",)

    def __init__(self, digest: bytes) -> None:
        self.digest = digest


def _tag_hook(allow_refs: bool):
    def hook(tag: Any, _immutable: bool = False) -> Any:
        value = tag.value
        if tag.tag == CBOR_SCRIPT_TAG:
            if type(value) not in (list, tuple) or len(value) != 2 or not all(type(v) is str for v in value):
                raise ValueError("malformed script record")
            return Script(value[0], value[1])
        if allow_refs and tag.tag == NODE_TAG:
            if type(value) is not bytes or len(value) != 32:
                raise ValueError("malformed node reference")
            return Ref(value)
        raise ValueError("unsupported CBOR tag")

    return hook


_PLAIN_HOOK = _tag_hook(False)
_NODE_HOOK = _tag_hook(True)


def loads_strict(data: bytes, what: str, *, refs: bool = False) -> Any:
    """Exactly one CBOR item, strictly; any failure is InvalidPersistence naming ``what``."""
    if type(data) is not bytes:
        raise InvalidPersistence(f"{what}: stored value is not bytes")
    sentinel = os.urandom(16)
    try:
        decoded = cbor2.loads(
            b"\x82" + data + cbor2.dumps(sentinel),
            tag_hook=_NODE_HOOK if refs else _PLAIN_HOOK,
            semantic_decoders=_SEMANTIC_REJECTS,
            max_depth=_MAX_DEPTH,
            allow_indefinite=False,
            allow_duplicate_keys=False,
            str_errors="strict",
        )
    except RecursionError:
        raise InvalidPersistence(f"{what}: nesting is too deep") from None
    except Exception as exc:  # any decoder failure: the bytes are not ours
        raise InvalidPersistence(f"{what}: malformed encoding ({type(exc).__name__})") from None
    if type(decoded) is not list or len(decoded) != 2 or decoded[1] != sentinel:
        raise InvalidPersistence(f"{what}: trailing data")
    return decoded[0]


def dumps(value: Any) -> bytes:
    return cbor2.dumps(value, default=cbor_default)


# ---------------------------------------------------------------------------
# Hashed records


def hashed_record(fields: tuple[str, ...], values: dict[str, Any], hash_field: str) -> tuple[bytes, str]:
    """(encoded record, hash): the hash is BLAKE3 over the encoding of the preceding fields."""
    ordered = {name: values[name] for name in fields}
    body = dumps(ordered)
    digest = _H(body).hexdigest()
    tail = dumps(hash_field) + dumps(digest)
    # A CBOR map header for n < 24 entries is the single byte 0xa0 + n (every record is far smaller).
    return bytes([0xA0 + len(fields) + 1]) + body[1:] + tail, digest


def decode_record(data: bytes, fields: tuple[str, ...], hash_field: str, what: str) -> dict[str, Any]:
    """Decode and verify a hashed record: exact fields, hash, canonical bytes."""
    decoded = loads_strict(data, what)
    if type(decoded) is not dict or list(decoded) != list(fields) + [hash_field]:
        raise InvalidPersistence(f"{what}: unexpected fields")
    claimed = decoded[hash_field]
    encoded, digest = hashed_record(fields, decoded, hash_field)
    if claimed != digest:
        raise InvalidPersistence(f"{what}: hash mismatch")
    if encoded != data:
        raise InvalidPersistence(f"{what}: non-canonical encoding")
    return decoded


_HEX_HASH = re.compile(r"[0-9a-f]{64}\Z")


def is_hex_hash(value: Any) -> bool:
    return type(value) is str and _HEX_HASH.match(value) is not None


def is_u64(value: Any) -> bool:
    return type(value) is int and 0 <= value < 2**64


# ---------------------------------------------------------------------------
# Mutations


def encode_mutation(mutation: dict[str, Any]) -> dict[str, Any]:
    """A mutation as plain CBOR-able data in its fixed field order (values pre-encoded)."""
    operation = mutation["operation"]
    path = mutation["path"]
    if operation == "set":
        return {"operation": "set", "path": path, "value": Encoded(mutation["value"])}
    if operation == "remove":
        return {"operation": "remove", "path": path}
    if operation == "append":
        return {"operation": "append", "path": path, "values": [Encoded(v) for v in mutation["values"]]}
    if operation == "remove_front":
        return {"operation": "remove_front", "path": path, "expected_value_hash": mutation["expected_value_hash"]}
    raise InvalidPersistence(f"unknown mutation operation {operation!r}")


_MUTATION_KEYS = {
    "set": ["operation", "path", "value"],
    "remove": ["operation", "path"],
    "append": ["operation", "path", "values"],
    "remove_front": ["operation", "path", "expected_value_hash"],
}


def check_mutation_path(path: Any, what: str) -> tuple[str, ...]:
    """Absolute, non-root, canonical, no empty/./.. segments."""
    try:
        segments = parse(path) if type(path) is str else None
    except SvitError:
        segments = None
    if not segments or format_path(segments) != path:
        raise InvalidPersistence(f"{what}: invalid mutation path {str(path)[:128]!r}")
    return segments


def decode_mutation(item: Any, what: str) -> dict[str, Any]:
    """A decoded mutation with tree nodes for its values."""
    if type(item) is not dict or "operation" not in item or item["operation"] not in _MUTATION_KEYS:
        raise InvalidPersistence(f"{what}: malformed mutation")
    operation = item["operation"]
    if list(item) != _MUTATION_KEYS[operation]:
        raise InvalidPersistence(f"{what}: malformed {operation} mutation")
    check_mutation_path(item["path"], what)
    try:
        if operation == "set":
            return {"operation": "set", "path": item["path"], "value": tree.from_decoded(item["value"])}
        if operation == "append":
            if type(item["values"]) is not list:
                raise InvalidPersistence(f"{what}: append values must be a list")
            return {"operation": "append", "path": item["path"], "values": [tree.from_decoded(v) for v in item["values"]]}
    except InvalidValue as exc:
        raise InvalidPersistence(f"{what}: invalid mutation value: {exc.detail}") from None
    if operation == "remove_front" and not is_hex_hash(item["expected_value_hash"]):
        raise InvalidPersistence(f"{what}: malformed expected_value_hash")
    return dict(item)


def plain_mutation(mutation: dict[str, Any]) -> dict[str, Any]:
    """A mutation with plain Python values (what queries hand to hosts)."""
    out = dict(mutation)
    if "value" in out:
        out["value"] = out["value"].to_value()
    if "values" in out:
        out["values"] = [v.to_value() for v in out["values"]]
    return out


def touched_paths(mutations: Iterable[dict[str, Any]]) -> list[str]:
    return sorted({m["path"] for m in mutations})


# ---------------------------------------------------------------------------
# Tree nodes


def _ref_default(encoder: Any, obj: Any) -> None:
    if type(obj) is Ref:
        encoder.encode(cbor2.CBORTag(NODE_TAG, obj.digest))
    else:
        cbor_default(encoder, obj)


_REF_HEAD = tree._cbor_head(6, NODE_TAG) + tree._cbor_head(2, 32)
_MAP_PREFIX = b"\x82\x61m"
_ARRAY_PREFIX = b"\x82\x61a"


def encode_node(node: Node) -> bytes:
    """A container node with its child containers as digest references.

    The bytes are exactly ``cbor2.dumps(["m", {key: tag(NODE_TAG, digest) | leaf}])``
    (``"a"`` and a list for arrays), assembled directly: a commit stages a few of these
    and a per-child encoder callback would dominate its cost.
    """
    # The tuple layout (kind, items, ...) is documented in svit.tree's module docstring.
    kind, items = node[0], node[1]
    leaf = tree._leaf_cbor
    if kind == tree.MAP:
        key_cbor = tree._key_cbor
        parts = [_MAP_PREFIX, tree._cbor_head(5, len(items))]
        append = parts.append
        for key, value in items.items():
            append(key_cbor(key))
            append(_REF_HEAD + value[2] if type(value) is Node else leaf(value))
        return b"".join(parts)
    parts = [_ARRAY_PREFIX, tree._cbor_head(4, len(items))]
    parts.extend(_REF_HEAD + value[2] if type(value) is Node else leaf(value) for value in items)
    return b"".join(parts)


def _encode_node_reference(node: Node) -> bytes:
    """The same encoding through cbor2 (kept to check :func:`encode_node` against)."""
    kind, items = node[0], node[1]
    if kind == tree.MAP:
        body: Any = {k: (Ref(v[2]) if type(v) is Node else v) for k, v in items.items()}
        return cbor2.dumps(["m", body], default=_ref_default)
    return cbor2.dumps(["a", [(Ref(v[2]) if type(v) is Node else v) for v in items]], default=_ref_default)


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
        return tree.leaf_node(item).digest
    except InvalidValue as exc:
        raise InvalidPersistence(f"{what}: {exc.detail}") from None


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
