"""The committed state tree: immutable, structurally shared, content-hashed nodes.

A :class:`Node` is a tuple subclass (so it cannot be mutated) holding::

    (kind, value, digest, count, text, height, max_script, child_digests)

* ``digest`` — the structural content hash of the subtree (reference §8.2, with BLAKE3
  in place of SHA-256); computed once, at construction, so a commit re-hashes only the
  nodes on the changed path.
* ``count`` — nodes in the subtree (containers and scripts count 1).
* ``text`` — string bytes + map key bytes + script source and documentation bytes.
* ``height`` — depth of the deepest node below (a scalar or an empty container is 0,
  a non-empty container is 1 + its tallest child). This is exactly the depth the
  reference's value validator compares against ``max_value_depth``.
* ``max_script`` — the largest script source (bytes) in the subtree, -1 if none.

Only containers (arrays and maps) are stored as nodes inside other containers; scalar,
string and script children are stored as the raw Python value (immutable: ``str``,
``int``, ``float``, ``bool``, ``None``, frozen :class:`Script`) with their digests kept
in the parent's ``child_digests`` list. This keeps building and restoring a large flat
map close to the cost of the data itself. :func:`get` wraps such a leaf into a node on
demand. Container values (``dict``/``tuple``) are private and never handed out;
:meth:`Node.to_value` returns fresh plain data.
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_left
from itertools import chain
from operator import itemgetter
from typing import Any, Iterable

import blake3
import cbor2

from .errors import InvalidPath, InvalidValue, ResourceLimitExceeded
from .limits import Limits
from .values import I64_MAX, I64_MIN, MAX_NESTING, Script

NULL, BOOL, INTEGER, NUMBER, STRING, ARRAY, MAP, SCRIPT = range(8)
KIND_NAMES = ("null", "bool", "integer", "number", "string", "array", "map", "script")

#: CBOR tag of a script record ``[source, documentation]``. Chosen from the large
#: unassigned part of the IANA tag space (it spells "SVIT" in ASCII); not registered.
CBOR_SCRIPT_TAG = 0x53564954

_H = blake3.blake3
_Q = struct.Struct(">Q").pack
_q = struct.Struct(">q").pack
_d = struct.Struct(">d").pack

_ABSENT = object()
_NESTING = "maximum nesting depth exceeded"
_BAD_TEXT = "text must be valid Unicode (no lone surrogates)"


def _hash(data: bytes) -> bytes:
    return _H(data).digest()


def _hash_many(prefix: bytes, blobs: list[bytes]) -> list[bytes]:
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


_NULL_DIGEST = _hash(b"\x00")
_TRUE_DIGEST = _hash(b"\x01\x01")
_FALSE_DIGEST = _hash(b"\x01\x00")
_INT_DIGESTS = {i: _hash(b"\x02" + _q(i)) for i in range(-256, 1025)}


def _int_digest(value: int) -> bytes:
    found = _INT_DIGESTS.get(value)
    return found if found is not None else _hash(b"\x02" + _q(value))


def _float_digest(value: float) -> bytes:
    return _hash(b"\x03" + _d(value or 0.0))


class Node(tuple):
    """One immutable node of the tree; compare and hash by content digest."""

    # No __slots__: the instance dict (created lazily) caches the CBOR encoding of
    # leaf-only containers and a map's key heads; everything that defines the node lives
    # in the tuple. Those caches (bytes, lists of bytes) are the only attributes ever set:
    # trees are acyclic, which is why the native builder can leave its nodes untracked
    # by the cycle collector.

    digest = property(itemgetter(2), doc="32-byte BLAKE3 structural hash")
    count = property(itemgetter(3), doc="nodes in the subtree")  # type: ignore[assignment]
    text = property(itemgetter(4), doc="text bytes in the subtree")
    height = property(itemgetter(5), doc="depth of the deepest node below")
    max_script = property(itemgetter(6), doc="largest script source in bytes, -1 if none")

    @property
    def kind(self) -> str:
        return KIND_NAMES[self[0]]

    @property
    def hash(self) -> str:
        """The content hash as lowercase hex (what the API reports)."""
        return self[2].hex()

    @property
    def is_container(self) -> bool:
        return self[0] == MAP or self[0] == ARRAY

    @property
    def size(self) -> int:
        """Entries of a map/array; UTF-8 bytes of a string; source bytes of a script; else 0."""
        kind = self[0]
        if kind == MAP or kind == ARRAY:
            return len(self[1])
        if kind == STRING:
            return self[4]
        if kind == SCRIPT:
            return self[6]
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
        return _plain(self)

    def __eq__(self, other: object) -> bool:
        return type(other) is Node and self[2] == other[2]

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self[2])

    def __repr__(self) -> str:
        return f"Node({KIND_NAMES[self[0]]}, {self[2].hex()[:16]}…, count={self[3]})"

    def __reduce__(self):  # rebuild from plain data rather than trust pickled digests
        return (_rebuild, (_plain(self),))


def _rebuild(value: Any) -> Node:
    return from_value(value, scripts_allowed=True)


_new = tuple.__new__


def _node(fields: tuple) -> Node:
    return _new(Node, fields)


def _has_nodes(items: Iterable[Any]) -> bool:
    """Whether any child is a container node (C-level scan, no per-item Python call)."""
    return Node in set(map(type, items))


# ---------------------------------------------------------------------------
# Leaves


def _encode_text(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidValue(_BAD_TEXT) from None


def _script_info(script: Script) -> tuple[bytes, int, int]:
    """(digest, text bytes, source bytes) of a script record."""
    source = _encode_text(script.source)
    documentation = _encode_text(script.documentation)
    digest = _hash(b"\x07" + _Q(len(source)) + source + documentation)
    return digest, len(source) + len(documentation), len(source)


def _leaf(value: Any, scripts_allowed: bool) -> Node:
    """A node for one scalar, string or script value (validated)."""
    t = type(value)
    if t is str:
        raw = _encode_text(value)
        return _node((STRING, value, _hash(b"\x04" + raw), 1, len(raw), 0, -1, None))
    if t is int:
        if not I64_MIN <= value <= I64_MAX:
            raise InvalidValue("integer is outside signed 64-bit range")
        return _node((INTEGER, value, _int_digest(value), 1, 0, 0, -1, None))
    if t is float:
        if not math.isfinite(value):
            raise InvalidValue("numbers must be finite")
        value = value or 0.0  # -0.0 is stored as 0.0: they hash alike, so keep them one value
        return _node((NUMBER, value, _float_digest(value), 1, 0, 0, -1, None))
    if t is bool:
        return _node((BOOL, value, _TRUE_DIGEST if value else _FALSE_DIGEST, 1, 0, 0, -1, None))
    if value is None:
        return _node((NULL, None, _NULL_DIGEST, 1, 0, 0, -1, None))
    if t is Script:
        if not scripts_allowed:
            raise InvalidValue("script records are only valid below /lib")
        digest, text, source = _script_info(value)
        return _node((SCRIPT, value, digest, 1, text, 0, source, None))
    raise InvalidValue(f"unsupported value type: {t.__name__}")


def leaf_node(value: Any) -> Node:
    """Wrap a raw stored leaf (already valid) as a node."""
    return _leaf(value, True)


def _item_info(item: Any) -> tuple[int, int, int, int]:
    """(count, text, height, max_script) of a stored child."""
    if type(item) is Node:
        return item[3], item[4], item[5], item[6]
    t = type(item)
    if t is str:
        return 1, len(_encode_text(item)), 0, -1
    if t is Script:
        _digest, text, source = _script_info(item)
        return 1, text, 0, source
    return 1, 0, 0, -1


def _as_item(node: Node) -> Any:
    """What a container stores for this node: the node itself or its raw leaf value."""
    kind = node[0]
    return node if kind == MAP or kind == ARRAY else node[1]


# ---------------------------------------------------------------------------
# Building from plain values


def from_value(value: Any, *, scripts_allowed: bool) -> Node:
    """Build (and validate the kinds of) a node tree from plain host data.

    Rejects non-finite floats, integers outside i64, non-text keys, unsupported types,
    lone surrogates, and scripts where not allowed. Size limits are checked separately
    by :func:`validate_value` from the cached counts.
    """
    return _top(value, scripts_allowed, False)


def from_decoded(value: Any) -> Node:
    """Build a tree from decoded snapshot data: scripts allowed, map keys must already be canonical."""
    return _top(value, True, True)


def _top(value: Any, scripts_allowed: bool, strict: bool) -> Node:
    t = type(value)
    if t is dict or t is list:
        if _native is not None:
            return _native.build(value, scripts_allowed, strict)
        return _build_python(value, scripts_allowed, strict)
    return _leaf(value, scripts_allowed)


def _build_python(value: dict | list, scripts_allowed: bool, strict: bool) -> Node:
    """The reference builder for a container (the native one must agree with it exactly)."""
    try:
        if type(value) is dict:
            return _build_map(value, scripts_allowed, 0, strict)
        return _build_array(value, scripts_allowed, 0, strict)
    except RecursionError:
        raise InvalidValue(_NESTING) from None


def _children(
    values: list, scripts_allowed: bool, depth: int, strict: bool
) -> tuple[list, list[bytes], int, int, int, int]:
    """(items, digests, count, text, max child height or -1, max_script) for a container's children."""
    n = len(values)
    types = list(map(type, values))
    if types.count(str) == n:
        # Fast path for the common all-text container: no per-item interpreter dispatch.
        try:
            blobs = list(map(str.encode, values))
        except UnicodeEncodeError:
            raise InvalidValue(_BAD_TEXT) from None
        if n > 4:
            digests = _hash_many(b"\x04", blobs)
        else:
            digests = [_hash(b"\x04" + blob) for blob in blobs]
        return values, digests, n, sum(map(len, blobs)), (0 if n else -1), -1
    items: list = []
    digests = []
    add_item, add_digest = items.append, digests.append
    count = text = height = 0
    max_script = -1
    for value, t in zip(values, types):
        if t is str:
            try:
                raw = value.encode()
            except UnicodeEncodeError:
                raise InvalidValue(_BAD_TEXT) from None
            add_digest(_H(b"\x04" + raw).digest())
            text += len(raw)
            count += 1
        elif t is int:
            if not I64_MIN <= value <= I64_MAX:
                raise InvalidValue("integer is outside signed 64-bit range")
            add_digest(_INT_DIGESTS.get(value) or _int_digest(value))
            count += 1
        else:
            value, digest, c, x, h, s = _other_child(value, t, scripts_allowed, depth, strict)
            add_digest(digest)
            count += c
            text += x
            if h > height:
                height = h
            if s > max_script:
                max_script = s
        add_item(value)
    return items, digests, count, text, height, max_script


