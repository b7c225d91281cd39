"""String system functions: ``chars`` and ``string`` (``concat``/``join`` live
with the lists, ``format`` with the formatting functions)."""

from __future__ import annotations

from typing import Any

from ..context import current
from ..values import Char, LispList, Name
from .registry import system
from .support import type_error

__all__ = ["WIDE_CHAR_UNITS"]

#: One shared Char per Latin-1 character, so the list of an ASCII text costs only its slots.
_LATIN1 = tuple(Char(chr(i)) for i in range(256))
#: Units per character of a text that is not ASCII: the list slot, and a Char with a
#: one-character text of its own (what CPython really spends on a character beyond Latin-1).
WIDE_CHAR_UNITS = 8 + 128


@system("chars", 1)
def fn_chars(s: Any) -> LispList | None:
    if type(s) is not str:
        raise type_error("string", s)
    if not s:
        return None
    if s.isascii():  # a flag CPython keeps: no scan
        current().allocate(8 * len(s))  # refused before the list is built
        return tuple(map(_LATIN1.__getitem__, s.encode("ascii")))
    current().allocate(WIDE_CHAR_UNITS * len(s))
    latin1 = _LATIN1
    return tuple([latin1[code] if (code := ord(c)) < 256 else Char(c) for c in s])


@system("string", 1)
def fn_string(v: Any) -> str:
    t = type(v)
    text: str
    if t is str:
        text = v
        return text
    if t is Char:
        text = v.char
        return text
    if t is Name:
        text = v.name
        current().allocate(len(text))
        return text
    raise type_error("char or string or name", v)
