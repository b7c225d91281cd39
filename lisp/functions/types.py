"""Type tests and small value constructors (reference §4.5): ``id type-of is
null bytes path panic``. ``bytes`` and ``path`` only build values; nothing here
touches the filesystem."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from ..context import current
from ..errors import EvalError
from ..render import short_repr
from ..values import Foreign, LispPath, Name, type_name
from .registry import system
from .support import overflow, type_error

#: Nothing to import: the module registers its system functions (see :mod:`lisp.functions.registry`).
__all__: list[str] = []

_NUMBERS = (int, float, Fraction)


@system("id", 1)
def fn_id(v: Any) -> Any:
    return v


@system("type-of", 1)
def fn_type_of(v: Any) -> Name:
    return Name(type_name(v))


@system("is", 2)
def fn_is(ty: Any, v: Any) -> bool:
    if type(ty) is not Name:
        raise type_error("name", ty)
    wanted = ty.name
    t = type(v)
    if wanted == "number" and t in _NUMBERS:
        return True
    if wanted == "list" and (v is None or t is tuple):
        return True
    if isinstance(v, Foreign):
        return v.type_name() == wanted
    return type_name(v) == wanted


@system("null", 1)
def fn_null(v: Any) -> bool:
    if v is None:
        return True
    if isinstance(v, Foreign):
        # A JSON null or an empty array is a host value, never `()`: answering false
        # would hide the mistake.
        raise EvalError(
            f"type error: `null` tests Lisp lists, found {v.type_name()}: "
            "test JSON null with (value-null? v) and emptiness with (= (count v) 0)"
        )
    return False


@system("bytes", 1)
def fn_bytes(v: Any) -> bytes:
    t = type(v)
    if v is None:
        return b""
    if t is bytes:
        same: bytes = v
        return same
    if t is str:
        current().allocate(len(v))
        encoded: bytes = v.encode("utf-8")
        return encoded
    if t is tuple:
        for item in v:
            if type(item) is not int:
                raise type_error("integer", item)
            if not 0 <= item <= 255:
                raise overflow()
        current().allocate(len(v))
        return bytes(v)
    raise type_error("bytes or string", v)


@system("path", 1)
def fn_path(v: Any) -> LispPath:
    t = type(v)
    if t is LispPath:
        path: LispPath = v
        return path
    if t is str:
        return LispPath(v)
    raise type_error("string or path", v)


@system("panic", 0, 1)
def fn_panic(*args: Any) -> Any:
    if not args:
        raise EvalError("explicit panic")
    raise EvalError(f"panic: {short_repr(args[0], display=True, limit=1024)}")