def _other_child(
    value: Any, t: type, scripts_allowed: bool, depth: int, strict: bool
) -> tuple[Any, bytes, int, int, int, int]:
    """(stored item, digest, count, text, height, max_script) of a child that is not text or an integer."""
    if t is dict or t is list:
        node = (_build_map if t is dict else _build_array)(value, scripts_allowed, depth + 1, strict)
        return node, node[2], node[3], node[4], node[5], node[6]
    if t is float:
        if not math.isfinite(value):
            raise InvalidValue("numbers must be finite")
        value = value or 0.0  # -0.0 is stored as 0.0 (they hash alike)
        return value, _float_digest(value), 1, 0, 0, -1
    if t is bool:
        return value, (_TRUE_DIGEST if value else _FALSE_DIGEST), 1, 0, 0, -1
    if value is None:
        return None, _NULL_DIGEST, 1, 0, 0, -1
    if t is Script:
        if not scripts_allowed:
            raise InvalidValue("script records are only valid below /lib")
        digest, script_text, source = _script_info(value)
        return value, digest, 1, script_text, 0, source
    if t is str or t is int:
        return _other_child_scalar(value)
    raise InvalidValue(f"unsupported value type: {t.__name__}")


def _other_child_scalar(value: Any) -> tuple[Any, bytes, int, int, int, int]:
    leaf = _leaf(value, False)
    return value, leaf[2], 1, leaf[4], 0, -1


