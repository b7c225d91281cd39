"""Containers as trees of chunks whose boundaries are a function of the contents alone.

A map's entries, in key order, are cut into leaf chunks; the leaf chunks are cut into
inner chunks one level up, and so on until one chunk, the root, remains. Where a map is
cut depends only on its keys: an entry ends a leaf chunk when CRC-32 of its key has its
low 5 bits set (one key in 32) and the chunk holds at least :data:`LEAF_MIN` entries,
or its low 3 bits set and the chunk holds at least :data:`LEAF_SOFT` (so long leaves
are rare);
an inner chunk at level ``L`` ends after a child whose last key's *rank* exceeds ``L``
(each further 3 set bits raise the rank by one, so one child in 8 qualifies) and holds
at least :data:`INNER_MIN` children. A chunk that reaches its cap (:data:`LEAF_CAP`,
:data:`INNER_CAP`) is cut there whatever the keys say, so keys chosen to avoid every
boundary make full chunks, never a huge one. Arrays are cut by position: leaves of
:data:`ARRAY_LEAF` items, inner chunks of :data:`ARRAY_INNER` children.

Because the cuts are made left to right and each depends only on the entries since the
previous cut, one tree exists for a given content, whatever history of inserts and
removes built it; and an edit changes only the chunks from the edited one up to the
first old boundary the new cuts agree with, plus one chunk per level above. Changing a
value (not a key) never moves a boundary.

A chunk's digest is BLAKE3 of its canonical CBOR, which is also how the store keeps it:

* map leaf ``["m", {key: item, ...}]``, array leaf ``["a", [item, ...]]``, where an item
  is a scalar's own CBOR or ``tag(CHUNK_REF_TAG, digest)`` of a child container;
* map inner ``["M", digests]``, array inner ``["A", digests]``, ``digests`` being the
  children's 32-byte digests concatenated into one byte string.

So a commit or a restore hashes once per chunk, not once per leaf.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from itertools import accumulate
from operator import attrgetter
from typing import Any
from zlib import crc32

from ..values import Script
from .node import (
    ARRAY,
    ARRAY_INNER_PREFIX,
    ARRAY_LEAF_PREFIX,
    MAP,
    MAP_INNER_PREFIX,
    MAP_LEAF_PREFIX,
    Chunk,
    Node,
    leaves,
    script_sizes,
)

__all__ = [
    "ABSENT",
    "ARRAY_INNER",
    "ARRAY_INNER_PREFIX",
    "ARRAY_LEAF",
    "ARRAY_LEAF_PREFIX",
    "INNER_CAP",
    "INNER_MIN",
    "LEAF_CAP",
    "LEAF_MIN",
    "LEAF_SOFT",
    "MAP_INNER_PREFIX",
    "MAP_LEAF_PREFIX",
    "array_append",
    "array_find",
    "array_items",
    "array_remove",
    "array_set",
    "build_array_root",
    "build_map_root",
    "empty_root",
    "key_rank",
    "leaf_item_set",
    "make_inner",
    "make_leaf",
    "scalar_leaf",
    "map_find",
    "map_items",
    "map_remove",
    "map_set",
    "root_over_leaves",
]

LEAF_MIN, LEAF_CAP = 8, 128
#: From this size on, a map leaf also ends after a key whose CRC-32 has its low 3 bits set.
LEAF_SOFT = 48
INNER_MIN, INNER_CAP = 4, 64
ARRAY_LEAF, ARRAY_INNER = 32, 16

#: What a lookup returns for a missing key or index (``None`` is a value).
ABSENT: Any = object()

_MAX_RANK = 10  # 5 bits, then nine groups of 3: all of a CRC-32
_COUNT, _TEXT = attrgetter("count"), attrgetter("text")
_HEIGHT, _MAX_SCRIPT = attrgetter("height"), attrgetter("max_script")


def key_rank(key: str) -> int:
    """How high in the chunk tree ``key`` can end a chunk: 0 never, 1 a leaf, 2 a level-1 chunk, ..."""
    return _rank_of(crc32(key.encode("utf-8")))


#: Ranks of short keys seen lately: a small map built again and again (an activation's
#: input, a record) ends on the same key each time. Bounded in entries and key length.
_RANKS: dict[str, int] = {}
_RANKS_KEPT, _RANK_KEY_CHARS = 4096, 64


def _last_key_rank(key: str) -> int:
    rank = _RANKS.get(key)
    if rank is None:
        rank = _rank_of(crc32(key.encode("utf-8")))
        if len(key) <= _RANK_KEY_CHARS:
            if len(_RANKS) >= _RANKS_KEPT:
                _RANKS.clear()
            _RANKS[key] = rank
    return rank


def _rank_of(code: int) -> int:
    if code & 31 != 31:
        return 0
    rank = 1
    code >>= 5
    while code & 7 == 7 and rank < _MAX_RANK:
        rank += 1
        code >>= 3
    return rank


# ---------------------------------------------------------------------------
# Making chunks


def make_leaf(code: int, keys: tuple[str, ...] | None, chunk_items: tuple[Any, ...],
              key_text: int | None = None, rank: int | None = None) -> Chunk:
    """A leaf chunk over valid entries (keys sorted, scalars normalized); a builder that
    has the keys' UTF-8 lengths and the last key's rank at hand passes them."""
    types = set(map(type, chunk_items))
    count = n = len(chunk_items)
    height = 0 if n else -1
    max_script = -1
    if key_text is not None:
        text = key_text
    else:
        text = sum(map(len, map(str.encode, keys))) if keys else 0
    nested = Node in types
    if str in types:
        text += sum(map(len, map(str.encode, [x for x in chunk_items if type(x) is str])))
    if nested and len(types) == 1:
        # Only containers (an array of records, most often): each aggregate in one pass.
        count = sum(map(_COUNT, chunk_items))
        text += sum(map(_TEXT, chunk_items))
        height = max(map(_HEIGHT, chunk_items))
        max_script = max(map(_MAX_SCRIPT, chunk_items))
    elif nested or Script in types:
        for x in chunk_items:
            t = type(x)
            if t is Node:
                count += x.count - 1
                text += x.text
                if x.height > height:
                    height = x.height
                if x.max_script > max_script:
                    max_script = x.max_script
            elif t is Script:
                script_text, source = script_sizes(x)
                text += script_text
                if source > max_script:
                    max_script = source
    if code == MAP:
        if rank is None:
            rank = key_rank(keys[-1]) if keys else 0
    else:
        rank = 0
    return Chunk(code, 0, keys, chunk_items, None, n, count, text, height, max_script, rank, nested)


def scalar_leaf(code: int, keys: tuple[str, ...] | None, chunk_items: tuple[Any, ...], text: int,
                rank: int | None) -> Chunk:
    """A leaf of scalars other than scripts whose text bytes the builder already counted."""
    if code == MAP and rank is None and keys:
        rank = _RANKS.get(keys[-1])
        if rank is None:
            rank = _last_key_rank(keys[-1])
    size = len(chunk_items)
    return Chunk(code, 0, keys, chunk_items, None, size, size, text, 0 if size else -1, -1,
                 rank if rank is not None else 0, False)


def _last_key(chunk: Chunk) -> str:
    """A map chunk's greatest key (a chunk that has a parent is never empty)."""
    last: str = chunk.keys[-1] if chunk.level == 0 else chunk.bounds[-1]  # type: ignore[index]
    return last


