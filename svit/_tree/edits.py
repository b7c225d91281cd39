"""Walking a tree and path-copying updates: only the nodes on the changed path are rebuilt.

Each rebuilt container keeps its aggregates (count, text, height, largest script) up to
date from the one child that changed, rescanning its children only when that child was
the unique maximum.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from ..errors import InvalidPath, InvalidValue
from ..values import Script
from .node import (
    ARRAY,
    MAP,
    Node,
    array_digest,
    as_item,
    digest_from_heads,
    encode_keys,
    encode_text,
    item_info,
    leaf,
    make_node,
    pack_u64,
)

__all__ = ["get", "node_hash", "remove_at", "set_at"]

Segments = tuple[str, ...]

_ABSENT = object()


def _fmt(segments: Iterable[str]) -> str:
    return "/" + "/".join(segments)


def _array_index(segment: str, segments: Segments, upto: int) -> int:
    if not (segment.isascii() and segment.isdigit()):
        raise InvalidPath(f"array index must be a non-negative decimal: {_fmt(segments[: upto + 1])}")
    return int(segment)


def _step(container: Any, segment: str, segments: Segments, i: int) -> Any:
    """The child at ``segment`` or ``_ABSENT``; walking through a leaf is InvalidPath."""
    if type(container) is not Node or not (container[0] == MAP or container[0] == ARRAY):
        raise InvalidPath(f"cannot walk through a scalar: {_fmt(segments[: i + 1])}")
    if container[0] == MAP:
        return container[1].get(segment, _ABSENT)
    index = _array_index(segment, segments, i)
    values = container[1]
    return values[index] if index < len(values) else _ABSENT


def get(node: Node, segments: Segments) -> Node | None:
    """The node at ``segments`` below ``node``, or None when absent."""
    segments = tuple(segments)
    current: Any = node
    for i, segment in enumerate(segments):
        current = _step(current, segment, segments, i)
        if current is _ABSENT:
            return None
    return current if type(current) is Node else leaf(current, True)


def node_hash(node: Node, segments: Segments) -> str | None:
    found = get(node, segments)
    return None if found is None else found.hash


def _walk_to_parent(root: Node, segments: Segments) -> list[tuple[Node, str]]:
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


def _heads_of(node: Node) -> list[bytes]:
    """``u64be(len(key)) || key`` for every key of a map node, cached on the node so that
    repeated writes into a large map do not re-encode all of its keys."""
    try:
        return node.cached_heads
    except AttributeError:
        pass
    heads = [pack_u64(len(raw)) + raw for raw in encode_keys(list(node[1]))]
    node.cached_heads = heads
    return heads


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
                source = item_info(child)[3]
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
    count: int = container[3]
    text: int = container[4]
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


def _with_child(container: Node, segment: str, child: Node, segments: Segments, depth: int) -> Node:
    """A copy of ``container`` with ``segment`` set to ``child`` (map insert allowed; arrays replace only)."""
    item = as_item(child)
    new_info = (child[3], child[4], child[5], child[6])
    digests = list(container[7])
    if container[0] == MAP:
        mapping = container[1]
        old = mapping.get(segment, _ABSENT)
        heads = list(_heads_of(container))
        position = bisect_left(list(mapping), segment)
        if old is _ABSENT:
            key_raw = encode_text(segment)
            entries = list(mapping.items())
            entries.insert(position, (segment, item))
            updated = dict(entries)
            heads.insert(position, pack_u64(len(key_raw)) + key_raw)
            digests.insert(position, child[2])
            aggregates = _aggregate_after(container, None, new_info, updated.values(), len(key_raw))
        else:
            updated = mapping.copy()
            updated[segment] = item
            digests[position] = child[2]
            aggregates = _aggregate_after(container, item_info(old), new_info, updated.values(), 0)
        result = make_node(
            (MAP, updated, digest_from_heads(heads, digests), aggregates[0], aggregates[1], aggregates[2],
             aggregates[3], digests)
        )
        result.cached_heads = heads
        return result
    values = container[1]
    index = _array_index(segment, segments, depth)
    if index >= len(values):
        raise InvalidPath(f"array index out of range: {_fmt(segments[: depth + 1])}")
    items = list(values)
    previous = items[index]
    items[index] = item
    digests[index] = child[2]
    aggregates = _aggregate_after(container, item_info(previous), new_info, items, 0)
    return make_node((ARRAY, tuple(items), array_digest(digests), *aggregates, digests))


def _without_child(container: Node, segment: str, segments: Segments, depth: int) -> Node:
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
            container, item_info(old), None, updated.values(), -len(encode_text(segment))
        )
        result = make_node((MAP, updated, digest_from_heads(heads, digests), *aggregates, digests))
        result.cached_heads = heads
        return result
    index = _array_index(segment, segments, depth)
    values = container[1]
    if index >= len(values):
        raise InvalidPath(f"path does not exist: {_fmt(segments)}")
    items = list(values)
    previous = items.pop(index)
    del digests[index]
    aggregates = _aggregate_after(container, item_info(previous), None, items, 0)
    return make_node((ARRAY, tuple(items), array_digest(digests), *aggregates, digests))


def _rebuild_ancestors(stack: list[tuple[Node, str]], updated: Node, segments: Segments) -> Node:
    for depth in range(len(stack) - 2, -1, -1):
        parent, segment = stack[depth]
        updated = _with_child(parent, segment, updated, segments, depth)
    return updated


def set_at(root: Node, segments: Segments, node: Node) -> Node:
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


def remove_at(root: Node, segments: Segments) -> Node:
    """A new root without the entry at ``segments`` (array items after it shift down)."""
    segments = tuple(segments)
    if not segments:
        raise InvalidPath("cannot remove the root")
    stack = _walk_to_parent(root, segments)
    parent, segment = stack[-1]
    updated = _without_child(parent, segment, segments, len(segments) - 1)
    return _rebuild_ancestors(stack, updated, segments)