def _map_digest(key_bytes: list[bytes], digests: list[bytes]) -> bytes:
    return _hash(
        b"".join(
            chain(
                (b"\x06", _Q(len(key_bytes))),
                chain.from_iterable(zip(map(_Q, map(len, key_bytes)), key_bytes, digests)),
            )
        )
    )


def _heads_of(node: Node) -> list[bytes]:
    """``u64be(len(key)) || key`` for every key of a map node, cached on the node so that
    repeated writes into a large map do not re-encode all of its keys."""
    try:
        return node._heads  # type: ignore[attr-defined]
    except AttributeError:
        pass
    heads = [_Q(len(raw)) + raw for raw in _encode_keys(list(node[1]))]
    node._heads = heads  # type: ignore[attr-defined]
    return heads


def _digest_from_heads(heads: list[bytes], digests: list[bytes]) -> bytes:
    return _hash(b"".join(chain((b"\x06", _Q(len(heads))), chain.from_iterable(zip(heads, digests)))))


def _array_digest(digests: list[bytes]) -> bytes:
    return _hash(b"\x05" + _Q(len(digests)) + b"".join(digests))


def _encode_keys(keys: list[str]) -> list[bytes]:
    try:
        return list(map(str.encode, keys))
    except UnicodeEncodeError:
        raise InvalidValue(_BAD_TEXT) from None