def make_inner(code: int, level: int, children: tuple[Chunk, ...]) -> Chunk:
    """An inner chunk at ``level`` over its children (one level down)."""
    bounds = tuple(map(_last_key, children)) if code == MAP else tuple(accumulate(child.size for child in children))
    return Chunk(code, level, None, children, bounds, sum(child.size for child in children),
                 sum(child.count for child in children), sum(child.text for child in children),
                 max(child.height for child in children), max(child.max_script for child in children),
                 children[-1].rank, True)


def empty_root(code: int) -> Chunk:
    return make_leaf(code, () if code == MAP else None, ())


# ---------------------------------------------------------------------------
# Where to cut


def _rules(code: int, level: int) -> tuple[int, int]:
    """(minimum, cap) of a chunk's size at ``level``."""
    if code == MAP:
        return (LEAF_MIN, LEAF_CAP) if level == 0 else (INNER_MIN, INNER_CAP)
    return (1, ARRAY_LEAF) if level == 0 else (1, ARRAY_INNER)


def _split(n: int, candidates: list[int], minimum: int, cap: int,
           eager: list[int] | None = None, soft: int = 0) -> tuple[list[tuple[int, int]], bool]:
    """Spans cutting positions ``0..n-1``, and whether the last cut is a real boundary.

    ``candidates`` are the positions after which the contents allow a cut (sorted); a
    chunk ends at the first one that leaves it at least ``minimum`` long, or, once it
    is ``soft`` long, at the first of ``eager`` (more common positions), or at ``cap``.
    The last span ends at ``n`` either by one of these rules or only because the
    sequence ended; in the second case the sequence's next items would join it.
    """
    spans: list[tuple[int, int]] = []
    start = 0
    closed = True
    index = eager_index = 0
    available = len(candidates)
    eager_available = len(eager) if eager is not None else 0
    while start < n:
        limit = start + cap
        end = limit
        index = bisect_left(candidates, start + minimum - 1, index)
        if index < available and candidates[index] < end:
            end = candidates[index] + 1
        if eager is not None:
            eager_index = bisect_left(eager, start + soft - 1, eager_index)
            if eager_index < eager_available and eager[eager_index] + 1 < end:
                end = eager[eager_index] + 1
        if end <= n:
            closed = True
        else:
            end = n
            closed = False
        spans.append((start, end))
        start = end
    return spans, closed


