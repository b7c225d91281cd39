"""The one error hierarchy of Svit Lisp.

Every error a guest program can cause is a :class:`LispError`. Reader and compiler
errors carry a source position; runtime errors carry the Lisp call stack. Messages
never contain a host path or a Python traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "MESSAGE_CAP",
    "BudgetExhausted",
    "CompileError",
    "EvalError",
    "Frame",
    "HostFunctionError",
    "InternalError",
    "LimitError",
    "LispError",
    "ReadError",
    "Span",
    "cap_message",
]

MESSAGE_CAP = 1024


def cap_message(text: str, cap: int = MESSAGE_CAP) -> str:
    """Cut ``text`` to ``cap`` UTF-8 bytes on a character boundary, marking the cut."""
    raw = text.encode("utf-8")
    if len(raw) <= cap:
        return text
    return raw[:cap].decode("utf-8", errors="ignore") + "…"


@dataclass(frozen=True)
class Span:
    """A 1-based line and column in a source text."""

    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.line}:{self.column}"


@dataclass(frozen=True)
class Frame:
    """One entry of a Lisp call stack: the function's name and where it was executing.

    ``line`` and ``column`` are those of the form that was running in the frame: the
    call that failed, or in a caller the call that led to the next frame.
    """

    function: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = f" (line {self.line})" if self.line is not None else ""
        return f"in {self.function}{where}"


class LispError(Exception):
    """Base of all Svit Lisp errors.

    ``source`` is the script's virtual path (``/lib/name.svit-script``); ``span`` the
    position for reader/compiler errors; ``stack`` the call stack for runtime errors.
    """

    kind = "error"

    def __init__(self, detail: str, span: Span | None = None) -> None:
        self.detail = cap_message(detail)
        self.span = span
        self.source: str | None = None
        self.stack: tuple[Frame, ...] = ()
        super().__init__(self.detail)

    def located(self, source: str | None) -> LispError:
        """Attach the script's virtual path once (the first attachment wins)."""
        if self.source is None:
            self.source = source
        return self

    @property
    def message(self) -> str:
        """The full one-line diagnostic: ``source:line:col: detail``, capped."""
        parts = []
        if self.source:
            parts.append(self.source)
        if self.span is not None:
            parts.append(str(self.span))
        elif self.stack and self.stack[-1].line is not None:
            parts.append(str(self.stack[-1].line))
        prefix = ":".join(parts)
        text = f"{prefix}: {self.detail}" if prefix else self.detail
        return cap_message(text)

    def __str__(self) -> str:
        return self.message


class ReadError(LispError):
    """The source text is not well-formed Svit Lisp."""

    kind = "syntax error"


class CompileError(LispError):
    """The forms are well-formed but break a rule of the language (arity of a form, ...)."""

    kind = "compile error"


class EvalError(LispError):
    """A runtime failure: type mismatch, arity, unbound name, panic, division by zero."""

    kind = "runtime error"


class LimitError(LispError):
    """A resource limit ran out; ``limit`` is its name (``"call stack"``, ``"guest memory"``...)."""

    kind = "resource limit"

    def __init__(self, limit: str, span: Span | None = None) -> None:
        self.limit = limit
        super().__init__(f"resource limit exceeded: {limit}", span)


class BudgetExhausted(LispError):
    """The deterministic step budget or the wall-clock backstop ran out."""

    kind = "execution limit"

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"execution limit exceeded: {what}")


class InternalError(LispError):
    """The interpreter itself failed; details stay inside the host."""

    kind = "internal error"

    def __init__(self, detail: str = "Lisp interpreter failed") -> None:
        super().__init__(detail)


class HostFunctionError(InternalError):
    """A function the host installed failed with an exception of its own (a host bug).

    Not the guest's fault, so never reported as a guest type error: the host's
    exception is the ``__cause__``, and only the function's name reaches the message.
    """

    kind = "host function error"

    def __init__(self, function: str) -> None:
        self.function = function
        super().__init__(f"internal error: host function `{function}` failed")
