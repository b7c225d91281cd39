"""The tree node type, its leaves, and the one definition of every structural digest.

A :class:`Node` is a tuple subclass (so it cannot be mutated) holding::

    (kind, value, digest, count, text, height, max_script, child_digests)

See :mod:`svit.tree` for what each field means. Every digest rule (reference §8.2, with
BLAKE3 in place of SHA-256) is written here once: scalars, text, scripts, arrays and
maps; the builders and the path-copying edits call these functions.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import blake3

from ..errors import InvalidPath, InvalidValue, ResourceLimitExceeded
from ..limits import Limits
from ..values import I64_MAX, I64_MIN, Script

__all__ = [
    "ARRAY",
    "BAD_TEXT",
    "BOOL",
    "FALSE_DIGEST",
    "INTEGER",
    "INT_DIGESTS",
    "KEY_CACHE_MAX",
    "KEY_HEADS",
    "KIND_NAMES",
    "MAP",
    "NESTING",
    "NULL",
    "NULL_DIGEST",
    "NUMBER",
    "SCRIPT",
    "STRING",
    "TRUE_DIGEST",
    "Node",
    "array_digest",
    "as_item",
    "digest_from_heads",
    "encode_keys",
    "encode_text",
    "float_digest",
    "has_nodes",
    "hash_bytes",
    "hash_many",
    "int_digest",
    "item_info",
    "key_head",
    "leaf",
    "leaf_node",
    "make_node",
    "map_digest",
    "pack_u64",
    "plain",
    "script_info",
    "validate_value",
]

NULL, BOOL, INTEGER, NUMBER, STRING, ARRAY, MAP, SCRIPT = range(8)
KIND_NAMES = ("null", "bool", "integer", "number", "string", "array", "map", "script")

NESTING = "maximum nesting depth exceeded"
BAD_TEXT = "text must be valid Unicode (no lone surrogates)"

_H = blake3.blake3
pack_u64 = struct.Struct(">Q").pack
_pack_i64 = struct.Struct(">q").pack
_pack_f64 = struct.Struct(">d").pack


def hash_bytes(data: bytes) -> bytes:
    """The 32-byte BLAKE3 digest of ``data``."""
    digest: bytes = _H(data).digest()
    return digest


def hash_many(prefix: bytes, blobs: list[bytes]) -> list[bytes]:
    """Digests of ``prefix + blob`` for many blobs, reusing one hasher (thread-local by construction)."""
    hasher = _H()
    update, digest, reset = hasher.update, hasher.digest, hasher.reset
    out: list[bytes] = []
    append = out.append
    for blob in blobs:
        update(prefix)
        update(blob)
        append(digest())
        reset()
    return out


NULL_DIGEST = hash_bytes(b"\x00")
TRUE_DIGEST = hash_bytes(b"\x01\x01")
FALSE_DIGEST = hash_bytes(b"\x01\x00")
INT_DIGESTS = {i: hash_bytes(b"\x02" + _pack_i64(i)) for i in range(-256, 1025)}


def int_digest(value: int) -> bytes:
    found = INT_DIGESTS.get(value)
    return found if found is not None else hash_bytes(b"\x02" + _pack_i64(value))


def float_digest(value: float) -> bytes:
    return hash_bytes(b"\x03" + _pack_f64(value or 0.0))


def map_digest(key_bytes: list[bytes], digests: list[bytes]) -> bytes:
    """The digest of a map from its encoded keys (code-point order) and child digests."""
    return hash_bytes(
        b"".join(
            chain(
                (b"\x06", pack_u64(len(key_bytes))),
                chain.from_iterable(zip(map(pack_u64, map(len, key_bytes)), key_bytes, digests)),
            )
        )
    )


def digest_from_heads(heads: list[bytes], digests: list[bytes]) -> bytes:
    """The map digest from precomputed key heads (``u64be(len(key)) || key``)."""
    return hash_bytes(b"".join(chain((b"\x06", pack_u64(len(heads))), chain.from_iterable(zip(heads, digests)))))


def array_digest(digests: list[bytes]) -> bytes:
    return hash_bytes(b"\x05" + pack_u64(len(digests)) + b"".join(digests))


def encode_keys(keys: list[str]) -> list[bytes]:
    try:
        return list(map(str.encode, keys))
    except UnicodeEncodeError:
        raise InvalidValue(BAD_TEXT) from None


#: ``u64be(len(key)) || key`` by key; bounded, cleared when full.
KEY_HEADS: dict[str, bytes] = {}
KEY_CACHE_MAX = 1 << 16


def key_head(key: str) -> bytes:
    """``u64be(len(key)) || key`` for the map digest; memoized because keys repeat a lot."""
    head = KEY_HEADS.get(key)
    if head is None:
        raw = encode_text(key)
        head = pack_u64(len(raw)) + raw
        if len(KEY_HEADS) >= KEY_CACHE_MAX:
            KEY_HEADS.clear()
        KEY_HEADS[key] = head
    return head


class Node(tuple[Any, ...]):
    """One immutable node of the tree; compare and hash by content digest."""

    # No __slots__: the instance dict (created lazily) caches the CBOR encoding of
    # leaf-only containers and a map's key heads; everything that defines the node lives
    # in the tuple. Those caches (bytes, lists of bytes) are the only attributes ever set:
    # trees are acyclic, which is why the native builder can leave its nodes untracked
    # by the cycle collector.
    cached_heads: list[bytes]
    cached_cbor: bytes

    if TYPE_CHECKING:  # what the fields are; at run time, C-level item getters

        @property
        def digest(self) -> bytes: ...
        @property
        def count(self) -> int: ...  # type: ignore[override]  # the field shadows tuple.count
        @property
        def text(self) -> int: ...
        @property
        def height(self) -> int: ...
        @property
        def max_script(self) -> int: ...

    else:
        digest = property(itemgetter(2), doc="32-byte BLAKE3 structural hash")
        count = property(itemgetter(3), doc="nodes in the subtree")
        text = property(itemgetter(4), doc="text bytes in the subtree")
        height = property(itemgetter(5), doc="depth of the deepest node below")
        max_script = property(itemgetter(6), doc="largest script source in bytes, -1 if none")

    @property
    def kind(self) -> str:
        return KIND_NAMES[self[0]]

    @property
    def hash(self) -> str:
        """The content hash as lowercase hex (what the API reports)."""
        digest: bytes = self[2]
        return digest.hex()

    @property
    def is_container(self) -> bool:
        return bool(self[0] == MAP or self[0] == ARRAY)

    @property
    def size(self) -> int:
        """Entries of a map/array; UTF-8 bytes of a string; source bytes of a script; else 0."""
        kind = self[0]
        if kind == MAP or kind == ARRAY:
            return len(self[1])
        if kind == STRING:
            text: int = self[4]
            return text
        if kind == SCRIPT:
            source: int = self[6]
            return source
        return 0

    def child_names(self) -> list[str]:
        """Map keys in canonical order, or ``"0".."n-1"`` for an array."""
        if self[0] == MAP:
            return list(self[1])
        if self[0] == ARRAY:
            return [str(i) for i in range(len(self[1]))]
        raise InvalidPath("only maps and arrays have children")

    def to_value(self) -> Any:
        """Fresh plain Python data (dict keys in canonical order)."""
        return plain(self)

    def __eq__(self, other: object) -> bool:
        return type(other) is Node and bool(self[2] == other[2])

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self[2])

    def __repr__(self) -> str:
        return f"Node({KIND_NAMES[self[0]]}, {self[2].hex()[:16]}…, count={self[3]})"


_new = tuple.__new__


def make_node(fields: tuple[Any, ...]) -> Node:
    """A node from its eight fields (trusted: the caller computed them)."""
    return _new(Node, fields)


def has_nodes(items: Iterable[Any]) -> bool:
    """Whether any child is a container node (C-level scan, no per-item Python call)."""
    return Node in set(map(type, items))


# ---------------------------------------------------------------------------
# Leaves


def encode_text(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidValue(BAD_TEXT) from None


def script_info(script: Script) -> tuple[bytes, int, int]:
    """(digest, text bytes, source bytes) of a script record."""
    source = encode_text(script.source)
    documentation = encode_text(script.documentation)
    digest = hash_bytes(b"\x07" + pack_u64(len(source)) + source + documentation)
    return digest, len(source) + len(documentation), len(source)


def leaf(value: Any, scripts_allowed: bool) -> Node:
    """A node for one scalar, string or script value (validated)."""
    t = type(value)
    if t is str:
        raw = encode_text(value)
        return make_node((STRING, value, hash_bytes(b"\x04" + raw), 1, len(raw), 0, -1, None))
    if t is int:
        if not I64_MIN <= value <= I64_MAX:
            raise InvalidValue("integer is outside signed 64-bit range")
        return make_node((INTEGER, value, int_digest(value), 1, 0, 0, -1, None))
    if t is float:
        if not math.isfinite(value):
            raise InvalidValue("numbers must be finite")
        value = value or 0.0  # -0.0 is stored as 0.0: they hash alike, so keep them one value
        return make_node((NUMBER, value, float_digest(value), 1, 0, 0, -1, None))
    if t is bool:
        return make_node((BOOL, value, TRUE_DIGEST if value else FALSE_DIGEST, 1, 0, 0, -1, None))
    if value is None:
        return make_node((NULL, None, NULL_DIGEST, 1, 0, 0, -1, None))
    if t is Script:
        if not scripts_allowed:
            raise InvalidValue("script records are only valid below /lib")
        digest, text, source = script_info(value)
        return make_node((SCRIPT, value, digest, 1, text, 0, source, None))
    raise InvalidValue(f"unsupported value type: {t.__name__}")


def leaf_node(value: Any) -> Node:
    """Wrap a raw stored leaf (already valid) as a node."""
    return leaf(value, True)


def item_info(item: Any) -> tuple[int, int, int, int]:
    """(count, text, height, max_script) of a stored child."""
    if type(item) is Node:
        return item[3], item[4], item[5], item[6]
    t = type(item)
    if t is str:
        return 1, len(encode_text(item)), 0, -1
    if t is Script:
        _digest, text, source = script_info(item)
        return 1, text, 0, source
    return 1, 0, 0, -1


def as_item(node: Node) -> Any:
    """What a container stores for this node: the node itself or its raw leaf value."""
    kind = node[0]
    return node if kind == MAP or kind == ARRAY else node[1]


def plain(item: Any) -> Any:
    """Fresh plain data for a stored item (a node or a raw leaf)."""
    if type(item) is not Node:
        return item
    kind = item[0]
    if kind == MAP:
        mapping = item[1]
        if not has_nodes(mapping.values()):
            return dict(mapping)
        return {key: (plain(child) if type(child) is Node else child) for key, child in mapping.items()}
    if kind == ARRAY:
        values = item[1]
        if not has_nodes(values):
            return list(values)
        return [(plain(child) if type(child) is Node else child) for child in values]
    return item[1]


# ---------------------------------------------------------------------------
# Validation against limits


def validate_value(node: Node, limits: Limits, *, scripts_allowed: bool) -> None:
    """Reference §3.2 checks of one value, in O(1) from the cached aggregates."""
    if node[6] >= 0 and not scripts_allowed:
        raise InvalidValue("script records are only valid below /lib")
    if node[5] > limits.max_value_depth:
        raise InvalidValue(NESTING)
    if node[3] > limits.max_value_entries:
        raise InvalidValue("maximum value entries exceeded")
    if node[4] > limits.max_text_bytes:
        raise InvalidValue("maximum text bytes exceeded")
    if node[6] > limits.max_script_bytes:
        raise ResourceLimitExceeded("script source")