def _leaf_candidates(codes: list[int]) -> tuple[list[int], list[int]]:
    """Where a map leaf may end, from its keys' CRC-32: any size, and from :data:`LEAF_SOFT` on."""
    eager = [i for i, code in enumerate(codes) if code & 7 == 7]
    return [i for i in eager if codes[i] & 31 == 31], eager


def _split_leaves(codes: list[int]) -> tuple[list[tuple[int, int]], bool]:
    candidates, eager = _leaf_candidates(codes)
    return _split(len(codes), candidates, LEAF_MIN, LEAF_CAP, eager, LEAF_SOFT)


def _inner_candidates(children: list[Chunk], level: int) -> list[int]:
    return [i for i, child in enumerate(children) if child.rank > level]


def build_map_root(keys: list[str], map_items: list[Any], raw_keys: list[bytes] | None = None,
                   value_text: list[int] | None = None) -> Chunk:
    """The root chunk of a map from its entries (valid, keys sorted and distinct).

    A builder passes what it already has: the keys in UTF-8, and, when every item is a
    plain scalar (no container, no script), each item's text bytes.
    """
    n = len(keys)
    if n <= LEAF_MIN:
        return make_leaf(MAP, tuple(keys), tuple(map_items))
    if raw_keys is None:
        raw_keys = list(map(str.encode, keys))
    codes = list(map(crc32, raw_keys))
    spans, _ = _split_leaves(codes)
    lengths = list(map(len, raw_keys))
    if value_text is not None:
        leaf_chunks = [
            scalar_leaf(MAP, tuple(keys[a:b]), tuple(map_items[a:b]), sum(lengths[a:b]) + sum(value_text[a:b]),
                        _rank_of(codes[b - 1]))
            for a, b in spans
        ]
    else:
        leaf_chunks = [
            make_leaf(MAP, tuple(keys[a:b]), tuple(map_items[a:b]), sum(lengths[a:b]), _rank_of(codes[b - 1]))
            for a, b in spans
        ]
    return _build_up(MAP, leaf_chunks, 1)


