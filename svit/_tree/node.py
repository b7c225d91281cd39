"""The tree node type, its scalar leaves, and the digest of a scalar.

A :class:`Node` is one immutable value of the tree. A scalar node holds its Python value
(``None``, ``bool``, ``int``, ``float``, ``str`` or a frozen :class:`Script`); a container
node (map or array) holds the root of its chunk tree (:mod:`svit._tree.chunks`). Every
node carries the aggregates the limits are checked against, so validating a value costs
O(1) whatever its size:

* ``count``: nodes in the subtree (a container counts 1 plus its entries' counts);
* ``text``: UTF-8 bytes of strings, map keys, script sources and documentation;
* ``height``: depth of the deepest node below (a scalar or an empty container is 0);
* ``max_script``: the largest script source in bytes, -1 if none.

Inside a container, scalars are kept as raw Python values, not nodes: :func:`leaf`
wraps one when it is read on its own. A scalar's digest is BLAKE3 of its canonical CBOR
(:mod:`svit.cbor`), computed only when asked; a container's digest is the digest of its
root chunk. Scalar CBOR is never an array, and a chunk's encoding always is, so the two
kinds of digest cannot collide.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from itertools import chain
from typing import Any

import blake3
import cbor2

from .. import cbor
from ..errors import InvalidPath, InvalidValue, ResourceLimitExceeded
from ..limits import Limits
from ..values import I64_MAX, I64_MIN, Script

__all__ = [
    "ARRAY",
    "BAD_TEXT",
    "BOOL",
    "CHUNK_REF_TAG",
    "INTEGER",
    "KIND_NAMES",
    "MAP",
    "NESTING",
    "NULL",
    "NUMBER",
    "SCRIPT",
    "SCRIPT_TAG",
    "STRING",
    "ARRAY_INNER_PREFIX",
    "ARRAY_LEAF_PREFIX",
    "MAP_INNER_PREFIX",
    "MAP_LEAF_PREFIX",
    "Chunk",
    "chunk_cbor",
    "inner_chunk_cbor",
    "leaf_chunk_cbor",
    "Node",
    "chunk_keys",
    "encode_text",
    "hash_bytes",
    "leaf",
    "leaf_cbor",
    "leaves",
    "make_container",
    "plain",
    "script_default",
    "script_sizes",
    "validate_value",
]

NULL, BOOL, INTEGER, NUMBER, STRING, ARRAY, MAP, SCRIPT = range(8)
KIND_NAMES = ("null", "bool", "integer", "number", "string", "array", "map", "script")

NESTING = "maximum nesting depth exceeded"
BAD_TEXT = "text must be valid Unicode (no lone surrogates)"

#: CBOR tag of a script record ``[source, documentation]`` ("SVIT"; unregistered).
SCRIPT_TAG = 0x53564954
#: CBOR tag of a reference to a child container (its digest) inside a chunk ("SVND").
CHUNK_REF_TAG = 0x53564E44

_H = blake3.blake3


def hash_bytes(data: bytes) -> bytes:
    """The 32-byte BLAKE3 digest of ``data``."""
    digest: bytes = _H(data).digest()
    return digest


def script_default(encoder: Any, obj: Any) -> None:
    """``cbor2`` hook for the one leaf plain CBOR cannot express: a script record."""
    if type(obj) is Script:
        encoder.encode(cbor2.CBORTag(SCRIPT_TAG, [obj.source, obj.documentation]))
    else:
        raise InvalidValue(f"unsupported value type: {type(obj).__name__}")


def leaf_cbor(value: Any) -> bytes:
    """The canonical CBOR item of a scalar, text or script value."""
    return cbor2.dumps(value, default=script_default)


def encode_text(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidValue(BAD_TEXT) from None


def script_sizes(script: Script) -> tuple[int, int]:
    """(text bytes, source bytes) of a script record."""
    source = len(encode_text(script.source))
    return source + len(encode_text(script.documentation)), source


class Node:
    """One immutable value of the tree; equal content means equal digest and ``==``."""

    __slots__ = ("code", "value", "_digest", "count", "text", "height", "max_script", "cbor")

    code: int
    value: Any
    count: int
    text: int
    height: int
    max_script: int
    #: A container's plain CBOR once :func:`svit._tree.codec.node_cbor` wrote it (the
    #: node is immutable, so it stays true; a later snapshot copies it).
    cbor: bytes | None

    def __init__(self, code: int, value: Any, digest: bytes | None, count: int, text: int, height: int,
                 max_script: int, plain_cbor: bytes | None = None) -> None:
        self.cbor = plain_cbor
        self.code = code
        self.value = value
        self._digest = digest
        self.count = count
        self.text = text
        self.height = height
        self.max_script = max_script

    @property
    def digest(self) -> bytes:
        """32-byte BLAKE3 structural hash, computed on first use (a container's is its root chunk's)."""
        digest = self._digest
        if digest is None:
            code = self.code
            if code == MAP or code == ARRAY:
                digest = self._digest = self.value.digest
            else:
                digest = self._digest = hash_bytes(leaf_cbor(self.value))
        return digest

    @property
    def kind(self) -> str:
        return KIND_NAMES[self.code]

    @property
    def hash(self) -> str:
        """The content hash as lowercase hex (what the API reports)."""
        return self.digest.hex()

    @property
    def is_container(self) -> bool:
        return self.code == MAP or self.code == ARRAY

    @property
    def size(self) -> int:
        """Entries of a map/array; UTF-8 bytes of a string; source bytes of a script; else 0."""
        code = self.code
        if code == MAP or code == ARRAY:
            entries: int = self.value.size
            return entries
        if code == STRING:
            return self.text
        if code == SCRIPT:
            return self.max_script
        return 0

    def child_names(self) -> list[str]:
        """Map keys in canonical order, or ``"0".."n-1"`` for an array."""
        if self.code == MAP:
            return chunk_keys(self.value)
        if self.code == ARRAY:
            return [str(i) for i in range(self.value.size)]
        raise InvalidPath("only maps and arrays have children")

    def to_value(self) -> Any:
        """Fresh plain Python data (dict keys in canonical order)."""
        return plain(self)

    def __eq__(self, other: object) -> bool:
        if type(other) is not Node:
            return False
        if self is other:
            return True
        if self.code != other.code:
            return False
        if self.code == MAP or self.code == ARRAY:
            return bool(self.digest == other.digest)
        return bool(self.value == other.value)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return f"Node({KIND_NAMES[self.code]}, {self.digest.hex()[:16]}…, count={self.count})"


class Chunk:
    """One chunk of a container's chunk tree (built by :mod:`svit._tree.chunks`).

    A leaf chunk (``level`` 0) holds entries: ``keys`` (maps only) and ``items``, each a
    raw scalar or a child container :class:`Node`. An inner chunk holds chunks one level
    down in ``items``, and ``bounds`` routes a lookup: the last key of each child (maps)
    or the running entry count at the end of each child (arrays). The aggregates cover
    the entries below; ``height`` is the tallest entry's height, -1 when empty. ``rank``
    is what the chunk's last key says about boundaries above it (maps; 0 for arrays),
    ``nested`` whether a leaf holds any container.

    ``data`` (the canonical CBOR the digest covers: what the store writes, and what a
    snapshot of an unchanged leaf copies) and ``digest`` are made when first asked for
    and then kept: a working copy edited many times between two commits encodes and
    hashes each chunk of the committed result once, at the commit, and none of the
    intermediate ones. Every item was validated when the chunk was made, so encoding
    later cannot fail.
    """

    __slots__ = ("code", "level", "keys", "items", "bounds", "size", "count", "text", "height", "max_script",
                 "rank", "nested", "_digest", "_data", "derived", "patch")

    code: int
    level: int
    keys: tuple[str, ...] | None
    items: tuple[Any, ...]
    bounds: tuple[Any, ...] | None
    size: int
    count: int
    text: int
    height: int
    max_script: int
    rank: int
    nested: bool

    def __init__(self, code: int, level: int, keys: tuple[str, ...] | None, items: tuple[Any, ...],
                 bounds: tuple[Any, ...] | None, size: int, count: int, text: int, height: int, max_script: int,
                 rank: int, nested: bool, data: bytes | None = None, digest: bytes | None = None) -> None:
        self.code = code
        self.level = level
        self.keys = keys
        self.items = items
        self.bounds = bounds
        self.size = size
        self.count = count
        self.text = text
        self.height = height
        self.max_script = max_script
        self.rank = rank
        self.nested = nested
        self._data = data
        # A builder that made the bytes and their digest in one batch passes both.
        self._digest: bytes | None = digest
        #: ``(base, index, old, new)`` when this chunk is ``base`` with the item or child
        #: at ``index`` replaced (``old`` by ``new``), kept until the bytes are made, so
        #: they can be ``base``'s with that one rewritten instead of encoded again.
        self.derived: tuple[Chunk, int, Any, Any] | None = None
        #: ``(index, offset, length, base digest)`` once the bytes were made that way:
        #: where the rewritten item starts and its length (the next edit at ``index``
        #: rewrites it there, without a search), and the digest of the chunk they were made from (None if it was not
        #: hashed), whose children other than ``index`` are this chunk's.
        self.patch: tuple[int, int, int, bytes | None] | None = None

    @property
    def data(self) -> bytes:
        """The chunk's canonical CBOR (encoded on first use)."""
        data = self._data
        if data is None:
            data = self._data = chunk_cbor(self)
        return data

    @property
    def digest(self) -> bytes:
        """BLAKE3 of :attr:`data` (computed on first use)."""
        digest = self._digest
        if digest is None:
            data = self._data
            if data is None:
                data = self._data = chunk_cbor(self)
            digest = self._digest = _H(data).digest()
        return digest

    @property
    def hashed(self) -> bool:
        """Whether the digest has been computed (what a test of an edit's cost looks at)."""
        return self._digest is not None

    @property
    def encoded(self) -> bool:
        """Whether the bytes have been made."""
        return self._data is not None

    def __repr__(self) -> str:
        return f"Chunk({KIND_NAMES[self.code]}, level={self.level}, items={len(self.items)}, size={self.size})"


