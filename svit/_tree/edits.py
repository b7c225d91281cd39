"""Walking a tree by path, and path-copying updates.

Only the containers on the changed path are rebuilt, and inside each only the chunks the
change reaches (:mod:`svit._tree.chunks`); everything else is shared with the old tree.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from ..errors import InvalidPath, InvalidValue
from .chunks import (
    ABSENT,
    array_append,
    array_find,
    array_remove,
    array_set,
    leaf_item_set,
    map_find,
    map_remove,
    map_set,
)
from .node import ARRAY, MAP, Node, leaf, make_container

__all__ = ["append_items", "find", "find_key", "get", "node_hash", "remove_at", "set_at", "set_key", "set_leaf_entry",
           "stored_item"]

Segments = tuple[str, ...]


def _fmt(segments: Iterable[str]) -> str:
    return "/" + "/".join(segments)


def _array_index(segment: str, segments: Segments, upto: int) -> int:
    if not (segment.isascii() and segment.isdigit()):
        raise InvalidPath(f"array index must be a non-negative decimal: {_fmt(segments[: upto + 1])}")
    return int(segment)


def stored_item(node: Node) -> Any:
    """What a container stores for ``node``: the node itself, or a scalar's raw value."""
    return node if node.code == MAP or node.code == ARRAY else node.value


def _step(container: Any, segment: str, segments: Segments, i: int) -> Any:
    """The child at ``segment`` or ``ABSENT``; walking through a leaf is InvalidPath."""
    if type(container) is not Node:
        raise InvalidPath(f"cannot walk through a scalar: {_fmt(segments[: i + 1])}")
    code = container.code
    if code == MAP:
        return map_find(container.value, segment)
    if code == ARRAY:
        return array_find(container.value, _array_index(segment, segments, i))
    raise InvalidPath(f"cannot walk through a scalar: {_fmt(segments[: i + 1])}")


def get(node: Node, segments: Segments) -> Node | None:
    """The node at ``segments`` below ``node``, or None when absent."""
    segments = tuple(segments)
    current: Any = node
    for i, segment in enumerate(segments):
        current = _step(current, segment, segments, i)
        if current is ABSENT:
            return None
    return current if type(current) is Node else leaf(current, True)


def find_key(mapping: Node, key: str) -> Any:
    """``find(mapping, (key,))`` of a map node: the item stored at ``key``, or ``ABSENT``."""
    chunk = mapping.value
    if chunk.level == 0:
        # A map of one leaf (a record, a small /memory): map_find's last step, written out.
        keys = chunk.keys
        i = bisect_left(keys, key)
        if i < len(keys) and keys[i] == key:
            return chunk.items[i]
        return ABSENT
    return map_find(chunk, key)


def find(node: Node, segments: Segments) -> Any:
    """What is stored at ``segments`` below ``node``: a container node, a raw scalar (no
    node is made for it), ``node`` itself for no segments, or ``ABSENT``."""
    if len(segments) == 1 and type(node) is Node and node.code == MAP:
        return map_find(node.value, segments[0])  # one key of a map (_step, written out)
    current: Any = node
    for i, segment in enumerate(segments):
        current = _step(current, segment, segments, i)
        if current is ABSENT:
            return ABSENT
    return current


def node_hash(node: Node, segments: Segments) -> str | None:
    found = get(node, segments)
    return None if found is None else found.hash


def _walk_to_parent(root: Node, segments: Segments) -> list[tuple[Node, str]]:
    """[(container, segment), ...] from the root down to the target's parent (which must exist)."""
    stack: list[tuple[Node, str]] = []
    current: Any = root
    for i, segment in enumerate(segments[:-1]):
        child = _step(current, segment, segments, i)
        if child is ABSENT:
            raise InvalidPath(f"parent does not exist: {_fmt(segments[: i + 1])}")
        stack.append((current, segment))
        current = child
    if type(current) is not Node or not current.is_container:
        raise InvalidPath(f"parent is not a map or array: {_fmt(segments[:-1])}")
    stack.append((current, segments[-1]))
    return stack


def _with_child(container: Node, segment: str, child: Node, segments: Segments, depth: int) -> Node:
    """A copy of ``container`` with ``segment`` set to ``child`` (map insert allowed; arrays replace only)."""
    item = stored_item(child)
    if container.code == MAP:
        return make_container(MAP, map_set(container.value, segment, item))
    index = _array_index(segment, segments, depth)
    if index >= container.value.size:
        raise InvalidPath(f"array index out of range: {_fmt(segments[: depth + 1])}")
    return make_container(ARRAY, array_set(container.value, index, item))


def _without_child(container: Node, segment: str, segments: Segments, depth: int) -> Node:
    if container.code == MAP:
        root = map_remove(container.value, segment)
        if root is None:
            raise InvalidPath(f"path does not exist: {_fmt(segments)}")
        return make_container(MAP, root)
    index = _array_index(segment, segments, depth)
    if index >= container.value.size:
        raise InvalidPath(f"path does not exist: {_fmt(segments)}")
    return make_container(ARRAY, array_remove(container.value, index))


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
    if len(segments) == 1 and root.code == MAP:
        # One key of a map (a section of the root, a top-level memory entry): no walk.
        item = node if node.code == MAP or node.code == ARRAY else node.value  # stored_item
        return make_container(MAP, map_set(root.value, segments[0], item))
    stack = _walk_to_parent(root, segments)
    parent, segment = stack[-1]
    updated = _with_child(parent, segment, node, segments, len(segments) - 1)
    return _rebuild_ancestors(stack, updated, segments)


def set_key(mapping: Node, key: str, node: Node) -> Node:
    """``set_at(mapping, (key,), node)`` of a map node (an entry of ``/memory``): no walk."""
    item = node if node.code == MAP or node.code == ARRAY else node.value  # stored_item
    root = map_set(mapping.value, key, item)
    return Node(MAP, root, None, root.count + 1, root.text, root.height + 1, root.max_script)  # make_container


def set_leaf_entry(root: Node, position: int, node: Node) -> Node:
    """``set_at(root, (key,), node)`` for the ``position``-th key of a map kept in one leaf
    chunk (the process root's nine sections): the key is known to be there, so none is searched."""
    item = node if node.code == MAP or node.code == ARRAY else node.value  # stored_item
    chunk = leaf_item_set(root.value, position, item)
    return Node(MAP, chunk, None, chunk.count + 1, chunk.text, chunk.height + 1, chunk.max_script)  # make_container


def remove_at(root: Node, segments: Segments) -> Node:
    """A new root without the entry at ``segments`` (array items after it shift down)."""
    segments = tuple(segments)
    if not segments:
        raise InvalidPath("cannot remove the root")
    stack = _walk_to_parent(root, segments)
    parent, segment = stack[-1]
    updated = _without_child(parent, segment, segments, len(segments) - 1)
    return _rebuild_ancestors(stack, updated, segments)


def append_items(array: Node, values: Iterable[Node]) -> Node:
    """``array`` with ``values`` added at its end (only its last chunks are rebuilt)."""
    if array.code != ARRAY:
        raise InvalidValue("append needs an array")
    return make_container(ARRAY, array_append(array.value, [stored_item(value) for value in values]))