def build_array_root(values: list[Any], value_text: list[int] | None = None) -> Chunk:
    """The root chunk of an array from its (valid) items; ``value_text`` as for maps."""
    n = len(values)
    if n <= ARRAY_LEAF:
        return make_leaf(ARRAY, None, tuple(values))
    starts = range(0, n, ARRAY_LEAF)
    if value_text is not None:
        leaf_chunks = [scalar_leaf(ARRAY, None, tuple(values[a:a + ARRAY_LEAF]), sum(value_text[a:a + ARRAY_LEAF]), 0)
                       for a in starts]
    else:
        leaf_chunks = [make_leaf(ARRAY, None, tuple(values[a:a + ARRAY_LEAF])) for a in starts]
    return _build_up(ARRAY, leaf_chunks, 1)


def root_over_leaves(code: int, leaf_chunks: list[Chunk]) -> Chunk:
    """The root chunk over a container's leaf chunks, cut level by level as a build cuts."""
    return _build_up(code, leaf_chunks, 1)


def _build_up(code: int, chunks: list[Chunk], level: int) -> Chunk:
    """Cut ``chunks`` (one level below ``level``) level by level until one remains."""
    if not chunks:
        return empty_root(code)
    while len(chunks) > 1:
        minimum, cap = _rules(code, level)
        candidates = _inner_candidates(chunks, level) if code == MAP else []
        spans, _ = _split(len(chunks), candidates, minimum, cap)
        chunks = [make_inner(code, level, tuple(chunks[a:b])) for a, b in spans]
        level += 1
    return chunks[0]


# ---------------------------------------------------------------------------
# Reading


def map_find(root: Chunk, key: str) -> Any:
    """The item at ``key``, or :data:`ABSENT`."""
    chunk = root
    while chunk.level:
        bounds: Any = chunk.bounds
        i = bisect_left(bounds, key)
        if i == len(bounds):
            return ABSENT
        chunk = chunk.items[i]
    keys: Any = chunk.keys
    i = bisect_left(keys, key)
    if i < len(keys) and keys[i] == key:
        return chunk.items[i]
    return ABSENT


def array_find(root: Chunk, index: int) -> Any:
    """The item at ``index``, or :data:`ABSENT`."""
    if index >= root.size:
        return ABSENT
    chunk = root
    while chunk.level:
        bounds: Any = chunk.bounds
        i = bisect_right(bounds, index)
        if i:
            index -= bounds[i - 1]
        chunk = chunk.items[i]
    return chunk.items[index]


def map_items(root: Chunk) -> Iterator[tuple[str, Any]]:
    for part in leaves(root):
        yield from zip(part.keys or (), part.items)


def array_items(root: Chunk) -> Iterator[Any]:
    for part in leaves(root):
        yield from part.items


# ---------------------------------------------------------------------------
# Editing


Route = list[int]


def _map_route(root: Chunk, key: str) -> tuple[list[Chunk], Route, Chunk, int, bool]:
    """(inner chunks from the root down, child index in each, leaf, position, found)."""
    path: list[Chunk] = []
    route: Route = []
    chunk = root
    while chunk.level:
        bounds: Any = chunk.bounds
        i = bisect_left(bounds, key)
        if i == len(bounds):
            i -= 1  # past every key: the last leaf is where it would go
        path.append(chunk)
        route.append(i)
        chunk = chunk.items[i]
    keys: Any = chunk.keys
    position = bisect_left(keys, key)
    return path, route, chunk, position, position < len(keys) and keys[position] == key


