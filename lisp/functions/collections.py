"""Collection functions: Svit's extensions for lists, arrays and maps.

They take Lisp lists and host arrays alike (a host map where it makes sense) and
always return Lisp lists, so ``write`` stores the result as an array. The empty
list is ``()``. Host containers are reached through the collection protocol of
:class:`lisp.values.Foreign`, so nothing here knows what the host is.

Every function pays before it works: one step per element it visits, guest memory
for every list it builds (a huge ``range`` is refused before a single element
exists), and ``n log n`` steps for a sort. Functions that call a guest function
receive the caller's call depth and call ``f(depth + 1, ...)``, so the call-stack
bound holds through them; an error raised by that function propagates unchanged.
"""

from __future__ import annotations

import math
from fractions import Fraction
from types import FunctionType
from typing import Any, Callable, Iterator, TypeAlias, cast

from ..context import current
from ..errors import EvalError
from ..values import Foreign, LispList, LispValue, type_name
from .compare import equal
from .numbers import add2
from .registry import system
from .support import described

__all__ = ["built_list", "function", "mapping", "member", "sequence", "sequence_error", "truth", "visit"]

#: Guest-memory units per element of a built list (as lists.make_list charges).
_LIST_UNIT = 8

_NUMBERS = (int, float, Fraction)


# --- shared checks and messages ------------------------------------------------------


def sequence_error(name: str, value: Any) -> EvalError:
    """``name: expected a list or array; found ...`` with the accessor to use instead."""
    hint = ""
    if isinstance(value, Foreign):
        kind = value.container_kind()
        if kind == "map":
            hint = "; for a map use (entries m), (keys m) or (values m)"
        elif kind is None:
            hint = "; test for null with (value-null? v)"
    elif type(value) is str:
        hint = "; for text use (chars s) or (split s sep)"
    return EvalError(f"{name}: expected a list or array; found {described(value)}{hint}")


def sequence(name: str, value: Any) -> LispList | list[LispValue]:
    """The elements of a Lisp list or a host array (host elements converted and charged)."""
    if value is None:
        return ()
    if type(value) is tuple:
        return value
    if isinstance(value, Foreign):
        items = value.sequence_items()
        if items is not None:
            return items
    raise sequence_error(name, value)


def mapping(name: str, value: Any) -> list[tuple[str, Any]]:
    """The (key, value) pairs of a host map, in key order."""
    if isinstance(value, Foreign):
        pairs = value.mapping_items()
        if pairs is not None:
            return pairs
    hint = ""
    if type(value) is tuple or value is None:
        hint = "; a Lisp list has no keys: use (range (count xs)) for its positions"
    elif isinstance(value, Foreign) and value.container_kind() == "array":
        hint = "; for an array use (to-list v) or (range (count v))"
    elif isinstance(value, Foreign):
        hint = "; test for null with (value-null? v)"
    raise EvalError(f"{name}: expected a map; found {described(value)}{hint}")


def function(name: str, value: Any) -> Callable[..., Any]:
    """A callable argument (a lambda, a defined function or a system function)."""
    if type(value) is FunctionType:
        return value
    raise EvalError(f"{name}: expected a function; found {described(value)}; write (lambda (x) ...) or a function's name")


def truth(name: str, value: Any) -> bool:
    """A predicate's answer, which must be a boolean (as conditions must)."""
    if value is True or value is False:
        return value
    raise EvalError(f"{name}: the predicate must return true or false; it returned {described(value)}")


def visit(steps: int) -> None:
    """One step per element visited, charged before the visiting."""
    if steps > 0:
        current().budget.charge(steps)


def built_list(items: list[LispValue] | LispList) -> LispList | None:
    """A Lisp list of ``items`` (already charged for), or ``()`` when empty."""
    return tuple(items) if items else None


# --- ordering ---------------------------------------------------------------------


#: What ``sort`` orders: all numbers or all texts (checked by :func:`_sort_kind`).
_Orderable: TypeAlias = "int | float | Fraction | str"