_SMALL_MAP = 12
_KEY_HEADS: dict[str, bytes] = {}
_KEY_HEADS_MAX = 1 << 16


def _key_head(key: str) -> bytes:
    """``u64be(len(key)) || key`` for the map digest; memoized because keys repeat a lot."""
    head = _KEY_HEADS.get(key)
    if head is None:
        raw = _encode_text(key)
        head = _Q(len(raw)) + raw
        if len(_KEY_HEADS) >= _KEY_HEADS_MAX:
            _KEY_HEADS.clear()
        _KEY_HEADS[key] = head
    return head


def _build_map(mapping: dict, scripts_allowed: bool, depth: int, strict: bool) -> Node:
    if depth >= MAX_NESTING:
        raise InvalidValue(_NESTING)
    if len(mapping) <= _SMALL_MAP:
        return _build_small_map(mapping, scripts_allowed, depth, strict)
    keys = list(mapping)
    n = len(keys)
    if list(map(type, keys)).count(str) != n:
        raise InvalidValue("map keys must be text")
    ordered = sorted(keys)
    if ordered != keys:
        if strict:
            raise InvalidValue("map keys are not in canonical order")
        keys = ordered
        values = list(map(mapping.__getitem__, keys))
    else:
        values = list(mapping.values())
    key_bytes = _encode_keys(keys)
    items, digests, count, text, height, max_script = _children(values, scripts_allowed, depth, strict)
    return _node(
        (
            MAP,
            dict(zip(keys, items)),
            _map_digest(key_bytes, digests),
            count + 1,
            text + sum(map(len, key_bytes)),
            height + 1,
            max_script,
            digests,
        )
    )


def _build_small_map(mapping: dict, scripts_allowed: bool, depth: int, strict: bool) -> Node:
    """One fused pass for small maps, where per-call overheads dominate."""
    if list(map(type, mapping)).count(str) != len(mapping):
        raise InvalidValue("map keys must be text")
    keys = sorted(mapping)
    if strict and keys != list(mapping):
        raise InvalidValue("map keys are not in canonical order")
    parts = [b"\x06", _Q(len(keys))]
    add_part = parts.append
    items: list = []
    digests: list[bytes] = []
    add_item, add_digest = items.append, digests.append
    count = 1
    text = height = 0
    max_script = -1
    heads = [_KEY_HEADS.get(key) or _key_head(key) for key in keys]  # every key is checked before any value
    for key, head in zip(keys, heads):
        text += len(head) - 8
        value = mapping[key]
        t = type(value)
        if t is str:
            try:
                raw = value.encode()
            except UnicodeEncodeError:
                raise InvalidValue(_BAD_TEXT) from None
            digest = _H(b"\x04" + raw).digest()
            text += len(raw)
            count += 1
            if height == 0:
                height = 1
        elif t is int:
            if not I64_MIN <= value <= I64_MAX:
                raise InvalidValue("integer is outside signed 64-bit range")
            digest = _INT_DIGESTS.get(value) or _int_digest(value)
            count += 1
            if height == 0:
                height = 1
        else:
            value, digest, c, x, h, s = _other_child(value, t, scripts_allowed, depth, strict)
            count += c
            text += x
            if h + 1 > height:
                height = h + 1
            if s > max_script:
                max_script = s
        add_part(head)
        add_part(digest)
        add_digest(digest)
        add_item(value)
    return _node(
        (MAP, dict(zip(keys, items)), _H(b"".join(parts)).digest(), count, text, height, max_script, digests)
    )