def _array_route(root: Chunk, index: int) -> tuple[list[Chunk], Route, Chunk, int]:
    path: list[Chunk] = []
    route: Route = []
    chunk = root
    while chunk.level:
        bounds: Any = chunk.bounds
        i = bisect_right(bounds, index)
        if i == len(bounds):
            i -= 1  # one past the end (an append): the last leaf
        if i:
            index -= bounds[i - 1]
        path.append(chunk)
        route.append(i)
        chunk = chunk.items[i]
    return path, route, chunk, index


def _item_aggregates(item: Any) -> tuple[int, int, int, int]:
    """(count, text, height, max_script) of one stored item."""
    t = type(item)
    if t is Node:
        return item.count, item.text, item.height, item.max_script
    if t is str:
        return 1, len(item.encode("utf-8")), 0, -1
    if t is Script:
        text, source = script_sizes(item)
        return 1, text, 0, source
    return 1, 0, 0, -1


def _copy(chunk: Chunk, index: int, chunk_items: tuple[Any, ...], old: Any, new: Any,
          old_aggregates: tuple[int, int, int, int], new_aggregates: tuple[int, int, int, int]) -> Chunk:
    """``chunk`` with the item at ``index`` replaced: the aggregates are updated, not
    recounted, and the replaced item is remembered, so the copy's bytes can be the old
    ones with that one item (or child reference) rewritten."""
    # A maximum after one contributor changes from old to new: the new one when it is at
    # least the old maximum, the old maximum when the old contributor was below it, else
    # only a rescan can tell. Written out: this runs for every chunk of every edited path.
    current = chunk.height
    height = new_aggregates[2]
    if height < current:
        if old_aggregates[2] < current:
            height = current
        else:
            height = max(_item_aggregates(x)[2] for x in chunk_items) if chunk.level == 0 else max(
                child.height for child in chunk_items)
    current = chunk.max_script
    max_script = new_aggregates[3]
    if max_script < current:
        if old_aggregates[3] < current:
            max_script = current
        else:
            max_script = max(_item_aggregates(x)[3] for x in chunk_items) if chunk.level == 0 else max(
                child.max_script for child in chunk_items)
    if chunk.level:
        nested = True
    else:
        nested = chunk.nested if (type(old) is Node) == (type(new) is Node) else Node in set(map(type, chunk_items))
    copy = Chunk(chunk.code, chunk.level, chunk.keys, chunk_items, chunk.bounds, chunk.size,
                 chunk.count - old_aggregates[0] + new_aggregates[0], chunk.text - old_aggregates[1] + new_aggregates[1],
                 height, max_script, chunk.rank, nested)
    return _derive(copy, chunk, index, old, new)


def _derive(copy: Chunk, base: Chunk, index: int, old: Any, new: Any) -> Chunk:
    """Record that ``copy`` is ``base`` with the item at ``index`` replaced (``old`` by
    ``new``), so its bytes can be spliced from the base's encoding; returns ``copy``."""
    derived = base.derived
    if derived is None or base._data is not None:  # noqa: SLF001 (base.encoded, written out)
        copy.derived = (base, index, old, new)
    elif derived[1] == index:
        # The same place replaced again before anything was encoded: derive from the
        # encoded base, so a chain of edits keeps one base alive, not every step.
        copy.derived = (derived[0], index, derived[2], new)
    return copy


#: The aggregates of a number, truth or null (what _item_aggregates says of them).
_PLAIN_AGGREGATES = (1, 0, 0, -1)
_PLAIN_TYPES = frozenset((int, float, bool, type(None)))


