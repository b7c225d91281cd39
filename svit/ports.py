"""Ports: named host integrations a script reaches with ``port-call``.

A :class:`Ports` registry is built by the host (empty means no authority). Each port
has a descriptor, projected into the process at ``/ports/<name>``, and an ``execute``
that runs once, in place, when a script calls it; its effect is external and is never
rolled back. A port reports failure by raising :class:`PortError`; any other exception
is reported the same way, with a sanitized message.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

from .errors import sanitize
from .paths import validate_script_name


class PortError(Exception):
    """A port's own failure; its text reaches the script's error (sanitized)."""


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

    def port(self, name: str, port: Port | Callable[..., Any], descriptor: PortDescriptor | None = None) -> "Ports":
        validate_script_name(name)
        if not isinstance(port, Port):
            if not callable(port):
                raise TypeError("a port must be a callable or have descriptor() and execute()")
            port = FunctionPort(port, descriptor)
        self._ports[name] = port
        return self

    def extension(self, bundle: Any) -> "Ports":
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
    """The sanitized text of a port failure (no traceback, no type names)."""
    text = str(exc) if isinstance(exc, PortError) else (str(exc) or "port raised an error")
    return sanitize(text.replace("\n", " "), 512)
