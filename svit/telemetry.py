"""Optional OpenTelemetry spans for turns, model calls and tool calls.

With the ``otel`` extra (``opentelemetry-api``) installed, :func:`span` opens a span on
the tracer named ``svit``; whatever SDK and exporter the application configured records
it (none configured: the API's no-op tracer). Without the package every call is a no-op
costing one function call.

A span carries only what identifies the work (the process address, the inbox item id,
the tool's name, the outcome) and, when the work fails, the error's code: never a
message, a model's text, a tool's arguments or an exception's text, any of which may
hold a secret.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

try:  # the "otel" extra
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised where the extra is absent
    _trace = None  # type: ignore[assignment]

__all__ = ["TRACER_NAME", "SpanHandle", "available", "span"]

#: The instrumentation scope every Svit span is recorded under.
TRACER_NAME = "svit"

_Plain = str | int | float | bool


class SpanHandle:
    """What the code inside a :func:`span` may add: more attributes (no-op without OpenTelemetry)."""

    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, name: str, value: _Plain | None) -> None:
        if self._span is not None and value is not None:
            self._span.set_attribute(name, value)


def available() -> bool:
    """True when ``opentelemetry-api`` is installed (spans are then handed to it)."""
    return _trace is not None


@contextlib.contextmanager
def span(name: str, **attributes: _Plain | None) -> Iterator[SpanHandle]:
    """A span named ``name`` around the block; attributes with a None value are left out.

    An exception leaving the block marks the span as an error with ``svit.error.code``
    (the Svit error code, else the exception's class name) and is re-raised unchanged.
    """
    if _trace is None:
        yield SpanHandle(None)
        return
    tracer = _trace.get_tracer(TRACER_NAME)
    plain = {key: value for key, value in attributes.items() if value is not None}
    with tracer.start_as_current_span(name, attributes=plain, record_exception=False,
                                      set_status_on_exception=False) as current:
        try:
            yield SpanHandle(current)
        except BaseException as exc:
            code = getattr(exc, "code", None)
            current.set_attribute("svit.error.code", code if isinstance(code, str) else type(exc).__name__)
            current.set_status(_trace.Status(_trace.StatusCode.ERROR))
            raise
