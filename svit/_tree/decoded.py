"""Building a tree from decoded snapshot data in batches: what restore spends its time on.

:func:`svit._tree.build.build` validates and builds one value at a time, and leaves every
chunk's bytes and digest to be made on first use. A restore needs all of them at once
(the root hash is verified, and the body must be proved canonical), so this builder
makes them as it goes, a handful of C-level passes per chunk rather than Python work per
entry:

* sibling records (an array or map of small maps of scalars, the common shape of
  memory) are validated together: their key tuples once per distinct shape, their
  values column by column (or in one pass when the shapes differ), and each is
  encoded, hashed and made into its chunk and node by one ``map`` over all of them;
* each leaf chunk's bytes are encoded and hashed in one ``map`` over the chunks, and a
  container's plain CBOR (what a snapshot holds) is assembled from its chunks' bytes, so
  the canonical check is one comparison with the body, not a second pass over it.

It builds exactly the tree :func:`~svit._tree.build.build` would (same chunks, same
aggregates) or returns None: for anything invalid, and for the rare kinds it does not
batch, the caller builds with the general builder, which names the problem. So the two
agree on what they accept, and errors keep their wording.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import accumulate, chain, repeat
from operator import add, itemgetter, methodcaller, sub
from typing import Any

import blake3
import cbor2

from .. import cbor
from ..values import I64_MAX, I64_MIN, MAX_NESTING, Script
from .chunks import ARRAY_LEAF, LEAF_MIN, build_array_root, build_map_root, key_rank, root_over_leaves
from .codec import node_cbor
from .node import (
    ARRAY,
    ARRAY_LEAF_PREFIX,
    CHUNK_REF_TAG,
    MAP,
    MAP_LEAF_PREFIX,
    Chunk,
    Node,
    leaf,
    leaf_chunk_cbor,
    leaves,
    make_container,
)

__all__ = ["build_decoded"]

_SCALARS = frozenset((str, int, bool, type(None), float))
_DIGEST: Callable[[Any], bytes] = methodcaller("digest")
_REF_HEAD = cbor.head(6, CHUNK_REF_TAG) + cbor.head(2, 32)
_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)


class _Unhandled(Exception):
    """Not built here: invalid, or a kind the general builder handles."""


def build_decoded(value: Any) -> Node | None:
    """The node :func:`~svit._tree.build.build` makes for decoded snapshot data (scripts
    allowed, keys already canonical), with every chunk's bytes and digest and every
    container's plain CBOR already made; None when the general builder must decide."""
    try:
        t = type(value)
        if t is dict:
            return _map(value, 0)
        if t is list:
            return _array(value, 0)
    except (_Unhandled, ValueError, TypeError, OverflowError, RecursionError):
        return None  # invalid (a lone surrogate, an unhashable key, ...): the general builder says how
    return None


def _finite(values: list[Any]) -> bool:
    """Whether floats are finite and none is a negative zero (the encoding writes 0.0)."""
    if not all(map(math.isfinite, values)):
        return False
    return all(math.copysign(1.0, x) > 0 for x in values if x == 0.0)


def _texts(values: list[Any], types: set[type]) -> list[int]:
    """Each value's text bytes (0 for a non-text scalar)."""
    if str not in types:
        return [0] * len(values)
    if len(types) == 1:
        return list(map(len, values)) if all(map(str.isascii, values)) else list(map(len, map(str.encode, values)))
    if all(x.isascii() for x in values if type(x) is str):
        return [len(x) if type(x) is str else 0 for x in values]
    return [len(x.encode("utf-8")) if type(x) is str else 0 for x in values]


def _integers_fit(values: list[Any], types: set[type]) -> bool:
    """Whether every integer among ``values`` (of ``types``) is a signed 64-bit one."""
    if int not in types:
        return True
    integers = values if len(types) == 1 else [x for x in values if type(x) is int]
    return I64_MIN <= min(integers) and max(integers) <= I64_MAX


def _scalars(values: list[Any], types: set[type]) -> list[int]:
    """Text bytes of valid scalars (raises :class:`_Unhandled` for an invalid one)."""
    if float in types and not _finite([x for x in values if type(x) is float]):
        raise _Unhandled
    if not _integers_fit(values, types):
        raise _Unhandled
    return _texts(values, types)


_Batch = tuple[list[Node], list[int], list[int], list[bytes], list[bytes]]


def _items(values: list[Any], depth: int) -> tuple[list[Any], list[int] | None, _Batch | None]:
    """What a container stores for ``values``, each item's text bytes when all are
    scalars other than scripts (None: the chunk builder counts), and what was made for
    them when they are all records built together."""
    types = set(map(type, values))
    if types <= _SCALARS:
        return values, _scalars(values, types), None
    if types == {dict} and depth + 1 < MAX_NESTING:
        batch = _records(values)
        if batch is not None:
            return batch[0], None, batch
    items: list[Any] = []
    add_item = items.append
    for value in values:
        t = type(value)
        if t is dict:
            add_item(_map(value, depth + 1))
        elif t is list:
            add_item(_array(value, depth + 1))
        elif t is Script:
            leaf(value, True)  # its text must be valid Unicode
            add_item(value)
        elif t in _SCALARS:
            _scalars([value], {t})
            add_item(value)
        else:
            raise _Unhandled
    return items, None, None


