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

This module is the public face; the concepts live in ``svit._tree``: ``node`` (the node
type and every digest), ``build`` (the Python builder), ``codec`` (the node CBOR) and
``edits`` (get, set_at, remove_at). Here the optional native builder
(``svit._treecore``) is chosen, so one switch, :data:`NATIVE_BUILDER`, covers building,
encoding and decoding.
"""

from __future__ import annotations

import copyreg
from typing import Any, Protocol

from ._tree.build import build_python, empty_array, empty_map, other_child
from ._tree.codec import CBOR_SCRIPT_TAG, encode_head, key_cbor, leaf_cbor, node_cbor_python, script_default
from ._tree.edits import get, node_hash, remove_at, set_at
from ._tree.node import (
    ARRAY,
    BOOL,
    INTEGER,
    KIND_NAMES,
    MAP,
    NULL,
    NUMBER,
    SCRIPT,
    STRING,
    Node,
    hash_bytes,
    leaf,
    leaf_node,
    plain,
    validate_value,
)
from .errors import InvalidValue
from .values import MAX_NESTING, Script

__all__ = [
    "ARRAY",
    "BOOL",
    "CBOR_SCRIPT_TAG",
    "INTEGER",
    "KIND_NAMES",
    "MAP",
    "NATIVE_BUILDER",
    "NULL",
    "NUMBER",
    "SCRIPT",
    "STRING",
    "Node",
    "script_default",
    "cbor_head",
    "cbor_item_end",
    "decode_node",
    "empty_array",
    "empty_map",
    "encode_head",
    "from_decoded",
    "from_value",
    "get",
    "key_cbor",
    "leaf_cbor",
    "leaf_node",
    "node_cbor",
    "node_cbor_python",
    "node_hash",
    "remove_at",
    "set_at",
    "to_value",
    "validate_value",
]


class _NativeCore(Protocol):
    """What this module uses of ``svit._treecore``."""

    def build(self, value: dict[str, Any] | list[Any], scripts_allowed: bool, strict: bool, /) -> Node: ...
    def encode(self, node: Node, /) -> bytes: ...
    def decode(self, data: bytes, offset: int, /) -> tuple[Any, int]: ...
    def skip(self, data: bytes, offset: int, /) -> int: ...
    def head(self, data: bytes, offset: int, /) -> tuple[int, int, int]: ...


_native: _NativeCore | None
try:
    from . import _treecore
except ImportError:  # built without a C compiler: the Python builder serves alone
    _native = None
else:
    # Script records and unsupported values go back to other_child; inputs longer than
    # one BLAKE3 chunk go to the blake3 package.
    _treecore.configure(Node, InvalidValue, other_child, hash_bytes, MAX_NESTING, Script, CBOR_SCRIPT_TAG)
    _native = _treecore

#: Whether the native builder is in use (``svit._treecore`` was built at install time).
NATIVE_BUILDER = _native is not None

# The names the tests and the store's record codec reach for, under their old spelling.
_build_python = build_python
_node_cbor_python = node_cbor_python
_cbor_head = encode_head
_leaf_cbor = leaf_cbor
_key_cbor = key_cbor
_leaf = leaf


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
        return build_python(value, scripts_allowed, strict)
    return leaf(value, scripts_allowed)


def to_value(node: Node) -> Any:
    return plain(node)


def _rebuild(value: Any) -> Node:
    return from_value(value, scripts_allowed=True)


def _reduce_node(node: Node) -> tuple[Any, tuple[Any]]:
    """Pickle and copy a node as plain data, rebuilt on load, rather than trust stored digests."""
    return _rebuild, (plain(node),)


copyreg.pickle(Node, _reduce_node)


# ---------------------------------------------------------------------------
# Canonical CBOR of a node (the snapshot's value encoding)


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
    return node_cbor_python(node)


def _require_native() -> _NativeCore:
    if _native is None:
        raise RuntimeError("this operation needs the native tree builder (svit._treecore)")
    return _native


def decode_node(data: bytes, offset: int) -> tuple[Node, int]:
    """Native builder only: the tree item encoded in canonical CBOR at ``data[offset:]``
    and the offset just after it. Raises ``ValueError`` for bytes that are not
    well-formed CBOR and :class:`InvalidValue` for an item a tree cannot hold."""
    item, end = _require_native().decode(data, offset)
    return (item if type(item) is Node else leaf(item, True)), end


def cbor_item_end(data: bytes, offset: int) -> int:
    """Native builder only: where the well-formed CBOR item at ``offset`` ends (else ``ValueError``)."""
    return _require_native().skip(data, offset)


def cbor_head(data: bytes, offset: int) -> tuple[int, int, int]:
    """Native builder only: ``(major type, argument, end of head)`` of the item at ``offset``."""
    return _require_native().head(data, offset)