def _build_array(values: list, scripts_allowed: bool, depth: int, strict: bool) -> Node:
    if depth >= MAX_NESTING:
        raise InvalidValue(_NESTING)
    items, digests, count, text, height, max_script = _children(values, scripts_allowed, depth, strict)
    return _node((ARRAY, tuple(items), _array_digest(digests), count + 1, text, height + 1, max_script, digests))


try:
    from . import _treecore as _native
except ImportError:  # built without a C compiler: the Python builder serves alone
    _native = None
else:
    # Script records and unsupported values go back to _other_child; inputs longer than
    # one BLAKE3 chunk go to the blake3 package.
    _native.configure(Node, InvalidValue, _other_child, _hash, MAX_NESTING, Script, CBOR_SCRIPT_TAG)

#: Whether the native builder is in use (``svit._treecore`` was built at install time).
NATIVE_BUILDER = _native is not None


def decode_node(data: bytes, offset: int) -> tuple[Node, int]:
    """Native builder only: the tree item encoded in canonical CBOR at ``data[offset:]``
    and the offset just after it. Raises ``ValueError`` for bytes that are not
    well-formed CBOR and :class:`InvalidValue` for an item a tree cannot hold."""
    item, end = _native.decode(data, offset)
    return (item if type(item) is Node else _leaf(item, True)), end


def cbor_item_end(data: bytes, offset: int) -> int:
    """Native builder only: where the well-formed CBOR item at ``offset`` ends (else ``ValueError``)."""
    return _native.skip(data, offset)


def cbor_head(data: bytes, offset: int) -> tuple[int, int, int]:
    """Native builder only: ``(major type, argument, end of head)`` of the item at ``offset``."""
    return _native.head(data, offset)


# ---------------------------------------------------------------------------
# Plain values out


def _plain(item: Any) -> Any:
    if type(item) is not Node:
        return item
    kind = item[0]
    if kind == MAP:
        mapping = item[1]
        if not _has_nodes(mapping.values()):
            return dict(mapping)
        return {key: (_plain(child) if type(child) is Node else child) for key, child in mapping.items()}
    if kind == ARRAY:
        values = item[1]
        if not _has_nodes(values):
            return list(values)
        return [(_plain(child) if type(child) is Node else child) for child in values]
    return item[1]


def to_value(node: Node) -> Any:
    return _plain(node)


# ---------------------------------------------------------------------------
# Canonical CBOR of a node (the snapshot's value encoding)


class Encoded:
    """Marks a node for embedding, pre-encoded, inside a larger ``cbor2.dumps`` call."""

    __slots__ = ("node",)

    def __init__(self, node: Node) -> None:
        self.node = node


def cbor_default(encoder: Any, obj: Any) -> None:
    """``cbor2`` hook for what plain CBOR cannot express: embedded nodes and scripts."""
    t = type(obj)
    if t is Encoded:
        encoder.write(node_cbor(obj.node))
    elif t is Script:
        encoder.encode(cbor2.CBORTag(CBOR_SCRIPT_TAG, [obj.source, obj.documentation]))
    else:
        raise InvalidValue(f"unsupported value type: {t.__name__}")


