"""Persistent values as they cross the host API: plain Python data plus :class:`Script`.

A persistent value is one of ``None``, ``bool``, ``int`` (signed 64-bit), ``float``
(finite), ``str``, ``list``, ``dict`` with ``str`` keys, or a :class:`Script` (legal only
below ``/lib``). ``1`` and ``1.0`` are different values, so equality here is by kind as
well as content (:func:`values_equal`). Map keys are kept in code-point order, which is
Python's ``str`` order.

This module also holds the two text encodings of values: the JSON mapping (reference
§3.3) and the adjacent-tag wire form (§3.4), whose decoder is strict because it reads
untrusted input.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from .errors import InvalidValue

__all__ = [
    "I64_MAX",
    "I64_MIN",
    "MAX_NESTING",
    "Script",
    "canonical_keys",
    "check_scalar",
    "from_json",
    "from_json_text",
    "from_tagged",
    "kind_of",
    "to_json",
    "to_json_text",
    "to_plain",
    "to_tagged",
    "values_equal",
]

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1

#: Deeper than any valid value can be (the hard maximum of ``max_value_depth`` is 128);
#: guards recursion on untrusted or cyclic input.
MAX_NESTING = 160

_NESTING_ERROR = "maximum nesting depth exceeded"


@dataclass(frozen=True)
class Script:
    """A library entry: Svit Lisp source and its documentation. Immutable, so it can be shared."""

    source: str
    documentation: str = ""

    def __post_init__(self) -> None:
        if type(self.source) is not str:
            raise InvalidValue("library writes require a text source")
        if type(self.documentation) is not str:
            raise InvalidValue("library documentation must be text")

    def to_json(self) -> dict[str, str]:
        return {"documentation": self.documentation, "source": self.source}


# ---------------------------------------------------------------------------
# Validation and fresh copies of host-supplied values


def check_scalar(value: Any) -> None:
    """Reject the scalar failures shared by every entry point (range, finiteness, text)."""
    t = type(value)
    if t is int:
        if not I64_MIN <= value <= I64_MAX:
            raise InvalidValue("integer is outside signed 64-bit range")
    elif t is float:
        if not math.isfinite(value):
            raise InvalidValue("numbers must be finite")
    elif t is str:
        if not _is_valid_text(value):
            raise InvalidValue("text must be valid Unicode (no lone surrogates)")


def _is_valid_text(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def to_plain(value: Any, *, scripts_allowed: bool = False) -> Any:
    """Validate a host value and return a fresh copy with map keys in canonical order.

    The copy guarantees the host keeps no reference into stored state.
    """
    return _plain(value, scripts_allowed, 0)


def _plain(value: Any, scripts_allowed: bool, depth: int) -> Any:
    t = type(value)
    if value is None or t is bool:
        return value
    if t is int or t is float or t is str:
        check_scalar(value)
        return value
    if depth >= MAX_NESTING:
        raise InvalidValue(_NESTING_ERROR)
    if t is list:
        return [_plain(item, scripts_allowed, depth + 1) for item in value]
    if t is dict:
        for key in value:
            if type(key) is not str:
                raise InvalidValue("map keys must be text")
            check_scalar(key)
        return {key: _plain(value[key], scripts_allowed, depth + 1) for key in sorted(value)}
    if t is Script:
        if not scripts_allowed:
            raise InvalidValue("script records are only valid below /lib")
        check_scalar(value.source)
        check_scalar(value.documentation)
        return value
    raise InvalidValue(f"unsupported value type: {t.__name__}")


def kind_of(value: Any) -> str:
    """The Svit kind name of a plain value (``"integer"`` for ``1``, ``"number"`` for ``1.0``)."""
    t = type(value)
    if value is None:
        return "null"
    try:
        return _KIND_NAMES[t]
    except KeyError:
        raise InvalidValue(f"unsupported value type: {t.__name__}") from None


_KIND_NAMES = {
    bool: "bool",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "map",
    Script: "script",
}


def values_equal(a: Any, b: Any) -> bool:
    """Structural equality that, unlike ``==``, tells ``1``, ``1.0`` and ``True`` apart."""
    ta, tb = type(a), type(b)
    if ta is not tb:
        return False
    if ta is list:
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b))
    if ta is dict:
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if ta is float:
        # -0.0 and 0.0 hash alike, so they are the same value here too.
        return bool(a == b)
    return bool(a == b)


def canonical_keys(mapping: dict[str, Any]) -> list[str]:
    """Map keys in canonical order (UTF-8 byte order == code-point order == ``sorted``)."""
    return sorted(mapping)


# ---------------------------------------------------------------------------
# JSON mapping (reference §3.3)


def to_json(value: Any) -> Any:
    """JSON-ready data: scripts become ``{"documentation", "source"}`` objects."""
    t = type(value)
    if t is dict:
        return {key: to_json(value[key]) for key in sorted(value)}
    if t is list:
        return [to_json(item) for item in value]
    if t is Script:
        return value.to_json()
    return value


def to_json_text(value: Any) -> str:
    """Compact JSON text with keys in canonical order (floats keep their ``.0``)."""
    return json.dumps(to_json(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def from_json(data: Any) -> Any:
    """Convert parsed JSON data to a persistent value.

    A whole number that fits i64 is an integer; a larger one becomes a number; a JSON
    float (``1.0``) stays a number. JSON never produces scripts.
    """
    return _from_json(data, 0)


def _from_json(data: Any, depth: int) -> Any:
    t = type(data)
    if data is None or t is bool or t is str:
        if t is str:
            check_scalar(data)
        return data
    if t is int:
        if I64_MIN <= data <= I64_MAX:
            return data
        try:
            number = float(data)
        except OverflowError:
            raise InvalidValue("numbers must be finite") from None
        return number
    if t is float:
        check_scalar(data)
        return data
    if depth >= MAX_NESTING:
        raise InvalidValue(_NESTING_ERROR)
    if t is list:
        return [_from_json(item, depth + 1) for item in data]
    if t is dict:
        for key in data:
            if type(key) is not str:
                raise InvalidValue("map keys must be text")
            check_scalar(key)
        return {key: _from_json(data[key], depth + 1) for key in sorted(data)}
    raise InvalidValue(f"unsupported JSON value type: {t.__name__}")


def _reject_constant(name: str) -> Any:
    raise InvalidValue("numbers must be finite")


def from_json_text(text: str | bytes) -> Any:
    """Parse JSON text (NaN/Infinity rejected; duplicate keys: last wins) into a value."""
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except InvalidValue:
        raise
    except RecursionError:
        raise InvalidValue(_NESTING_ERROR) from None
    except (ValueError, TypeError) as exc:
        raise InvalidValue(f"invalid JSON: {exc}") from None
    return from_json(data)


# ---------------------------------------------------------------------------
# Tagged wire encoding (reference §3.4)


def to_tagged(value: Any) -> dict[str, Any]:
    """``{"type": kind, "value": payload}``; ``null`` carries no ``value`` key."""
    t = type(value)
    if value is None:
        return {"type": "null"}
    if t is bool:
        return {"type": "bool", "value": value}
    if t is int:
        return {"type": "integer", "value": value}
    if t is float:
        return {"type": "number", "value": value}
    if t is str:
        return {"type": "string", "value": value}
    if t is list:
        return {"type": "array", "value": [to_tagged(item) for item in value]}
    if t is dict:
        return {"type": "map", "value": {key: to_tagged(value[key]) for key in sorted(value)}}
    if t is Script:
        return {"type": "script", "value": value.to_json()}
    raise InvalidValue(f"unsupported value type: {t.__name__}")


def from_tagged(data: Any, *, scripts_allowed: bool = True) -> Any:
    """Decode the tagged form strictly: exact keys, exact payload types, checked ranges."""
    return _from_tagged(data, scripts_allowed, 0)


def _tag_error(detail: str) -> InvalidValue:
    return InvalidValue(f"malformed tagged value: {detail}")


def _from_tagged(data: Any, scripts_allowed: bool, depth: int) -> Any:
    if type(data) is not dict:
        raise _tag_error("expected an object with a type")
    kind = data.get("type")
    if type(kind) is not str:
        raise _tag_error("missing type")
    if kind == "null":
        if data.keys() != {"type"}:
            raise _tag_error("null takes no value")
        return None
    if data.keys() != {"type", "value"}:
        raise _tag_error(f"{kind} needs exactly type and value")
    payload = data["value"]
    pt = type(payload)
    if kind == "bool":
        if pt is not bool:
            raise _tag_error("bool payload must be true or false")
        return payload
    if kind == "integer":
        if pt is not int:
            raise _tag_error("integer payload must be a whole number")
        check_scalar(payload)
        return payload
    if kind == "number":
        if pt is int:
            # JSON writers may drop the fraction of a whole float.
            try:
                payload = float(payload)
            except OverflowError:
                raise InvalidValue("numbers must be finite") from None
        elif pt is not float:
            raise _tag_error("number payload must be numeric")
        check_scalar(payload)
        return payload
    if kind == "string":
        if pt is not str:
            raise _tag_error("string payload must be text")
        check_scalar(payload)
        return payload
    if kind == "script":
        if not scripts_allowed:
            raise InvalidValue("script records are only valid below /lib")
        if pt is not dict or "source" not in payload or not set(payload) <= {"source", "documentation"}:
            raise _tag_error("script payload must hold source and optional documentation")
        source = payload["source"]
        documentation = payload.get("documentation", "")
        if type(source) is not str or type(documentation) is not str:
            raise _tag_error("script source and documentation must be text")
        check_scalar(source)
        check_scalar(documentation)
        return Script(source, documentation)
    if depth >= MAX_NESTING:
        raise InvalidValue(_NESTING_ERROR)
    if kind == "array":
        if pt is not list:
            raise _tag_error("array payload must be a list")
        return [_from_tagged(item, scripts_allowed, depth + 1) for item in payload]
    if kind == "map":
        if pt is not dict:
            raise _tag_error("map payload must be an object")
        for key in payload:
            if type(key) is not str:
                raise InvalidValue("map keys must be text")
            check_scalar(key)
        return {key: _from_tagged(payload[key], scripts_allowed, depth + 1) for key in sorted(payload)}
    raise _tag_error(f"unknown type {kind[:64]!r}")