#: The first bytes of each kind of chunk: a CBOR array of 2 and its one-letter tag.
MAP_LEAF_PREFIX, ARRAY_LEAF_PREFIX = b"\x82\x61m", b"\x82\x61a"
MAP_INNER_PREFIX, ARRAY_INNER_PREFIX = b"\x82\x61M", b"\x82\x61A"

#: A child container inside a chunk: ``tag(CHUNK_REF_TAG, bytes(32))`` up to the digest.
_REF_HEAD = cbor.head(6, CHUNK_REF_TAG) + cbor.head(2, 32)


def _write_item(encoder: Any, item: Any) -> None:
    """``cbor2`` hook for a leaf's items: a child container is written as its reference."""
    if type(item) is Node:
        encoder.write(_REF_HEAD + item.digest)
    else:
        script_default(encoder, item)


def leaf_chunk_cbor(code: int, keys: tuple[str, ...] | None, chunk_items: tuple[Any, ...]) -> bytes:
    """A leaf chunk's canonical CBOR (``["m", {key: item}]`` or ``["a", [item]]``)."""
    if code == MAP:
        return MAP_LEAF_PREFIX + cbor2.dumps(dict(zip(keys or (), chunk_items)), default=_write_item)
    return ARRAY_LEAF_PREFIX + cbor2.dumps(list(chunk_items), default=_write_item)


