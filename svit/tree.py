"""The committed state tree: immutable, structurally shared, content-hashed values.

A :class:`Node` is one value. Containers (maps and arrays) hold their entries as trees of
chunks whose boundaries depend on the contents alone (:mod:`svit._tree.chunks`), so
reading, writing or removing one entry of a container of n entries costs O(log n) and
rebuilds O(log n) chunks; everything else is shared between versions and forks. Scalars
inside a container are stored as raw Python values (immutable: ``str``, ``int``,
``float``, ``bool``, ``None``, frozen :class:`Script`); :func:`get` wraps one into a node
when it is read on its own.

Digests (DESIGN §5.2): a container's is BLAKE3 of its root chunk, which covers its
scalar leaves inline and its child chunks' and child containers' digests; a scalar's is
BLAKE3 of its canonical CBOR, computed when asked. Equal values have equal digests
whatever history built them. Containers never hand out their private parts:
:meth:`Node.to_value` returns fresh plain data.

The concepts live in ``svit._tree``: ``node`` (the node and chunk types, scalars),
``chunks`` (cutting, lookup, edits), ``build`` (from plain data), ``edits`` (paths) and
``codec`` (plain CBOR, and chunks for the store).
"""

from __future__ import annotations

import copyreg
from collections.abc import Iterator
from typing import Any

from ._tree.build import build, empty_array, empty_map, from_value
from ._tree.chunks import ABSENT, array_items, map_items
from ._tree.codec import ChunkError, decode_chunk, load_container, new_chunks, node_cbor, verify_chunk
from ._tree.decoded import build_decoded
from ._tree.edits import append_items, find, find_key, get, node_hash, remove_at, set_at, set_key, set_leaf_entry
from ._tree.node import (
    ARRAY,
    BOOL,
    INTEGER,
    KIND_NAMES,
    MAP,
    NULL,
    NUMBER,
    SCRIPT,
    SCRIPT_TAG,
    STRING,
    Node,
    leaf,
    leaf_cbor,
    plain,
    script_default,
    validate_value,
)

__all__ = [
    "ABSENT",
    "ARRAY",
    "BOOL",
    "CBOR_SCRIPT_TAG",
    "INTEGER",
    "KIND_NAMES",
    "MAP",
    "NULL",
    "NUMBER",
    "SCRIPT",
    "STRING",
    "ChunkError",
    "Node",
    "append_items",
    "children",
    "decode_chunk",
    "empty_array",
    "empty_map",
    "entries",
    "find",
    "find_key",
    "from_decoded",
    "from_value",
    "get",
    "leaf_cbor",
    "leaf_node",
    "load_container",
    "new_chunks",
    "node_cbor",
    "node_hash",
    "remove_at",
    "script_default",
    "set_at",
    "set_key",
    "set_leaf_entry",
    "to_value",
    "validate_value",
    "verify_chunk",
]

#: CBOR tag of a script record ``[source, documentation]`` ("SVIT"; unregistered).
CBOR_SCRIPT_TAG = SCRIPT_TAG


def from_decoded(value: Any) -> Node:
    """Build a tree from decoded snapshot data: scripts allowed, map keys must already be canonical.

    The batch builder makes it, with every chunk's bytes and digest (what restore needs),
    unless the value holds something only the general builder decides on (an invalid
    value, which it names)."""
    node = build_decoded(value)
    return node if node is not None else build(value, True, True)


def leaf_node(value: Any) -> Node:
    """Wrap a raw stored leaf (already valid) as a node."""
    return leaf(value, True)


def to_value(node: Node) -> Any:
    return plain(node)


def entries(node: Node) -> Iterator[tuple[str, Any]]:
    """A map's ``(key, stored item)`` pairs in key order (an item is a container node or a raw scalar)."""
    if node.code != MAP:
        raise ValueError("entries of a node that is not a map")
    return map_items(node.value)


def children(node: Node) -> Iterator[Any]:
    """A container's stored items in order (map values in key order, or array items)."""
    if node.code == MAP:
        return (item for _, item in map_items(node.value))
    if node.code == ARRAY:
        return array_items(node.value)
    raise ValueError("children of a node that is not a container")


def _rebuild(value: Any) -> Node:
    return from_value(value, scripts_allowed=True)


def _reduce_node(node: Node) -> tuple[Any, tuple[Any]]:
    """Pickle and copy a node as plain data, rebuilt on load, rather than trust stored digests."""
    return _rebuild, (plain(node),)


copyreg.pickle(Node, _reduce_node)