def _sort_kind(name: str, keys: list[LispValue] | LispList, what: str) -> None:
    """All keys must be numbers (no NaN) or all texts: the two orders we define."""
    first = keys[0]
    numeric = type(first) in _NUMBERS
    if not numeric and type(first) is not str:
        raise _unorderable(name, first, what)
    text_units = 0
    for key in keys:
        t = type(key)
        if numeric:
            if t not in _NUMBERS:
                raise EvalError(f"{name}: cannot order {type_name(first)} and {type_name(key)} together; {what} must be all numbers or all texts")
            if type(key) is float and math.isnan(key):
                raise EvalError(f"{name}: cannot order NaN")
        elif type(key) is not str:
            raise EvalError(f"{name}: cannot order {type_name(first)} and {type_name(key)} together; {what} must be all numbers or all texts")
        else:
            text_units += len(key)
    if text_units:
        current().budget.charge(text_units // 64)


def _unorderable(name: str, value: Any, what: str) -> EvalError:
    hint = "; order records with (sort-by (lambda (r) (value-get r \"/field\")) xs)" if isinstance(value, Foreign) else ""
    return EvalError(f"{name}: can only order numbers or texts; {what} include {described(value)}{hint}")


def _sort_cost(n: int) -> int:
    return n * max(1, (n - 1).bit_length()) if n > 1 else n


# --- the functions ------------------------------------------------------------------


@system(
    "map", 2, takes_depth=True, extension=True, category="collections",
    signature="(map f xs)",
    description="Calls f on each element of a list or array xs and returns the results as a new list, in order.",
)
def fn_map(depth: int, f: Any, xs: Any) -> LispList | None:
    fn = function("map", f)
    items = sequence("map", xs)
    n = len(items)
    if not n:
        return None
    current().allocate(_LIST_UNIT * n)
    visit(n)
    # A loop, not a comprehension: the results so far stay a local, which the guest
    # memory meter sees (a comprehension's list lives on its evaluation stack).
    results: list[LispValue] = []
    add = results.append
    for x in items:
        add(fn(depth + 1, x))
    return tuple(results)


@system(
    "filter", 2, takes_depth=True, extension=True, category="collections",
    signature="(filter pred xs)",
    description="Returns a list of the elements of list or array xs for which pred returns true, in order.",
)
def fn_filter(depth: int, pred: Any, xs: Any) -> LispList | None:
    fn = function("filter", pred)
    items = sequence("filter", xs)
    visit(len(items))
    kept: list[LispValue] = []  # a local the guest memory meter sees (see map)
    for x in items:
        if truth("filter", fn(depth + 1, x)):
            kept.append(x)
    if kept:
        current().allocate(_LIST_UNIT * len(kept))
    return built_list(kept)


@system(
    "fold", 3, takes_depth=True, extension=True, category="collections",
    signature="(fold f init xs)",
    description="Combines the elements of list or array xs from left to right: acc starts as init and becomes (f acc x) for each x; returns the last acc.",
)
def fn_fold(depth: int, f: Any, init: Any, xs: Any) -> Any:
    fn = function("fold", f)
    items = sequence("fold", xs)
    visit(len(items))
    acc = init
    for x in items:
        acc = fn(depth + 1, acc, x)
    return acc


def _verdicts(name: str, depth: int, pred: Any, xs: Any) -> Iterator[tuple[Any, bool]]:
    """Each element with pred's boolean verdict, in order, for searches that may stop early.

    Steps are charged 64 elements at a time as the search reaches them, so a search that
    stops at the first element does not pay for the whole list.
    """
    fn = function(name, pred)
    items = sequence(name, xs)
    for i, x in enumerate(items):
        if i % 64 == 0:
            visit(min(64, len(items) - i))
        yield x, truth(name, fn(depth + 1, x))


@system(
    "find", 2, takes_depth=True, extension=True, category="collections",
    signature="(find pred xs)",
    description="Returns the first element of list or array xs for which pred returns true, or () when none does.",
)
def fn_find(depth: int, pred: Any, xs: Any) -> Any:
    for x, verdict in _verdicts("find", depth, pred, xs):
        if verdict:
            return x
    return None


@system(
    "any?", 2, takes_depth=True, extension=True, category="collections",
    signature="(any? pred xs)",
    description="True when pred returns true for at least one element of list or array xs (false for an empty one); stops at the first.",
)
def fn_any(depth: int, pred: Any, xs: Any) -> bool:
    return any(verdict for _x, verdict in _verdicts("any?", depth, pred, xs))


@system(
    "every?", 2, takes_depth=True, extension=True, category="collections",
    signature="(every? pred xs)",
    description="True when pred returns true for every element of list or array xs (true for an empty one); stops at the first false.",
)
def fn_every(depth: int, pred: Any, xs: Any) -> bool:
    return all(verdict for _x, verdict in _verdicts("every?", depth, pred, xs))


@system(
    "sum", 1, extension=True, category="collections",
    signature="(sum xs)",
    description="Adds up the numbers in list or array xs (0 for an empty one); integers stay integers, a float makes the sum a float.",
)
def fn_sum(xs: Any) -> Any:
    items = sequence("sum", xs)
    visit(len(items))
    total: Any = 0
    for x in items:
        if type(x) not in _NUMBERS:
            raise EvalError(f"sum: expected numbers; found {described(x)}")
        total = add2(total, x)
    return total


@system(
    "sort", 1, extension=True, category="collections",
    signature="(sort xs)",
    description="Returns the elements of list or array xs in ascending order: all numbers (by value) or all texts (by code point); equal elements keep their order.",
)
def fn_sort(xs: Any) -> LispList | None:
    items = sequence("sort", xs)
    n = len(items)
    if not n:
        return None
    visit(_sort_cost(n))
    _sort_kind("sort", items, "the elements")
    current().allocate(_LIST_UNIT * n)
    return tuple(sorted(cast("list[_Orderable]", items)))  # _sort_kind checked them


@system(
    "sort-by", 2, takes_depth=True, extension=True, category="collections",
    signature="(sort-by key-fn xs)",
    description="Returns the elements of list or array xs ordered by (key-fn x), ascending; keys must be all numbers or all texts; ties keep their order.",
)
def fn_sort_by(depth: int, key_fn: Any, xs: Any) -> LispList | None:
    fn = function("sort-by", key_fn)
    items = sequence("sort-by", xs)
    n = len(items)
    if not n:
        return None
    current().allocate(2 * _LIST_UNIT * n)  # the keys and the result
    visit(n)
    keys: list[LispValue] = []  # a local the guest memory meter sees (see map)
    for x in items:
        keys.append(fn(depth + 1, x))
    visit(_sort_cost(n))
    _sort_kind("sort-by", keys, "the keys")
    order = sorted(range(n), key=cast("Callable[[int], _Orderable]", keys.__getitem__))  # checked keys
    return tuple([items[i] for i in order])


@system(
    "range", 1, 3, extension=True, category="collections",
    signature="(range end) (range start end) (range start end step)",
    description="A list of integers from start (default 0) up to but not including end, counting by step (default 1; negative counts down).",
)
def fn_range(*args: Any) -> LispList | None:
    for a in args:
        if type(a) is not int:
            raise EvalError(f"range: expected integers; found {described(a)}")
    if len(args) == 1:
        start, end, step = 0, args[0], 1
    elif len(args) == 2:
        start, end, step = args[0], args[1], 1
    else:
        start, end, step = args
    if step == 0:
        raise EvalError("range: step must not be 0")
    if step > 0:
        n = (end - start + step - 1) // step
    else:
        n = (start - end - step - 1) // -step
    if n <= 0:
        return None
    context = current()
    context.allocate(_LIST_UNIT * n)  # refused here, before anything is built
    visit(n)
    return tuple(range(start, end, step))


@system(
    "keys", 1, extension=True, category="collections",
    signature="(keys m)",
    description="The keys of map m as a list of texts, in sorted order.",
)
def fn_keys(m: Any) -> LispList | None:
    pairs = mapping("keys", m)
    visit(len(pairs))
    return built_list([key for key, _ in pairs])


@system(
    "values", 1, extension=True, category="collections",
    signature="(values m)",
    description="The values of map m as a list, in the sorted order of their keys.",
)
def fn_values(m: Any) -> LispList | None:
    pairs = mapping("values", m)
    visit(len(pairs))
    return built_list([value for _, value in pairs])


@system(
    "entries", 1, extension=True, category="collections",
    signature="(entries m)",
    description="The entries of map m as a list of (key value) two-element lists, sorted by key.",
)
def fn_entries(m: Any) -> LispList | None:
    pairs = mapping("entries", m)
    n = len(pairs)
    if not n:
        return None
    current().allocate(2 * _LIST_UNIT * n)  # one two-element list per entry
    visit(n)
    return tuple([(key, value) for key, value in pairs])


@system(
    "count", 1, extension=True, category="collections",
    signature="(count x)",
    description="The number of elements of a list or array, of entries of a map, or of characters of a text.",
)
def fn_count(x: Any) -> int:
    if x is None:
        return 0
    t = type(x)
    if t is tuple or t is str:
        return len(x)
    if isinstance(x, Foreign):
        n = x.entry_count()
        if n is not None:
            return n
        raise EvalError(f"count: expected a list, array, map or text; found {described(x)}; test for null with (value-null? v)")
    raise EvalError(f"count: expected a list, array, map or text; found {described(x)}")


@system(
    "empty?", 1, extension=True, category="collections",
    signature="(empty? x)",
    description="True for (), an empty array or map, and the empty text \"\".",
)
def fn_is_empty(x: Any) -> bool:
    if x is None:
        return True
    t = type(x)
    if t is tuple or t is str:
        return not x
    if isinstance(x, Foreign):
        n = x.entry_count()
        if n is not None:
            return n == 0
        raise EvalError(f"empty?: expected a list, array, map or text; found {described(x)}; test for null with (null? v)")
    raise EvalError(f"empty?: expected a list, array, map or text; found {described(x)}")


@system(
    "to-list", 1, extension=True, category="collections",
    signature="(to-list v)",
    description="An array (or a list) as a Lisp list, so first, tail, len and apply work on it.",
)
def fn_to_list(v: Any) -> LispList | None:
    items = sequence("to-list", v)
    visit(len(items))
    return built_list(items)


def member(items: LispList | list[LispValue], wanted: Any) -> bool:
    """Whether ``wanted`` is ``=`` to an element; elements of another kind never match."""
    visit(len(items))
    for item in items:
        try:
            if equal(item, wanted):
                return True
        except EvalError:
            continue
    return False