def _cbor_head(major: int, length: int) -> bytes:
    """The CBOR initial byte(s) for ``major`` type with a definite ``length`` (minimal form)."""
    top = major << 5
    if length < 24:
        return bytes((top | length,))
    if length < 0x100:
        return bytes((top | 24, length))
    if length < 0x10000:
        return bytes((top | 25,)) + length.to_bytes(2, "big")
    if length < 0x100000000:
        return bytes((top | 26,)) + length.to_bytes(4, "big")
    return bytes((top | 27,)) + length.to_bytes(8, "big")


_KEY_CBOR: dict[str, bytes] = {}


def _key_cbor(key: str) -> bytes:
    found = _KEY_CBOR.get(key)
    if found is None:
        raw = key.encode("utf-8")
        found = _cbor_head(3, len(raw)) + raw
        if len(_KEY_CBOR) >= _KEY_HEADS_MAX:
            _KEY_CBOR.clear()
        _KEY_CBOR[key] = found
    return found


def _leaf_cbor(value: Any) -> bytes:
    return cbor2.dumps(value, default=cbor_default)


def node_cbor(node: Node) -> bytes:
    """Deterministic CBOR of a node: definite lengths, minimal integer heads, floats as
    binary64, maps in code-point key order, scripts as tag :data:`CBOR_SCRIPT_TAG`.

    A container whose children are all leaves is encoded by ``cbor2`` once and the
    bytes are cached on the node; a container holding nodes is assembled from its
    children's encodings (the same bytes ``cbor2`` would write), so a repeated snapshot
    re-encodes nothing below an unchanged leaf-only container.
    """
    if _native is not None:
        return _native.encode(node)
    return _node_cbor_python(node)


def _node_cbor_python(node: Node) -> bytes:
    """The reference encoder (and the fallback without the native module)."""
    kind = node[0]
    if kind != MAP and kind != ARRAY:
        return _leaf_cbor(node[1])
    try:
        return node._cbor  # type: ignore[attr-defined]
    except AttributeError:
        pass
    value = node[1]
    if kind == MAP:
        if _has_nodes(value.values()):
            parts = [_cbor_head(5, len(value))]
            append = parts.append
            for key, child in value.items():
                append(_key_cbor(key))
                append(_node_cbor_python(child) if type(child) is Node else _leaf_cbor(child))
            return b"".join(parts)
        encoded = node._cbor = cbor2.dumps(value, default=cbor_default)  # type: ignore[attr-defined]
        return encoded
    if _has_nodes(value):
        parts = [_cbor_head(4, len(value))]
        parts.extend(_node_cbor_python(child) if type(child) is Node else _leaf_cbor(child) for child in value)
        return b"".join(parts)
    encoded = node._cbor = cbor2.dumps(value, default=cbor_default)  # type: ignore[attr-defined]
    return encoded


# ---------------------------------------------------------------------------
# Walking and path-copying updates


def _fmt(segments: Iterable[str]) -> str:
    return "/" + "/".join(segments)


def _array_index(segment: str, segments: tuple, upto: int) -> int:
    if not (segment.isascii() and segment.isdigit()):
        raise InvalidPath(f"array index must be a non-negative decimal: {_fmt(segments[: upto + 1])}")
    return int(segment)


def _step(container: Any, segment: str, segments: tuple, i: int) -> Any:
    """The child at ``segment`` or ``_ABSENT``; walking through a leaf is InvalidPath."""
    if type(container) is not Node or not (container[0] == MAP or container[0] == ARRAY):
        raise InvalidPath(f"cannot walk through a scalar: {_fmt(segments[: i + 1])}")
    if container[0] == MAP:
        return container[1].get(segment, _ABSENT)
    index = _array_index(segment, segments, i)
    values = container[1]
    return values[index] if index < len(values) else _ABSENT


def get(node: Node, segments: tuple[str, ...]) -> Node | None:
    """The node at ``segments`` below ``node``, or None when absent."""
    segments = tuple(segments)
    current: Any = node
    for i, segment in enumerate(segments):
        current = _step(current, segment, segments, i)
        if current is _ABSENT:
            return None
    return current if type(current) is Node else _leaf(current, True)


def node_hash(node: Node, segments: tuple[str, ...]) -> str | None:
    found = get(node, segments)
    return None if found is None else found.hash


