"""Equality, ordering and boolean system functions (reference §4.5).

``equal`` is ``=``: numbers compare across kinds, other values only with their
own type (a different type is an error), lists element-wise. ``compare`` is the
ordering behind ``<`` and friends. Both walk lists with an explicit stack (deep
nesting cannot overflow Python's stack) and charge steps as they go, so that
comparing huge or exponentially shared structures stays within the budget.
"""

from __future__ import annotations

import math
from fractions import Fraction
from types import FunctionType
from typing import Any, Callable

from ..context import current
from ..errors import EvalError
from ..values import Char, Foreign, Keyword, LispList, LispPath, Name, Quoted
from .registry import system
from .support import mismatch, type_error

__all__ = ["compare", "equal", "ge2", "gt2", "le2", "lt2", "num_cmp", "num_eq", "weak_equal"]

_NUMBERS = (int, float, Fraction)
# Values of these types compare with ``==`` against their own type.
_PLAIN = (type(None), bool, str, Char, bytes, LispPath, Name, Keyword)

#: Elements visited per step charged while walking lists.
_ELEMENTS_PER_STEP = 8
_CHARGE_EVERY = 1024


def _foreign_error(a: Any, b: Any) -> EvalError:
    if isinstance(a, Foreign) and isinstance(b, Foreign):
        return mismatch(a, b)
    if isinstance(a, Foreign):
        return type_error(a.type_name(), b)
    return type_error(b.type_name(), a)


#: Comparing texts charges one step per this many characters (as building them does).
_CHARS_PER_STEP = 64


