"""Crossing between Lisp values and persistent values (reference §4.3, §4.7).

Persistent null, arrays and maps enter Lisp as an opaque :class:`SvitValue` (Lisp list
functions reject it, ``=`` on two of them raises); bool, integer, number and string
become the matching Lisp atoms. Going back, Lisp lists become arrays and unit becomes
null; anything that cannot persist is an ``InvalidValue`` naming its Lisp type.
"""

from __future__ import annotations

import json
import math
from typing import Any

from lisp.context import current
from lisp.values import Foreign, type_name

from . import tree
from .errors import InvalidValue
from .limits import Limits
from .tree import Node
from .values import I64_MAX, I64_MIN, Script


class SvitValue(Foreign):
    """A persistent null, array or map held by Lisp code."""

    __slots__ = ("node",)

    def __init__(self, node: Node) -> None:
        self.node = node

    def type_name(self) -> str:
        return "svit-value"

    def memory_size(self) -> int:
        # The reference counts a foreign value as its JSON length; text plus a few
        # bytes per node is that estimate without serializing.
        return self.node.text + 4 * self.node.count

    def display(self) -> str:
        return json.dumps(self.node.to_value(), ensure_ascii=False, separators=(",", ":"))

    def usage_hint(self) -> str | None:
        kind = self.node.kind
        if kind == "null":
            return "this is JSON null: test it with (value-null? v)"
        if kind == "array":
            return "a svit array: read an element with (value-get v \"/0\"), its size with (count v), or make it a Lisp list with (to-list v)"
        return "a svit map: read a field with (value-get v \"/key\") or (map-get v \"key\")"

    # The collection protocol of lisp.values.Foreign.

    def container_kind(self) -> str | None:
        kind = self.node[0]
        if kind == tree.ARRAY:
            return "array"
        if kind == tree.MAP:
            return "map"
        return None

    def entry_count(self) -> int | None:
        kind = self.node[0]
        if kind == tree.ARRAY or kind == tree.MAP:
            return len(self.node[1])
        return None

    def sequence_items(self) -> list[Any] | None:
        if self.node[0] != tree.ARRAY:
            return None
        items = self.node[1]
        # Children are shared, not copied: the cost is the list that holds them.
        current().allocate(_ITEM_UNITS * len(items))
        return [_item_to_lisp(item) for item in items]

    def mapping_items(self) -> list[tuple[str, Any]] | None:
        if self.node[0] != tree.MAP:
            return None
        entries = self.node[1]
        current().allocate(_ITEM_UNITS * 2 * len(entries))
        return [(key, _item_to_lisp(item)) for key, item in entries.items()]


NULL = tree.from_value(None, scripts_allowed=False)
NULL_VALUE = SvitValue(NULL)

#: Guest-memory units per element of a list built from a container (as Lisp lists count).
_ITEM_UNITS = 8


def _item_to_lisp(item: Any) -> Any:
    """A container's stored child (a node, or a scalar kept inline) as a Lisp value."""
    if type(item) is Node:
        return to_lisp(item)
    if item is None:
        return NULL_VALUE
    if type(item) is Script:
        return to_lisp(tree.leaf_node(item))
    return item


def to_lisp(node: Node | None) -> Any:
    """A committed node as a Lisp value (absent reads as a foreign null)."""
    if node is None:
        return NULL_VALUE
    kind = node.kind
    if kind in ("bool", "integer", "number", "string"):
        return node.to_value()
    if kind == "null":
        return NULL_VALUE
    if kind == "script":
        script = node.to_value()
        return SvitValue(tree.from_value({"documentation": script.documentation, "source": script.source}, scripts_allowed=False))
    return SvitValue(node)


def plain_to_lisp(value: Any) -> Any:
    """Plain host data (e.g. a port's JSON output) as a Lisp value."""
    if value is None or isinstance(value, (list, dict)):
        return SvitValue(tree.from_value(value, scripts_allowed=False))
    return value


def to_node(value: Any, limits: Limits) -> Node:
    """Convert a Lisp value to a validated persistent node."""
    node = _convert(value, limits)
    tree.validate_value(node, limits, scripts_allowed=False)
    return node


def _convert(value: Any, limits: Limits) -> Node:
    t = type(value)
    if t is SvitValue:
        return value.node
    plain = _to_plain(value, limits, [0], 0)
    return tree.from_value(plain, scripts_allowed=False)


def _to_plain(value: Any, limits: Limits, counter: list[int], depth: int) -> Any:
    counter[0] += 1
    if counter[0] > limits.max_value_entries:
        raise InvalidValue("maximum value entries exceeded")
    if depth > limits.max_value_depth:
        raise InvalidValue("maximum nesting depth exceeded")
    t = type(value)
    if value is None:
        return None
    if t is bool or t is str:
        return value
    if t is int:
        if not I64_MIN <= value <= I64_MAX:
            raise InvalidValue("integer is outside signed 64-bit range")
        return value
    if t is float:
        if not math.isfinite(value):
            raise InvalidValue("numbers must be finite")
        return value
    if t is tuple:
        return [_to_plain(item, limits, counter, depth + 1) for item in value]
    if t is SvitValue:
        node = value.node
        counter[0] += node.count - 1
        if counter[0] > limits.max_value_entries:
            raise InvalidValue("maximum value entries exceeded")
        return node.to_value()
    if isinstance(value, Foreign):
        raise InvalidValue("foreign Lisp values cannot be persisted")
    raise InvalidValue(f"Lisp {type_name(value)} values cannot be persisted")


def to_plain(value: Any, limits: Limits) -> Any:
    """A Lisp value as plain data (unvalidated beyond the conversion bounds)."""
    if type(value) is SvitValue:
        return value.node.to_value()
    return _to_plain(value, limits, [0], 0)