def _walk_to_parent(root: Node, segments: tuple) -> list[tuple[Node, str]]:
    """[(container, segment), ...] from the root down to the target's parent (which must exist)."""
    stack: list[tuple[Node, str]] = []
    current: Any = root
    for i, segment in enumerate(segments[:-1]):
        child = _step(current, segment, segments, i)
        if child is _ABSENT:
            raise InvalidPath(f"parent does not exist: {_fmt(segments[: i + 1])}")
        stack.append((current, segment))
        current = child
    if type(current) is not Node or not (current[0] == MAP or current[0] == ARRAY):
        raise InvalidPath(f"parent is not a map or array: {_fmt(segments[:-1])}")
    stack.append((current, segments[-1]))
    return stack


def _recompute(children: Iterable[Any]) -> tuple[int, int]:
    """(height, max_script) of a container from all of its children (the slow path)."""
    height = 0
    max_script = -1
    for child in children:
        if type(child) is Node:
            if child[5] + 1 > height:
                height = child[5] + 1
            if child[6] > max_script:
                max_script = child[6]
        else:
            if height == 0:
                height = 1
            if type(child) is Script:
                source = _item_info(child)[3]
                if source > max_script:
                    max_script = source
    return height, max_script


def _combined(current: int, old: int | None, new: int | None, floor: int, remaining: int) -> int | None:
    """The new maximum after replacing/removing one contributor, or None if a rescan is needed.

    ``floor`` is the value every remaining child guarantees (1 for height, -1 for scripts).
    """
    if old is None or old < current:
        return current if new is None else max(current, new)
    if new is not None and new >= current:
        return new
    if old <= floor:
        return floor if remaining else (0 if floor == 1 else -1)
    return None


def _aggregate_after(
    container: Node,
    old: tuple[int, int, int, int] | None,
    new: tuple[int, int, int, int] | None,
    children: Any,
    extra_text: int,
) -> tuple[int, int, int, int]:
    """count/text/height/max_script after one child changes, rescanning only when the
    changed child was the unique maximum."""
    count, text = container[3], container[4]
    if old is not None:
        count -= old[0]
        text -= old[1]
    if new is not None:
        count += new[0]
        text += new[1]
    text += extra_text
    remaining = len(children)
    height = _combined(
        container[5], None if old is None else old[2] + 1, None if new is None else new[2] + 1, 1, remaining
    )
    max_script = _combined(container[6], None if old is None else old[3], None if new is None else new[3], -1, remaining)
    if height is None or max_script is None:
        rescanned = _recompute(children)
        height = rescanned[0] if height is None else height
        max_script = rescanned[1] if max_script is None else max_script
    return count, text, height, max_script


def _with_child(container: Node, segment: str, child: Node, segments: tuple, depth: int) -> Node:
    """A copy of ``container`` with ``segment`` set to ``child`` (map insert allowed; arrays replace only)."""
    item = _as_item(child)
    new_info = (child[3], child[4], child[5], child[6])
    digests = list(container[7])
    if container[0] == MAP:
        mapping = container[1]
        old = mapping.get(segment, _ABSENT)
        heads = list(_heads_of(container))
        position = bisect_left(list(mapping), segment)
        if old is _ABSENT:
            key_raw = _encode_text(segment)
            entries = list(mapping.items())
            entries.insert(position, (segment, item))
            updated = dict(entries)
            heads.insert(position, _Q(len(key_raw)) + key_raw)
            digests.insert(position, child[2])
            aggregates = _aggregate_after(container, None, new_info, updated.values(), len(key_raw))
        else:
            updated = mapping.copy()
            updated[segment] = item
            digests[position] = child[2]
            aggregates = _aggregate_after(container, _item_info(old), new_info, updated.values(), 0)
        result = _node(
            (MAP, updated, _digest_from_heads(heads, digests), aggregates[0], aggregates[1], aggregates[2],
             aggregates[3], digests)
        )
        result._heads = heads  # type: ignore[attr-defined]
        return result
    values = container[1]
    index = _array_index(segment, segments, depth)
    if index >= len(values):
        raise InvalidPath(f"array index out of range: {_fmt(segments[: depth + 1])}")
    items = list(values)
    old = items[index]
    items[index] = item
    digests[index] = child[2]
    aggregates = _aggregate_after(container, _item_info(old), new_info, items, 0)
    return _node((ARRAY, tuple(items), _array_digest(digests), *aggregates, digests))


