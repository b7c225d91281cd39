"""Errors shared by the system function families (and the format language).

A type error shows a short rendering of the offending value, so this module sits
above :mod:`lisp.render` and below every family that checks its arguments.
"""

from __future__ import annotations

from typing import Any

from ..errors import EvalError
from ..render import short_repr
from ..values import Foreign, type_name

__all__ = ["described", "divide_by_zero", "mismatch", "overflow", "type_error"]


def described(value: Any) -> str:
    """How an argument is named in an error: its kind and a short rendering."""
    if isinstance(value, Foreign):
        kind = value.container_kind()
        if kind is not None:
            return f"{value.type_name()} {kind}"
        return f"{value.type_name()}: {short_repr(value)}"
    return f"{type_name(value)}: {short_repr(value)}"


def type_error(expected: str, value: Any) -> EvalError:
    """``type error: expected X; found Y: <value>`` with a short rendering of the value."""
    text = f"type error: expected {expected}; found {type_name(value)}: {short_repr(value)}"
    hint = value.usage_hint() if isinstance(value, Foreign) else None
    return EvalError(f"{text}; {hint}" if hint else text)


def mismatch(a: Any, b: Any) -> EvalError:
    return EvalError(f"type mismatch; {type_name(a)} and {type_name(b)}")


def divide_by_zero() -> EvalError:
    return EvalError("attempt to divide by zero")


def overflow() -> EvalError:
    return EvalError("integer overflow")
