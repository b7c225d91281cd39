"""Printing Lisp values as text: ``display`` (``~a``) and ``debug_repr`` (``~s``).

Shared by ``format`` and by error messages (:func:`short_repr`). Rendering is
iterative (deep lists cannot overflow the Python stack), renders a list shared many
times only once, charges steps as it goes, and stops with
``LimitError("guest memory")`` as soon as the text would exceed the guest memory
limit, so exponentially shared lists cannot exhaust the host.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from types import FunctionType
from typing import Any

from .context import current
from .errors import LimitError
from .values import Char, Foreign, Keyword, LispPath, Name, Quoted, function_label

__all__ = ["debug_repr", "display", "float_text", "plain_float", "render", "short_repr"]

#: Rendering charges one step per this many output characters (or list elements).
_CHARS_PER_STEP = 64
_STEP_EVERY = 1024


# --- atoms ---------------------------------------------------------------------


def plain_float(f: float) -> str:
    """Shortest round-trip digits in positional notation (Rust's ``{}`` for f64)."""
    r = repr(f)
    if "e" in r or "E" in r:
        r = format(Decimal(r), "f")
    if r.endswith(".0"):
        r = r[:-2]
    return r


def float_text(f: float) -> str:
    """A float as Lisp shows it: always with a decimal point when finite."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    s = plain_float(f)
    return s if "." in s else s + ".0"


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0"}


def _escape(text: str, quote: str) -> str:
    out = []
    for ch in text:
        e = _ESCAPES.get(ch)
        if e is not None:
            out.append(e)
        elif ch == quote:
            out.append("\\" + ch)
        elif ch == " " or ch.isprintable():
            out.append(ch)
        else:
            out.append(f"\\u{{{ord(ch):x}}}")
    return "".join(out)


def _bytes_text(b: bytes) -> str:
    out = ['#b"']
    for x in b:
        if x == 0x5C:
            out.append("\\\\")
        elif x == 0x22:
            out.append('\\"')
        elif 0x20 <= x <= 0x7E:
            out.append(chr(x))
        else:
            out.append(f"\\x{x:02x}")
    out.append('"')
    return "".join(out)


def _atom(v: Any, debug: bool) -> str:
    t = type(v)
    if v is None:
        return "()"
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return str(v)
    if t is float:
        return float_text(v)
    if t is str:
        return '"' + _escape(v, '"') + '"' if debug else v
    if t is Fraction:
        return f"{v.numerator}/{v.denominator}"
    if t is Char:
        return "#'" + _escape(v.char, "'") + "'" if debug else v.char
    if t is Name or t is Keyword:
        name: str = v.name
        return name if t is Name else ":" + name
    if t is bytes:
        return _bytes_text(v)
    if t is LispPath:
        path: str = v.path
        return '#p"' + _escape(path, '"') + '"' if debug else path
    if t is Quoted:
        # quote forms nest no deeper than the source (or quasiquote) that made them
        prefix: str = v.prefix()
        return prefix + render(v.value, True, current().max_memory)
    if isinstance(v, Foreign):
        return v.display()
    if t is FunctionType:
        kind, name = function_label(v)
        return f"#<{kind} {name}>"
    return "#<object>"


# --- bounded rendering ---------------------------------------------------------------


class _Cut(Exception):
    pass


def _clip(v: Any, limit: int) -> Any:
    """With ``cut``, only the first ``limit + 1`` characters of a long text can show."""
    t = type(v)
    if (t is str or t is bytes) and len(v) > limit:
        return v[: limit + 1]
    if t is LispPath and len(v.path) > limit:
        return LispPath(v.path[: limit + 1])
    return v


def render(value: Any, debug: bool, limit: int, cut: bool = False) -> str:
    """Render ``value``; past ``limit`` characters raise (or, with ``cut``, stop)."""
    if type(value) is not tuple:
        s = _atom(_clip(value, limit) if cut else value, debug)
        if len(s) > limit:
            if cut:
                return s[:limit] + "…"
            raise LimitError("guest memory")
        return s
    debug = True  # list elements always render as with ~s, as in Ketos
    budget = current().budget
    out: list[str] = []
    total = 0
    ticks = 0
    # a list seen before is copied from its earlier span of ``out``:
    # id -> (first part, end part, characters)
    memo: dict[int, tuple[int, int, int]] = {}
    # frames: [list, next index, first part, characters before it]
    stack: list[list[Any]] = []

    def emit(s: str) -> None:
        nonlocal total
        total += len(s)
        out.append(s)
        if total > limit:
            raise _Cut

    def enter(v: Any) -> None:
        nonlocal total
        if type(v) is tuple:
            done = memo.get(id(v))
            if done is None:
                stack.append([v, 0, len(out), total])
                emit("(")
                return
            first, end, chars = done
            if total + chars > limit:
                raise _Cut
            if end - first >= _CHARS_PER_STEP:
                budget.charge((end - first) // _CHARS_PER_STEP)
            out.extend(out[first:end])
            total += chars
        else:
            emit(_atom(_clip(v, limit) if cut else v, debug))

    try:
        enter(value)
        while stack:
            ticks += 1
            if ticks >= _STEP_EVERY:
                budget.charge(_STEP_EVERY // 16)
                ticks = 0
            frame = stack[-1]
            lst, i, first, before = frame
            if i == len(lst):
                emit(")")
                stack.pop()
                memo[id(lst)] = (first, len(out), total - before)
                continue
            if i:
                emit(" ")
            frame[1] = i + 1
            enter(lst[i])
    except _Cut:
        if not cut:
            raise LimitError("guest memory") from None
        return "".join(out)[:limit] + "…"
    text = "".join(out)
    if len(text) >= _CHARS_PER_STEP:
        budget.charge(len(text) // _CHARS_PER_STEP)
    return text


def display(value: Any) -> str:
    """The ``~a`` rendering (strings and chars bare; list elements as ``~s``)."""
    return render(value, False, current().max_memory)


def debug_repr(value: Any) -> str:
    """The ``~s`` rendering (strings quoted and escaped, chars as ``#'c'``)."""
    return render(value, True, current().max_memory)


def short_repr(value: Any, display: bool = False, limit: int = 120) -> str:
    """A rendering for error messages: never fails, cut at ``limit`` characters."""
    try:
        return render(value, not display, limit, cut=True)
    except LimitError:
        return "…"
