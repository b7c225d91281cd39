"""Building trees from plain host data (or decoded snapshot data), validating every kind.

Checks what a tree can hold: text map keys, integers in signed 64 bits, finite floats
(``-0.0`` is stored as ``0.0``), valid Unicode, scripts only where allowed, nesting at
most :data:`svit.values.MAX_NESTING`. Size limits are checked separately from the
aggregates (:func:`svit._tree.node.validate_value`).
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import InvalidValue
from ..values import I64_MAX, I64_MIN, MAX_NESTING, Script
from .chunks import LEAF_MIN, build_array_root, build_map_root, empty_root, scalar_leaf
from .node import ARRAY, BAD_TEXT, MAP, NESTING, Node, leaf, make_container

__all__ = ["build", "empty_array", "empty_map", "from_value"]

_SIMPLE = frozenset((str, int, bool, type(None)))


def build(value: Any, scripts_allowed: bool, strict: bool) -> Node:
    """The node for ``value``; with ``strict``, map keys must already be in canonical order."""
    t = type(value)
    if t is dict:
        small = _small_map(value, strict) if len(value) <= LEAF_MIN else None
        return small if small is not None else _map(value, scripts_allowed, 0, strict)
    if t is list:
        return _array(value, scripts_allowed, 0, strict)
    return leaf(value, scripts_allowed)


def from_value(value: Any, *, scripts_allowed: bool) -> Node:
    """Build (and validate the kinds of) a node tree from plain host data.

    Rejects non-finite floats, integers outside i64, non-text keys, unsupported types,
    lone surrogates, and scripts where not allowed. Size limits are checked separately
    by :func:`~svit._tree.node.validate_value` from the cached counts. (``build`` with
    ``strict`` off, written out: every activation's input is built here.)
    """
    t = type(value)
    if t is dict:
        small = _small_map(value, False) if len(value) <= LEAF_MIN else None
        return small if small is not None else _map(value, scripts_allowed, 0, False)
    if t is list:
        return _array(value, scripts_allowed, 0, False)
    return leaf(value, scripts_allowed)


def _integers_fit(values: list[Any], types: set[type]) -> bool:
    """Whether every integer among ``values`` (of ``types``) is a signed 64-bit one."""
    if int not in types:
        return True
    integers = values if len(types) == 1 else [x for x in values if type(x) is int]
    return I64_MIN <= min(integers) and max(integers) <= I64_MAX


def _children(values: list[Any], scripts_allowed: bool, depth: int, strict: bool) -> tuple[list[Any], list[int] | None]:
    """What a container stores for ``values`` (raw valid scalars, nodes for containers),
    and, when they are all plain scalars, each one's text bytes (None: count per chunk)."""
    types = set(map(type, values))
    if types <= _SIMPLE:
        # Checked by C-level passes where the values are all of one type.
        text: list[int] | None = None
        if str in types:
            try:
                if len(types) == 1:
                    # ASCII text is its own UTF-8 (and holds no surrogate): no encoding needed.
                    text = list(map(len, values)) if all(map(str.isascii, values)) else list(map(len, map(str.encode, values)))
                else:
                    text = [len(x.encode("utf-8")) if type(x) is str else 0 for x in values]
            except UnicodeEncodeError:
                raise InvalidValue(BAD_TEXT) from None
        if not _integers_fit(values, types):
            raise InvalidValue("integer is outside signed 64-bit range")
        return values, text if text is not None else [0] * len(values)
    items: list[Any] = []
    add = items.append
    for value in values:
        t = type(value)
        if t is dict:
            small = _small_map(value, strict) if len(value) <= LEAF_MIN and depth + 1 < MAX_NESTING else None
            add(small if small is not None else _map(value, scripts_allowed, depth + 1, strict))
        elif t is list:
            add(_array(value, scripts_allowed, depth + 1, strict))
        elif t is float:
            if not math.isfinite(value):
                raise InvalidValue("numbers must be finite")
            if strict and value == 0.0 and math.copysign(1.0, value) < 0:
                raise InvalidValue("negative zero is written as 0.0")
            add(value or 0.0)
        elif t is Script:
            if not scripts_allowed:
                raise InvalidValue("script records are only valid below /lib")
            leaf(value, True)  # its text must be valid Unicode
            add(value)
        elif t in _SIMPLE:
            add(leaf(value, False).value)
        else:
            raise InvalidValue(f"unsupported value type: {t.__name__}")
    return items, None


def _small_map(mapping: dict[Any, Any], strict: bool) -> Node | None:
    """A map of one leaf chunk holding only plain scalars, built in one pass (records are
    the common case of a nested value); None when it is anything else, or not valid,
    for the general path to build or to name the problem."""
    text = 0
    try:
        # One loop: for a handful of entries it beats a pass per check.
        for key, value in mapping.items():
            if type(key) is not str:
                return None
            t = type(value)
            if t is int:
                if not I64_MIN <= value <= I64_MAX:
                    return None
            elif t is str:
                # ASCII text is its own UTF-8 (and holds no surrogate).
                text += len(value) if value.isascii() else len(value.encode("utf-8"))
            elif t is not bool and value is not None:
                return None
            text += len(key) if key.isascii() else len(key.encode("utf-8"))
    except UnicodeEncodeError:
        return None
    keys = tuple(mapping)
    if len(keys) > 1:
        ordered = tuple(sorted(keys))
        if ordered != keys:
            if strict:
                return None
            return make_container(MAP, scalar_leaf(MAP, ordered, tuple(map(mapping.__getitem__, ordered)), text, None))
    # Already in canonical order (one key is): the values in the mapping's own order.
    chunk = scalar_leaf(MAP, keys, tuple(mapping.values()), text, None)
    return Node(MAP, chunk, None, chunk.count + 1, text, chunk.height + 1, -1)  # make_container, written out


def _map(mapping: dict[Any, Any], scripts_allowed: bool, depth: int, strict: bool) -> Node:
    if depth >= MAX_NESTING:
        raise InvalidValue(NESTING)
    keys = list(mapping)
    if list(map(type, keys)).count(str) != len(keys):
        raise InvalidValue("map keys must be text")
    ordered = sorted(keys)
    if ordered != keys:
        if strict:
            raise InvalidValue("map keys are not in canonical order")
        keys = ordered
        values = list(map(mapping.__getitem__, keys))
    else:
        values = list(mapping.values())
    try:
        raw_keys = list(map(str.encode, keys))
    except UnicodeEncodeError:
        raise InvalidValue(BAD_TEXT) from None
    items, text = _children(values, scripts_allowed, depth, strict)
    return make_container(MAP, build_map_root(keys, items, raw_keys, text))


def _array(values: list[Any], scripts_allowed: bool, depth: int, strict: bool) -> Node:
    if depth >= MAX_NESTING:
        raise InvalidValue(NESTING)
    items, text = _children(values, scripts_allowed, depth, strict)
    return make_container(ARRAY, build_array_root(items, text))


def empty_map() -> Node:
    return make_container(MAP, empty_root(MAP))


def empty_array() -> Node:
    return make_container(ARRAY, empty_root(ARRAY))