def _replace(code: int, path: list[Chunk], route: Route, leaf: Chunk, position: int, item: Any) -> Chunk:
    """A new root with one leaf entry's item replaced: no boundary moves, and each chunk on
    the way up changes in one place."""
    old = leaf.items[position]
    # _item_aggregates, written out for the items most edits replace (a container or a number).
    t = type(old)
    old_aggregates = (old.count, old.text, old.height, old.max_script) if t is Node else (
        _PLAIN_AGGREGATES if t in _PLAIN_TYPES else _item_aggregates(old))
    t = type(item)
    new_aggregates = (item.count, item.text, item.height, item.max_script) if t is Node else (
        _PLAIN_AGGREGATES if t in _PLAIN_TYPES else _item_aggregates(item))
    chunk = _copy(leaf, position, leaf.items[:position] + (item,) + leaf.items[position + 1:], old, item,
                  old_aggregates, new_aggregates)
    for parent, i in zip(reversed(path), reversed(route)):
        before = parent.items[i]
        chunk = _copy(parent, i, parent.items[:i] + (chunk,) + parent.items[i + 1:], before, chunk,
                      (before.count, before.text, before.height, before.max_script),
                      (chunk.count, chunk.text, chunk.height, chunk.max_script))
    return chunk


def _at_depth(chunk: Chunk, depth: int) -> Iterator[Chunk]:
    if depth == 0:
        yield chunk
    elif depth == 1:
        yield from chunk.items
    else:
        for child in chunk.items:
            yield from _at_depth(child, depth - 1)


def _chunks_from(chunk: Chunk, route: Route) -> Iterator[Chunk]:
    """The chunks ``len(route)`` levels below ``chunk``, in order, from the one ``route`` reaches."""
    if not route:
        yield chunk
        return
    first = route[0]
    children = chunk.items
    yield from _chunks_from(children[first], route[1:])
    for child in children[first + 1:]:
        yield from _at_depth(child, len(route) - 1)


def _entries(code: int, level: int, chunk: Chunk) -> list[Any]:
    if level == 0 and code == MAP:
        return list(zip(chunk.keys or (), chunk.items))
    return list(chunk.items)


def _make(code: int, level: int, part: list[Any]) -> Chunk:
    if level:
        return make_inner(code, level, tuple(part))
    if code == MAP:
        return make_leaf(MAP, tuple(key for key, _ in part), tuple(item for _, item in part))
    return make_leaf(ARRAY, None, tuple(part))


def _rechunk(code: int, level: int, sequence: list[Any], following: Iterator[Chunk]) -> tuple[list[Chunk], int]:
    """Cut ``sequence`` (which starts at a boundary and ends where an old chunk ended),
    taking in the old chunks that follow until a new cut falls on an old boundary.
    Returns the new chunks and how many following chunks were taken in."""
    made: list[Chunk] = []
    taken = 0
    minimum, cap = _rules(code, level)
    while True:
        if code != MAP:
            spans, closed = _split(len(sequence), [], minimum, cap)
        elif level == 0:
            spans, closed = _split_leaves(list(map(crc32, (key.encode("utf-8") for key, _ in sequence))))
        else:
            spans, closed = _split(len(sequence), _inner_candidates(sequence, level), minimum, cap)
        if not closed:
            after = next(following, None)
            if after is not None:
                start = spans[-1][0]
                made.extend(_make(code, level, sequence[a:b]) for a, b in spans[:-1])
                sequence = sequence[start:] + _entries(code, level, after)
                taken += 1
                continue
        made.extend(_make(code, level, sequence[a:b]) for a, b in spans)
        return made, taken


def _splice(code: int, root: Chunk, route: Route, edit: Callable[[list[Any]], list[Any]]) -> Chunk:
    """A new root after ``edit`` changes the entries of the leaf ``route`` reaches (an
    insert or a removal), re-cutting only what the change can move."""
    height = root.level
    following = _chunks_from(root, route)
    leaf = next(following)
    made, taken = _rechunk(code, 0, edit(_entries(code, 0, leaf)), following)
    replaced = 1 + taken
    for level in range(1, height + 1):
        following = _chunks_from(root, route[: height - level])
        parent = next(following)
        offset = route[height - level]
        rest = list(parent.items[offset:])
        sequence = list(parent.items[:offset]) + made
        parents = 1
        while replaced > len(rest):  # the replaced children ran on into the next parents
            replaced -= len(rest)
            rest = list(next(following).items)
            parents += 1
        made, taken = _rechunk(code, level, sequence + rest[replaced:], following)
        replaced = parents + taken
    new_root = _build_up(code, made, height + 1)
    while new_root.level and len(new_root.items) == 1:
        new_root = new_root.items[0]
    return new_root