def inner_chunk_cbor(code: int, children: tuple[Chunk, ...]) -> bytes:
    """An inner chunk's canonical CBOR (``["M", digests]`` or ``["A", digests]``)."""
    digests = b"".join([child.digest for child in children])
    return (MAP_INNER_PREFIX if code == MAP else ARRAY_INNER_PREFIX) + cbor.head(2, len(digests)) + digests


def chunk_cbor(chunk: Chunk) -> bytes:
    """A chunk's canonical CBOR: its base's bytes with one item or child reference
    rewritten when it was derived from an encoded chunk that way, else encoded in full."""
    derived = chunk.derived
    if derived is not None:
        chunk.derived = None
        patched = _patched(chunk, *derived)
        if patched is not None:
            return patched
    if chunk.level:
        return inner_chunk_cbor(chunk.code, chunk.items)
    return leaf_chunk_cbor(chunk.code, chunk.keys, chunk.items)


def _item_cbor(item: Any) -> bytes:
    """One leaf item as it appears in its chunk's bytes (an item's CBOR does not depend on
    what surrounds it): a child container's reference, or a scalar's own CBOR."""
    if type(item) is Node:
        return _REF_HEAD + item.digest
    return cbor2.dumps(item, default=script_default)


def _patched(chunk: Chunk, base: Chunk, index: int, old: Any, new: Any) -> bytes | None:
    data = base._data  # noqa: SLF001 (the class's own cache)
    if data is None:
        return None
    if base.level:
        # ``prefix, head, digests``: every digest is 32 bytes, so the child's place is known.
        start = len(data) - 32 * (len(base.items) - index)
        chunk.patch = (index, start, 32, base._digest)  # noqa: SLF001
        child: bytes = new.digest
        return data[:start] + child + data[start + 32:]
    hint = base.patch
    if hint is not None and hint[0] == index:
        # The base was itself rewritten at this entry: only bytes after it moved, so the
        # entry is where, and as long as, that one was written.
        at, length = hint[1], hint[2]
    else:
        # The entry's bytes (a map's key, then the item) are in the base's; found once,
        # that occurrence is the entry. Found twice (a number that also ends a text, a
        # container held twice in an array), the leaf is encoded from its entries.
        needle = before = _item_cbor(old)
        length = len(before)
        skip = 0
        if base.code == MAP:
            key = cbor2.dumps(base.keys[index])  # type: ignore[index]
            needle = key + before
            skip = len(key)
        at = data.find(needle)
        if at < 0 or data.find(needle, at + 1) >= 0:
            return None
        at += skip
    after = _item_cbor(new)
    chunk.patch = (index, at, len(after), base._digest)  # noqa: SLF001
    return data[:at] + after + data[at + length:]


