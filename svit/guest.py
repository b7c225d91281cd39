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

from svit.lisp.budget import Budget
from svit.lisp.context import UNITS_PER_STEP, current
from svit.lisp.errors import BudgetExhausted, LimitError
from svit.lisp.values import Foreign, type_name

from . import tree
from .errors import InvalidValue
from .limits import Limits
from .tree import Node
from .values import I64_MAX, I64_MIN, Script

__all__ = [
    "NULL",
    "NULL_VALUE",
    "Measure",
    "SvitValue",
    "charge_copy",
    "item_to_lisp",
    "plain_to_lisp",
    "to_lisp",
    "to_node",
    "to_plain",
]


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
        code = self.node.code
        if code == tree.ARRAY:
            return "array"
        if code == tree.MAP:
            return "map"
        return None

    def entry_count(self) -> int | None:
        code = self.node.code
        if code == tree.ARRAY or code == tree.MAP:
            return self.node.size
        return None

    def sequence_items(self) -> list[Any] | None:
        if self.node.code != tree.ARRAY:
            return None
        # Children are shared, not copied: the cost is the list that holds them.
        current().allocate(_ITEM_UNITS * self.node.size)
        return [item_to_lisp(item) for item in tree.children(self.node)]

    def mapping_items(self) -> list[tuple[str, Any]] | None:
        if self.node.code != tree.MAP:
            return None
        current().allocate(_ITEM_UNITS * 2 * self.node.size)
        return [(key, item_to_lisp(item)) for key, item in tree.entries(self.node)]


NULL = tree.from_value(None, scripts_allowed=False)
NULL_VALUE = SvitValue(NULL)

#: Guest-memory units per element of a list built from a container (as Lisp lists count).
_ITEM_UNITS = 8


def item_to_lisp(item: Any) -> Any:
    """A stored item (a node, or a scalar kept inline; ``ABSENT`` reads as null) as a Lisp value."""
    if type(item) is Node:
        return to_lisp(item)
    if item is None or item is tree.ABSENT:
        return NULL_VALUE
    if type(item) is Script:
        return to_lisp(tree.leaf_node(item))
    return item


def to_lisp(node: Node | None) -> Any:
    """A committed node as a Lisp value (absent reads as a foreign null)."""
    if node is None:
        return NULL_VALUE
    code = node.code
    if code == tree.BOOL or code == tree.INTEGER or code == tree.NUMBER or code == tree.STRING:
        return node.value
    if code == tree.NULL:
        return NULL_VALUE
    if code == tree.SCRIPT:
        script = node.value
        return SvitValue(tree.from_value({"documentation": script.documentation, "source": script.source}, scripts_allowed=False))
    return SvitValue(node)


def plain_to_lisp(value: Any) -> Any:
    """Plain host data (e.g. a port's JSON output) as a Lisp value."""
    if value is None or isinstance(value, (list, dict)):
        return SvitValue(tree.from_value(value, scripts_allowed=False))
    return value


def to_node(value: Any, limits: Limits, budget: Budget | None = None) -> Node:
    """Convert a Lisp value to a validated persistent node.

    The conversion is charged to ``budget``, by default the budget of the run in progress.
    """
    if type(value) is int and I64_MIN <= value <= I64_MAX and limits.max_value_entries >= 1 \
            and limits.max_value_depth >= 0:
        # One entry, no text, no depth: what Measure charges, within every value limit.
        # (Budget.take(1), written out: an activation converts its output and each write. An
        # integer takes no time to convert, so the clock, read by every host call and slice
        # drawn, is not read again for it.)
        charged = budget if budget is not None else current().budget
        remaining = charged.remaining - 1
        if remaining < 0:
            charged.remaining = 0
            raise BudgetExhausted("steps")
        charged.remaining = remaining
        return Node(tree.INTEGER, value, None, 1, 0, 0, -1)  # tree.leaf_node, its range checked above
    node = _convert(value, limits, budget)
    tree.validate_value(node, limits, scripts_allowed=False)
    return node


def _convert(value: Any, limits: Limits, budget: Budget | None) -> Node:
    if type(value) is SvitValue:
        node: Node = value.node
        return node
    plain = Measure(limits, budget).plain(value)
    return tree.from_value(plain, scripts_allowed=False)


#: Bytes of text per step charged for converting it (copying, encoding and hashing).
_TEXT_UNITS_PER_STEP = UNITS_PER_STEP


