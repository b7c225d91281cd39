"""Ports: named host integrations a script reaches with ``port-call``.

A :class:`Ports` registry is built by the host (empty means no authority). Each port
has a descriptor, projected into the process at ``/ports/<name>``, and an ``execute``
that runs once, in place, when a script calls it; its effect is external and is never
rolled back. A port reports failure deliberately by raising :class:`PortError`, whose
text the script sees. Any other exception is shown to the script only by its kind (its
class name, e.g. ``FileNotFoundError``): exception text from arbitrary code can carry host
paths, addresses or secrets. The host keeps the whole exception: it is logged on the
``svit`` logger and attached to the failure the host receives as ``port_error``.
"""

from __future__ import annotations

import inspect
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

from .errors import SvitError, sanitize
from .paths import validate_script_name

__all__ = [
    "FunctionPort",
    "Port",
    "PortContext",
    "PortDescriptor",
    "PortError",
    "Ports",
    "failure_text",
    "log_port_failure",
]

_log = logging.getLogger("svit")
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_UNNAMED_FAILURE = "port raised an error"


class PortError(Exception):
    """A port's deliberate failure: its text reaches the script's error (sanitized), so it
    must say what went wrong in terms the script may see (no host paths, no secrets)."""


@dataclass(frozen=True)
class PortDescriptor:
    """What a port does, as shown at ``/ports/<name>``."""

    description: str = ""
    version: str = "v1"
    input_schema: dict[str, Any] = field(default_factory=dict)
    output: str = "Port-defined output."
    effect: str = "host-defined"
    limits: tuple[str, ...] = ()

    def catalog_entry(self, name: str) -> dict[str, Any]:
        return {
            "description": self.description,
            "effect": self.effect,
            "input_schema": dict(self.input_schema),
            "limits": list(self.limits),
            "name": name,
            "output": self.output,
            "version": self.version,
        }


class PortContext:
    """Read-only view of the committed process, handed to a running port."""

    def __init__(self, read: Callable[[str], Any], stat: Callable[[str], Any], discover: Callable[[str], Any], address: str) -> None:
        self.read = read
        self.stat = stat
        self.discover = discover
        self.address = address


@runtime_checkable
class Port(Protocol):
    def descriptor(self) -> PortDescriptor: ...

    def execute(self, context: PortContext, input: Any) -> Any: ...


class FunctionPort:
    """Adapts a plain callable ``f(input)`` or ``f(context, input)`` into a port."""

    def __init__(self, fn: Callable[..., Any], descriptor: PortDescriptor | None = None) -> None:
        self.fn = fn
        self._descriptor = descriptor or PortDescriptor(description=(inspect.getdoc(fn) or "").split("\n")[0])
        try:
            self._wants_context = len(inspect.signature(fn).parameters) >= 2
        except (TypeError, ValueError):
            self._wants_context = False

    def descriptor(self) -> PortDescriptor:
        return self._descriptor

    def execute(self, context: PortContext, input: Any) -> Any:
        return self.fn(context, input) if self._wants_context else self.fn(input)


class Ports:
    """A registry of named ports; later registrations of a name replace earlier ones."""

    def __init__(self) -> None:
        self._ports: dict[str, Port] = {}

    def port(self, name: str, port: Port | Callable[..., Any], descriptor: PortDescriptor | None = None) -> Ports:
        validate_script_name(name)
        if not isinstance(port, Port):
            if not callable(port):
                raise TypeError("a port must be a callable or have descriptor() and execute()")
            port = FunctionPort(port, descriptor)
        self._ports[name] = port
        return self

    def extension(self, bundle: Any) -> Ports:
        """Register every ``(name, port)`` pair a bundle yields."""
        for name, port in bundle:
            self.port(name, port)
        return self

    def get(self, name: str) -> Port | None:
        return self._ports.get(name)

    def names(self) -> list[str]:
        return sorted(self._ports)

    def catalog(self) -> dict[str, Any]:
        """The ``/ports`` map for this registry."""
        return {name: self._ports[name].descriptor().catalog_entry(name) for name in sorted(self._ports)}

    def __len__(self) -> int:
        return len(self._ports)


def failure_text(exc: BaseException) -> str:
    """What the script sees of a port failure: a :class:`PortError`'s own text, a Svit
    error's message, or else only the exception's kind (its class name), never its text."""
    if isinstance(exc, PortError):
        text = str(exc) or _UNNAMED_FAILURE
    elif isinstance(exc, SvitError):
        text = exc.message
    else:
        kind = type(exc).__name__
        text = kind if _PLAIN_NAME.fullmatch(kind) else _UNNAMED_FAILURE
    return sanitize(" ".join(text.split()) or _UNNAMED_FAILURE, 512)


def log_port_failure(name: str, exc: BaseException) -> None:
    """Give the host the whole failure (text and traceback) on its own log, never the store."""
    _log.warning("port /ports/%s failed: %s", name, type(exc).__name__, exc_info=exc)