def _charge_text(a: Any, b: Any) -> None:
    """Charge for comparing two long texts (or paths) character by character."""
    t = type(a)
    if t is LispPath:
        a, b = a.path, b.path
    elif t is not str and t is not bytes:
        return
    n = min(len(a), len(b))
    if n >= _CHARS_PER_STEP and a is not b:
        current().budget.charge(n // _CHARS_PER_STEP)


def num_cmp(a: Any, b: Any) -> int:
    """Order two numbers (exactly, across kinds); NaN cannot be ordered."""
    if (type(a) is float and a != a) or (type(b) is float and b != b):
        raise EvalError("attempt to compare NaN value")
    order: int = (a > b) - (a < b)
    return order


def num_eq(a: Any, b: Any) -> bool:
    if type(a) is float and not math.isfinite(a) and type(b) is not float:
        return False
    if type(b) is float and not math.isfinite(b) and type(a) is not float:
        return False
    same: bool = a == b
    return same


def _equal_scalar(a: Any, b: Any) -> bool:
    """Equality of two values that are not both lists."""
    ta = type(a)
    tb = type(b)
    if ta in _NUMBERS and tb in _NUMBERS:
        return num_eq(a, b)
    if ta is tb:
        if ta in _PLAIN:
            if ta is str or ta is bytes or ta is LispPath:
                _charge_text(a, b)
            same: bool = a == b
            return same
        if ta is FunctionType:
            return a is b
        if ta is Quoted:
            return a.kind == b.kind and a.depth == b.depth and equal(a.value, b.value)
    if (ta is tuple and b is None) or (a is None and tb is tuple):
        return False
    if isinstance(a, Foreign) or isinstance(b, Foreign):
        raise _foreign_error(a, b)
    raise mismatch(a, b)


def equal(a: Any, b: Any) -> bool:
    """The ``=`` relation; raises ``EvalError`` for values that cannot be compared."""
    if type(a) is not tuple or type(b) is not tuple:
        return _equal_scalar(a, b)
    budget = current().budget
    visited = 0
    if len(a) != len(b):
        return False
    stack = [(a, b, 0)]
    while stack:
        la, lb, i = stack.pop()
        n = len(la)
        while i < n:
            x = la[i]
            y = lb[i]
            i += 1
            visited += 1
            if visited >= _CHARGE_EVERY:
                budget.charge(visited // _ELEMENTS_PER_STEP)
                visited = 0
            if type(x) is tuple and type(y) is tuple:
                if len(x) != len(y):
                    return False
                stack.append((la, lb, i))
                stack.append((x, y, 0))
                break
            if not _equal_scalar(x, y):
                return False
    if visited:
        budget.charge(visited // _ELEMENTS_PER_STEP)
    return True


def weak_equal(a: Any, b: Any) -> bool:
    """The ``eq`` relation: ``False`` wherever ``=`` would be an error."""
    try:
        return equal(a, b)
    except EvalError:
        return False


def _compare_scalar(a: Any, b: Any) -> int:
    ta = type(a)
    tb = type(b)
    if ta in _NUMBERS and tb in _NUMBERS:
        return num_cmp(a, b)
    if ta is tb:
        if ta is type(None):
            return 0
        if ta is bool:
            order: int = (a > b) - (a < b)
            return order
        if ta is str or ta is bytes:
            _charge_text(a, b)
            order = (a > b) - (a < b)
            return order
        if ta is Char:
            order = (a.char > b.char) - (a.char < b.char)
            return order
        if ta is Name or ta is Keyword:
            order = (a.name > b.name) - (a.name < b.name)
            return order
        if ta is LispPath:
            _charge_text(a, b)
            order = (a.path > b.path) - (a.path < b.path)
            return order
        if ta is FunctionType:
            raise EvalError(f"cannot compare values of type {getattr(a, 'lisp_kind', 'function')}")
    if a is None and tb is tuple:
        return -1
    if ta is tuple and b is None:
        return 1
    if isinstance(a, Foreign) or isinstance(b, Foreign):
        raise _foreign_error(a, b)
    raise mismatch(a, b)


def compare(a: Any, b: Any) -> int:
    """Order ``a`` and ``b``: negative, zero or positive; raises if they cannot be ordered."""
    if type(a) is not tuple or type(b) is not tuple:
        return _compare_scalar(a, b)
    budget = current().budget
    visited = 0
    stack = [(a, b, 0)]
    while stack:
        la, lb, i = stack.pop()
        n = min(len(la), len(lb))
        descended = False
        while i < n:
            x = la[i]
            y = lb[i]
            i += 1
            visited += 1
            if visited >= _CHARGE_EVERY:
                budget.charge(visited // _ELEMENTS_PER_STEP)
                visited = 0
            if type(x) is tuple and type(y) is tuple:
                stack.append((la, lb, i))
                stack.append((x, y, 0))
                descended = True
                break
            c = _compare_scalar(x, y)
            if c:
                return c
        if not descended and len(la) != len(lb):
            return -1 if len(la) < len(lb) else 1
    if visited:
        budget.charge(visited // _ELEMENTS_PER_STEP)
    return 0


def _expect_bool(x: Any) -> bool:
    if type(x) is not bool:
        raise type_error("bool", x)
    return x


@system("=", 2, None)
def fn_eq(*args: Any) -> bool:
    first = args[0]
    for x in args[1:]:
        if not equal(first, x):
            return False
    return True


@system("/=", 2, None)
def fn_ne(*args: Any) -> bool:
    """True when no two arguments are equal: every pair is compared.

    The pairs grow with the square of the arguments, so beyond two arguments each
    pair costs a step, charged a row at a time before that row is compared (and the
    charge looks at the clock), on top of what comparing long texts or lists costs.
    """
    n = len(args)
    budget = current().budget if n > 2 else None
    for i in range(n - 1):
        a = args[i]
        if budget is not None:
            budget.charge(n - 1 - i)
        for j in range(i + 1, n):
            if equal(a, args[j]):
                return False
    return True


@system("eq", 2, None)
def fn_weak_eq(*args: Any) -> bool:
    try:
        return fn_eq(*args)
    except EvalError:
        return False


@system("ne", 2, None)
def fn_weak_ne(*args: Any) -> bool:
    try:
        return fn_ne(*args)
    except EvalError:
        return True


def _chain(args: LispList, ok: Callable[[int], bool]) -> bool:
    for i in range(len(args) - 1):
        if not ok(compare(args[i], args[i + 1])):
            return False
    return True


@system("<", 2, None)
def fn_lt(*args: Any) -> bool:
    return _chain(args, lambda c: c < 0)


@system(">", 2, None)
def fn_gt(*args: Any) -> bool:
    return _chain(args, lambda c: c > 0)


@system("<=", 2, None)
def fn_le(*args: Any) -> bool:
    return _chain(args, lambda c: c <= 0)


@system(">=", 2, None)
def fn_ge(*args: Any) -> bool:
    return _chain(args, lambda c: c >= 0)


@system("not", 1)
def fn_not(x: Any) -> bool:
    return not _expect_bool(x)


@system("xor", 2)
def fn_xor(a: Any, b: Any) -> bool:
    return _expect_bool(a) != _expect_bool(b)


# --- comparisons used by the compiler's fast paths ------------------------------


def lt2(a: Any, b: Any) -> bool:
    if type(a) is int and type(b) is int:
        return a < b
    return compare(a, b) < 0


def gt2(a: Any, b: Any) -> bool:
    if type(a) is int and type(b) is int:
        return a > b
    return compare(a, b) > 0


def le2(a: Any, b: Any) -> bool:
    if type(a) is int and type(b) is int:
        return a <= b
    return compare(a, b) <= 0


def ge2(a: Any, b: Any) -> bool:
    if type(a) is int and type(b) is int:
        return a >= b
    return compare(a, b) >= 0