def _records(records: list[dict[Any, Any]]) -> _Batch | None:
    """Map nodes for sibling small maps of plain scalars, built together, with their
    sizes, text bytes, digests and plain CBOR; None when any of them is something else
    (each is then built on its own)."""
    sizes = list(map(len, records))
    if min(sizes) == 0 or max(sizes) > LEAF_MIN:
        return None
    shapes = list(map(tuple, records))
    known: dict[tuple[Any, ...], tuple[tuple[str, ...], int, int]] = {}
    for shape in set(shapes):
        if list(map(type, shape)).count(str) != len(shape) or sorted(shape) != list(shape):
            return None
        known[shape] = (shape, sum(map(len, map(str.encode, shape))), key_rank(shape[-1]))
    rows = list(map(tuple, map(dict.values, records)))
    row_text = _row_text(rows) if len(known) == 1 else _mixed_row_text(rows, sizes)
    if row_text is None:
        return None
    shape_info = list(map(known.__getitem__, shapes))
    texts = list(map(add, map(_SECOND, shape_info), row_text))
    encoded = list(map(cbor2.dumps, records))
    data = list(map(MAP_LEAF_PREFIX.__add__, encoded))
    digests = list(map(_DIGEST, map(blake3.blake3, data)))
    count = len(records)
    chunks = list(map(Chunk, repeat(MAP, count), repeat(0, count), map(_FIRST, shape_info), rows,
                      repeat(None, count), sizes, sizes, texts, repeat(0, count), repeat(-1, count),
                      map(_THIRD, shape_info), repeat(False, count), data, digests))
    nodes = list(map(Node, repeat(MAP, count), chunks, digests, map((1).__add__, sizes), texts, repeat(1, count),
                     repeat(-1, count), encoded))
    return nodes, sizes, texts, digests, encoded


def _row_text(rows: list[tuple[Any, ...]]) -> list[int] | None:
    """Each row's text bytes, column by column (the rows share one shape); None when a
    value is not a valid plain scalar."""
    row_text: list[int] | None = None
    for column in zip(*rows):
        types = set(map(type, column))
        if not types <= _SCALARS:
            return None
        values = list(column)
        try:
            text = _scalars(values, types)
        except _Unhandled:
            return None
        if str in types:
            row_text = text if row_text is None else list(map(add, row_text, text))
    return row_text if row_text is not None else [0] * len(rows)


def _mixed_row_text(rows: list[tuple[Any, ...]], sizes: list[int]) -> list[int] | None:
    """:func:`_row_text` for rows of several shapes: one pass over all their values."""
    values = list(chain.from_iterable(rows))
    types = set(map(type, values))
    if not types <= _SCALARS:
        return None
    try:
        value_text = _scalars(values, types)
    except _Unhandled:
        return None
    running = [0, *accumulate(value_text)]
    ends = list(accumulate(sizes))
    return list(map(sub, map(running.__getitem__, ends), map(running.__getitem__, [0, *ends[:-1]])))


def _map(mapping: dict[Any, Any], depth: int) -> Node:
    if depth >= MAX_NESTING:
        raise _Unhandled
    keys = list(mapping)
    if list(map(type, keys)).count(str) != len(keys) or sorted(keys) != keys:
        raise _Unhandled
    raw_keys = list(map(str.encode, keys))
    items, text, _batch = _items(list(mapping.values()), depth)
    return _container(MAP, build_map_root(keys, items, raw_keys, text))


def _array(values: list[Any], depth: int) -> Node:
    if depth >= MAX_NESTING:
        raise _Unhandled
    items, text, batch = _items(values, depth)
    if batch is not None:
        return _record_array(*batch)
    return _container(ARRAY, build_array_root(items, text))


def _record_array(nodes: list[Node], sizes: list[int], texts: list[int], digests: list[bytes],
                  encoded: list[bytes]) -> Node:
    """An array of records built together: its leaves made from what the batch made (a
    record counts its entries and itself, and is one level high)."""
    n = len(nodes)
    spans = [(a, min(a + ARRAY_LEAF, n)) for a in range(0, n, ARRAY_LEAF)]
    data = [ARRAY_LEAF_PREFIX + cbor.head(4, b - a) + b"".join(map(_REF_HEAD.__add__, digests[a:b])) for a, b in spans]
    leaf_digests = list(map(_DIGEST, map(blake3.blake3, data)))
    parts = [
        Chunk(ARRAY, 0, None, tuple(nodes[a:b]), None, b - a, sum(sizes[a:b]) + b - a, sum(texts[a:b]), 1, -1, 0,
              True, encoded_leaf, digest)
        for (a, b), encoded_leaf, digest in zip(spans, data, leaf_digests)
    ]
    node = make_container(ARRAY, parts[0] if len(parts) == 1 else root_over_leaves(ARRAY, parts))
    node.cbor = cbor.head(4, n) + b"".join(encoded)
    return node


def _container(code: int, root: Chunk) -> Node:
    """The node over ``root`` with its leaves' bytes and digests and its plain CBOR made."""
    parts = [root] if root.level == 0 else list(leaves(root))
    data = list(map(_leaf_bytes, parts))
    digests = list(map(_DIGEST, map(blake3.blake3, data)))
    for part, encoded, digest in zip(parts, data, digests):
        part._data = encoded  # noqa: SLF001 (the bytes the chunk would make on first use)
        part._digest = digest  # noqa: SLF001
    node = make_container(code, root)
    node_cbor(node)
    return node


def _leaf_bytes(chunk: Chunk) -> bytes:
    """A leaf chunk's canonical bytes; an array leaf of containers without a hook call each."""
    items = chunk.items
    if chunk.nested and chunk.code == ARRAY and set(map(type, items)) == {Node}:
        digests = [item.digest for item in items]
        return ARRAY_LEAF_PREFIX + cbor.head(4, len(items)) + b"".join(map(_REF_HEAD.__add__, digests))
    return leaf_chunk_cbor(chunk.code, chunk.keys, items)