def _without_child(container: Node, segment: str, segments: tuple, depth: int) -> Node:
    digests = list(container[7])
    if container[0] == MAP:
        mapping = container[1]
        old = mapping.get(segment, _ABSENT)
        if old is _ABSENT:
            raise InvalidPath(f"path does not exist: {_fmt(segments)}")
        heads = list(_heads_of(container))
        position = bisect_left(list(mapping), segment)
        del heads[position]
        del digests[position]
        updated = mapping.copy()
        del updated[segment]
        aggregates = _aggregate_after(
            container, _item_info(old), None, updated.values(), -len(_encode_text(segment))
        )
        result = _node((MAP, updated, _digest_from_heads(heads, digests), *aggregates, digests))
        result._heads = heads  # type: ignore[attr-defined]
        return result
    index = _array_index(segment, segments, depth)
    values = container[1]
    if index >= len(values):
        raise InvalidPath(f"path does not exist: {_fmt(segments)}")
    items = list(values)
    old = items.pop(index)
    del digests[index]
    aggregates = _aggregate_after(container, _item_info(old), None, items, 0)
    return _node((ARRAY, tuple(items), _array_digest(digests), *aggregates, digests))


def _rebuild_ancestors(stack: list[tuple[Node, str]], updated: Node, segments: tuple) -> Node:
    for depth in range(len(stack) - 2, -1, -1):
        parent, segment = stack[depth]
        updated = _with_child(parent, segment, updated, segments, depth)
    return updated


def set_at(root: Node, segments: tuple[str, ...], node: Node) -> Node:
    """A new root with ``node`` at ``segments``; only the nodes on the path are copied.

    The parent must exist; a map gains or replaces the key; an array only replaces an
    existing index. The old root is untouched whatever happens.
    """
    if type(node) is not Node:
        raise InvalidValue("set_at needs a tree node")
    segments = tuple(segments)
    if not segments:
        return node
    stack = _walk_to_parent(root, segments)
    parent, segment = stack[-1]
    updated = _with_child(parent, segment, node, segments, len(segments) - 1)
    return _rebuild_ancestors(stack, updated, segments)


def remove_at(root: Node, segments: tuple[str, ...]) -> Node:
    """A new root without the entry at ``segments`` (array items after it shift down)."""
    segments = tuple(segments)
    if not segments:
        raise InvalidPath("cannot remove the root")
    stack = _walk_to_parent(root, segments)
    parent, segment = stack[-1]
    updated = _without_child(parent, segment, segments, len(segments) - 1)
    return _rebuild_ancestors(stack, updated, segments)


# ---------------------------------------------------------------------------
# Validation against limits


def validate_value(node: Node, limits: Limits, *, scripts_allowed: bool) -> None:
    """Reference §3.2 checks of one value, in O(1) from the cached aggregates."""
    if node[6] >= 0 and not scripts_allowed:
        raise InvalidValue("script records are only valid below /lib")
    if node[5] > limits.max_value_depth:
        raise InvalidValue(_NESTING)
    if node[3] > limits.max_value_entries:
        raise InvalidValue("maximum value entries exceeded")
    if node[4] > limits.max_text_bytes:
        raise InvalidValue("maximum text bytes exceeded")
    if node[6] > limits.max_script_bytes:
        raise ResourceLimitExceeded("script source")


def empty_map() -> Node:
    return _build_map({}, False, 0, False)


def empty_array() -> Node:
    return _build_array([], False, 0, False)


__all__ = [
    "Node",
    "KIND_NAMES",
    "CBOR_SCRIPT_TAG",
    "Encoded",
    "cbor_default",
    "from_value",
    "from_decoded",
    "leaf_node",
    "to_value",
    "node_cbor",
    "get",
    "node_hash",
    "set_at",
    "remove_at",
    "validate_value",
    "empty_map",
    "empty_array",
]