class Measure:
    """Running totals of one conversion of Lisp values to plain data, across all its parts.

    Converting a value copies it, and building the node that stores it encodes and
    hashes every text once per occurrence: a list holding one big text a thousand
    times is a thousand texts to the stored value. So every occurrence counts toward
    ``max_value_entries``, ``max_value_depth`` and ``max_text_bytes`` as the walk
    reaches it, the conversion stops as soon as one is passed, and the work is charged
    to the run's step budget before it is done: one step per entry and one per 64
    bytes of text. The totals run across every argument of one call (``value-array``,
    ``value-map``), so many arguments within the limits one by one cannot add up to
    more than the limits together.
    """

    __slots__ = ("limits", "entries", "text", "_text_units", "_budget", "_max_text", "_text_error")

    def __init__(self, limits: Limits, budget: Budget | None = None, *, max_text: int | None = None) -> None:
        """``max_text`` replaces ``max_text_bytes`` for input that is reduced, not stored (``jq``)."""
        self.limits = limits
        self.entries = 0
        self.text = 0
        self._text_units = 0
        self._budget = budget if budget is not None else current().budget
        self._max_text = limits.max_text_bytes if max_text is None else max_text
        self._text_error = max_text is not None

    def _too_much_text(self) -> Exception:
        if self._text_error:
            return LimitError("guest memory")
        return InvalidValue("maximum text bytes exceeded")

    def add_entries(self, count: int) -> None:
        """Count (and pay for) ``count`` more entries, refusing past the entry limit."""
        self.entries += count
        if self.entries > self.limits.max_value_entries:
            raise InvalidValue("maximum value entries exceeded")
        self._budget.charge(count)

    def add_text(self, text: str) -> None:
        """Count (and pay for) one occurrence of ``text``, before anything encodes it."""
        # A character is at least one UTF-8 byte, so the length alone can refuse it.
        if self.text + len(text) > self._max_text:
            raise self._too_much_text()
        self._charge_text(len(text))
        size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        self.add_text_bytes(size)

    def add_text_bytes(self, size: int) -> None:
        self.text += size
        if self.text > self._max_text:
            raise self._too_much_text()

    def _charge_text(self, units: int) -> None:
        units += self._text_units
        if units >= _TEXT_UNITS_PER_STEP:
            self._budget.charge(units // _TEXT_UNITS_PER_STEP)
        self._text_units = units % _TEXT_UNITS_PER_STEP

    def add_node(self, node: Node, depth: int, counted: int) -> None:
        """Count a stored value met at ``depth`` (``counted`` of its entries already counted)."""
        if depth + node.height > self.limits.max_value_depth:
            raise InvalidValue("maximum nesting depth exceeded")
        if node.text > self._max_text:
            raise self._too_much_text()
        self.add_entries(node.count - counted)
        self._charge_text(node.text)
        self.add_text_bytes(node.text)

    def plain(self, value: Any) -> Any:
        """``value`` as plain data, counted as one whole value."""
        self.add_entries(1)
        return self.part(value, 0)

    def part(self, value: Any, depth: int) -> Any:
        """``value`` (already counted as one entry) as plain data, met at ``depth``."""
        if depth > self.limits.max_value_depth:
            raise InvalidValue("maximum nesting depth exceeded")
        t = type(value)
        if t is str:
            self.add_text(value)
            return value
        if value is None or t is bool:
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
            if depth + 1 > self.limits.max_value_depth:
                raise InvalidValue("maximum nesting depth exceeded")
            self.add_entries(len(value))
            inner = depth + 1
            return [self.part(item, inner) for item in value]
        if t is SvitValue:
            node = value.node
            self.add_node(node, depth, 1)
            return node.to_value()
        if isinstance(value, Foreign):
            raise InvalidValue("foreign Lisp values cannot be persisted")
        raise InvalidValue(f"Lisp {type_name(value)} values cannot be persisted")


def charge_copy(node: Node) -> None:
    """Charge for copying a stored value out whole (one step per entry, one per 64 text bytes)."""
    current().budget.charge(node.count + node.text // _TEXT_UNITS_PER_STEP)


def to_plain(value: Any, limits: Limits) -> Any:
    """A Lisp value as plain data, measured and charged as it is converted (see :class:`Measure`)."""
    return Measure(limits).plain(value)
