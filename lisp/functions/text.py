"""Text and conversion functions: Svit's extensions for working with strings.

Text is compared, searched and cased by Unicode code point (never by UTF-8 byte
offsets, which only Ketos's own ``len`` and ``slice`` use). Every function pays
before it builds: the size of the text it will return is known (or bounded) first
and charged to guest memory, and scanning a long text costs one step per 64
characters.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from ..context import UNITS_PER_STEP, current
from ..errors import EvalError, LimitError
from ..render import display, short_repr
from ..values import Char, Foreign, Keyword, LispList, LispValue, Name
from .collections import member
from .registry import system
from .support import described

#: Nothing to import: the module registers its system functions (see :mod:`lisp.functions.registry`).
__all__: list[str] = []

_LIST_UNIT = 8
_WHITESPACE = " \t\n\r\f\v"
_INTEGER = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _scan(units: int) -> None:
    if units >= UNITS_PER_STEP:
        current().budget.charge(units // UNITS_PER_STEP)


def _text(name: str, value: Any, what: str = "text") -> str:
    if type(value) is str:
        return value
    hint = ""
    if isinstance(value, Foreign):
        hint = "; read a text out of a value with (value-get v \"/key\")"
    elif type(value) is not Char:
        hint = "; turn a value into text with (to-string v)"
    if type(value) is Char:
        return value.char
    raise EvalError(f"{name}: expected {what}; found {described(value)}{hint}")


def _quoted(text: str) -> str:
    return short_repr(text)


# --- searching and splitting ---------------------------------------------------------


@system(
    "split", 2, extension=True, category="text",
    signature="(split text sep)",
    description="Splits text at every occurrence of the separator text sep and returns the pieces as a list of texts (empty pieces kept).",
)
def fn_split(text: Any, sep: Any) -> LispList:
    s = _text("split", text)
    separator = _text("split", sep, "a separator text")
    if not separator:
        raise EvalError("split: the separator is empty; use (chars s) for the characters of a text")
    _scan(len(s))
    pieces = s.count(separator) + 1
    current().allocate(_LIST_UNIT * pieces + len(s))
    return tuple(s.split(separator))


@system(
    "contains?", 2, extension=True, category="text",
    signature="(contains? text part) (contains? xs x)",
    description="True when text contains the text part, or when list or array xs has an element equal to x.",
)
def fn_contains(where: Any, what: Any) -> bool:
    t = type(where)
    if t is str:
        part = _text("contains?", what, "a text to look for")
        _scan(len(where))
        return part in where
    if where is None or t is tuple:
        return member(where or (), what)
    if isinstance(where, Foreign):
        kind = where.container_kind()
        if kind == "array":
            return member(where.sequence_items() or (), what)
        if kind == "map":
            raise EvalError("contains?: expected a text, list or array; found a map; test a key with (contains? (keys m) key)")
    raise EvalError(f"contains?: expected a text, list or array; found {described(where)}")


@system(
    "starts-with?", 2, extension=True, category="text",
    signature="(starts-with? s prefix)",
    description="True when text s begins with the text prefix.",
)
def fn_starts_with(s: Any, prefix: Any) -> bool:
    text = _text("starts-with?", s)
    head = _text("starts-with?", prefix, "a prefix text")
    _scan(len(head))
    return text.startswith(head)


@system(
    "ends-with?", 2, extension=True, category="text",
    signature="(ends-with? s suffix)",
    description="True when text s ends with the text suffix.",
)
def fn_ends_with(s: Any, suffix: Any) -> bool:
    text = _text("ends-with?", s)
    tail = _text("ends-with?", suffix, "a suffix text")
    _scan(len(tail))
    return text.endswith(tail)


@system(
    "replace", 3, extension=True, category="text",
    signature="(replace text old new)",
    description="Returns text with every occurrence of the text old replaced by the text new (literal, not a pattern).",
)
def fn_replace(text: Any, old: Any, new: Any) -> str:
    s = _text("replace", text)
    target = _text("replace", old, "a text to replace")
    replacement = _text("replace", new, "a replacement text")
    if not target:
        raise EvalError("replace: the text to replace is empty")
    _scan(len(s))
    hits = s.count(target)
    if not hits:
        return s
    current().allocate(len(s) + hits * (len(replacement) - len(target)))
    return s.replace(target, replacement)


# --- case and whitespace -----------------------------------------------------------


def _recased(name: str, value: Any, upper: bool) -> str:
    s = _text(name, value)
    context = current()
    context.allocate(len(s))
    result = s.upper() if upper else s.lower()
    if len(result) > len(s):  # a few characters grow (ß -> SS); at most three-fold
        context.allocate(len(result))
    return result


@system(
    "upcase", 1, extension=True, category="text",
    signature="(upcase s)",
    description="Text s in upper case (Unicode rules).",
)
def fn_upcase(s: Any) -> str:
    return _recased("upcase", s, True)


@system(
    "downcase", 1, extension=True, category="text",
    signature="(downcase s)",
    description="Text s in lower case (Unicode rules).",
)
def fn_downcase(s: Any) -> str:
    return _recased("downcase", s, False)


@system(
    "trim", 1, extension=True, category="text",
    signature="(trim s)",
    description="Text s without the spaces, tabs and newlines at its start and end.",
)
def fn_trim(s: Any) -> str:
    text = _text("trim", s)
    current().allocate(len(text))
    return text.strip()


# --- conversions -----------------------------------------------------------------------


@system(
    "to-string", 1, extension=True, category="conversion",
    signature="(to-string v)",
    description="A number, boolean, character or text as text (3 -> \"3\", 1.5 -> \"1.5\", true -> \"true\"); a map, array or null as compact JSON.",
)
def fn_to_string(v: LispValue) -> str:
    if type(v) is str:
        return v
    if type(v) is Char:
        return v.char
    t = type(v)
    if t is bool:
        return "true" if v else "false"
    if t is int:  # already bounded by max_integer_bits
        return str(v)
    if t is float or t is Fraction or t is Name or t is Keyword:
        return display(v)
    if isinstance(v, Foreign):
        current().allocate(v.memory_size())
        return v.display()
    if v is None or t is tuple:
        raise EvalError(
            f"to-string: expected a number, boolean, text or value; found {described(v)}; "
            "join texts with (join \", \" a b) or show a list with (format \"~a\" xs)"
        )
    raise EvalError(f"to-string: expected a number, boolean, text or value; found {described(v)}")


def _number_text(name: str, value: Any) -> str:
    if type(value) is not str:
        raise EvalError(f"{name}: expected text; found {described(value)}")
    _scan(len(value))
    return value.strip(_WHITESPACE)


@system(
    "parse-int", 1, extension=True, category="conversion",
    signature="(parse-int text)",
    description="The integer written in text, such as \"42\" or \"-7\" (surrounding spaces allowed); an error for anything else.",
)
def fn_parse_int(text: Any) -> int:
    digits = _number_text("parse-int", text)
    if not _INTEGER.fullmatch(digits):
        raise EvalError(f"parse-int: not an integer: {_quoted(text)}")
    context = current()
    significant = digits.lstrip("+-").lstrip("0")
    # d decimal digits need more than 3(d-1) bits: refuse before converting.
    if len(significant) > context.max_bits // 3 + 1:
        raise LimitError("integer bits")
    return context.check_int(int(digits))


@system(
    "parse-float", 1, extension=True, category="conversion",
    signature="(parse-float text)",
    description="The number written in text as a float, such as \"2.5\", \"-1e3\" or \"7\" (surrounding spaces allowed); an error for anything else.",
)
def fn_parse_float(text: Any) -> float:
    digits = _number_text("parse-float", text)
    if not _FLOAT.fullmatch(digits):
        raise EvalError(f"parse-float: not a number: {_quoted(text)}")
    value = float(digits)
    if not math.isfinite(value):
        raise EvalError(f"parse-float: out of range: {_quoted(text)}")
    return value

