"""String system functions: ``chars`` and ``string`` (``concat``/``join`` live
with the lists, ``format`` with the formatting functions)."""

from __future__ import annotations

from typing import Any

from ..context import current
from ..values import Char, Name
from . import system
from .lists import make_list
from .numbers import type_error


@system("chars", 1)
def fn_chars(s: Any) -> tuple | None:
    if type(s) is not str:
        raise type_error("string", s)
    if not s:
        return None
    current().allocate(8 * len(s))  # refused before a Char is built for every character
    return tuple([Char(c) for c in s])


@system("string", 1)
def fn_string(v: Any) -> str:
    t = type(v)
    if t is str:
        return v
    if t is Char:
        return v.char
    if t is Name:
        current().allocate(len(v.name))
        return v.name
    raise type_error("char or string or name", v)