def map_set(root: Chunk, key: str, item: Any) -> Chunk:
    """A new root with ``key`` set to ``item`` (inserted when absent)."""
    if root.level == 0:
        # A map of one leaf (a record, the root's sections, a small memory) whose key is
        # there: _map_route and _replace, written out for it.
        keys: Any = root.keys
        position = bisect_left(keys, key)
        if position < len(keys) and keys[position] == key:
            items = root.items
            old = items[position]
            if type(old) in _PLAIN_TYPES and type(item) in _PLAIN_TYPES:
                # A number, truth or null for another: every aggregate stays (_copy of
                # two items with _PLAIN_AGGREGATES), derived from the base as _copy records it.
                replaced = list(items)
                replaced[position] = item
                copy = Chunk(MAP, 0, keys, tuple(replaced), None, root.size,
                             root.count, root.text, root.height, root.max_script, root.rank, root.nested)
                return _derive(copy, root, position, old, item)
            return leaf_item_set(root, position, item)
    path, route, leaf, position, found = _map_route(root, key)
    if found:
        return _replace(MAP, path, route, leaf, position, item)

    def insert(entries: list[Any]) -> list[Any]:
        entries.insert(position, (key, item))
        return entries

    return _splice(MAP, root, route, insert)


def leaf_item_set(root: Chunk, position: int, item: Any) -> Chunk:
    """A new root with the entry at ``position`` of a one-leaf map (the root's sections, a
    record) given ``item``: :func:`map_set` of a key known to be there, with no search."""
    keys = root.keys
    items = root.items
    old = items[position]
    if type(old) is Node and type(item) is Node and old.height == item.height and old.max_script == item.max_script:
        # A container for one as tall and with scripts as long (a new /memory in the
        # root): the maxima stay, the sums move by the difference, and the copy
        # derives from the base as _copy records it.
        replaced = list(items)
        replaced[position] = item
        copy = Chunk(MAP, 0, keys, tuple(replaced), None, root.size,
                     root.count - old.count + item.count, root.text - old.text + item.text, root.height,
                     root.max_script, root.rank, root.nested)
        return _derive(copy, root, position, old, item)
    return _replace(MAP, [], [], root, position, item)


def map_remove(root: Chunk, key: str) -> Chunk | None:
    """A new root without ``key``, or None when it is absent."""
    _path, route, _leaf, position, found = _map_route(root, key)
    if not found:
        return None

    def delete(entries: list[Any]) -> list[Any]:
        del entries[position]
        return entries

    return _splice(MAP, root, route, delete)


def array_set(root: Chunk, index: int, item: Any) -> Chunk:
    """A new root with the existing ``index`` replaced."""
    path, route, leaf, position = _array_route(root, index)
    return _replace(ARRAY, path, route, leaf, position, item)


def array_remove(root: Chunk, index: int) -> Chunk:
    """A new root without the existing ``index`` (later items shift down)."""
    _path, route, _leaf, position = _array_route(root, index)

    def delete(entries: list[Any]) -> list[Any]:
        del entries[position]
        return entries

    return _splice(ARRAY, root, route, delete)


def array_append(root: Chunk, values: list[Any]) -> Chunk:
    """A new root with ``values`` added at the end."""
    if not values:
        return root
    _path, route, _leaf, _position = _array_route(root, root.size)

    def extend(entries: list[Any]) -> list[Any]:
        return entries + values

    return _splice(ARRAY, root, route, extend)