def leaves(chunk: Chunk) -> Iterator[Chunk]:
    """The leaf chunks below ``chunk``, in order."""
    if chunk.level == 0:
        yield chunk
        return
    if chunk.level == 1:
        yield from chunk.items
        return
    for child in chunk.items:
        yield from leaves(child)


def chunk_keys(chunk: Chunk) -> list[str]:
    """Every key of a map's chunk tree, in canonical order."""
    if chunk.level == 0:
        return list(chunk.keys or ())
    return list(chain.from_iterable(leaf.keys or () for leaf in leaves(chunk)))


def plain(item: Any) -> Any:
    """Fresh plain data for a stored item (a node or a raw leaf)."""
    if type(item) is not Node:
        return item
    code = item.code
    if code == MAP:
        mapping: dict[str, Any] = {}
        for part in leaves(item.value):
            if part.nested:
                mapping.update(zip(part.keys or (), [plain(x) if type(x) is Node else x for x in part.items]))
            else:
                mapping.update(zip(part.keys or (), part.items))
        return mapping
    if code == ARRAY:
        values: list[Any] = []
        for part in leaves(item.value):
            if part.nested:
                values.extend(plain(x) if type(x) is Node else x for x in part.items)
            else:
                values.extend(part.items)
        return values
    return item.value


def make_container(code: int, root: Chunk) -> Node:
    """The map or array node over a root chunk (its aggregates are the chunk's)."""
    return Node(code, root, None, root.count + 1, root.text, root.height + 1, root.max_script)


def leaf(value: Any, scripts_allowed: bool) -> Node:
    """A node for one scalar, string or script value (validated)."""
    t = type(value)
    if t is str:
        return Node(STRING, value, None, 1, len(encode_text(value)), 0, -1)
    if t is int:
        if not I64_MIN <= value <= I64_MAX:
            raise InvalidValue("integer is outside signed 64-bit range")
        return Node(INTEGER, value, None, 1, 0, 0, -1)
    if t is float:
        if not math.isfinite(value):
            raise InvalidValue("numbers must be finite")
        # -0.0 is stored as 0.0: for hashing they are one value, so keep them one value.
        return Node(NUMBER, value or 0.0, None, 1, 0, 0, -1)
    if t is bool:
        return Node(BOOL, value, None, 1, 0, 0, -1)
    if value is None:
        return Node(NULL, None, None, 1, 0, 0, -1)
    if t is Script:
        if not scripts_allowed:
            raise InvalidValue("script records are only valid below /lib")
        text, source = script_sizes(value)
        return Node(SCRIPT, value, None, 1, text, 0, source)
    raise InvalidValue(f"unsupported value type: {t.__name__}")


# ---------------------------------------------------------------------------
# Validation against limits


def validate_value(node: Node, limits: Limits, *, scripts_allowed: bool) -> None:
    """Reference §3.2 checks of one value, in O(1) from the cached aggregates."""
    if node.max_script >= 0 and not scripts_allowed:
        raise InvalidValue("script records are only valid below /lib")
    if node.height > limits.max_value_depth:
        raise InvalidValue(NESTING)
    if node.count > limits.max_value_entries:
        raise InvalidValue("maximum value entries exceeded")
    if node.text > limits.max_text_bytes:
        raise InvalidValue("maximum text bytes exceeded")
    if node.max_script > limits.max_script_bytes:
        raise ResourceLimitExceeded("script source")
