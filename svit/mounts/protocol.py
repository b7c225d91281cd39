"""The mount provider protocol, descriptors, access checks and the records every mount answers with.

Only a mount's descriptor is process state; the data stays with the provider and never
enters the tree or a snapshot. Providers receive the process :class:`Limits` on every
call because limits belong to the process, not to the provider: one folder may be
mounted by processes with different limits.
"""

from __future__ import annotations

import builtins
import copy
import re
from collections.abc import Callable
from typing import Any

from ..errors import InvalidMount, MountDenied
from ..limits import Limits
from .paths import MountPath, as_mount_path

__all__ = [
    "ACCESS_VALUES",
    "DESCRIPTOR_KEYS",
    "LOCALITY_VALUES",
    "MAX_MOUNT_KIND_BYTES",
    "Descriptor",
    "Mount",
    "NodeFacts",
    "can_read",
    "can_write",
    "limits_or_default",
    "mount_discover",
    "mount_node_record",
    "mount_read",
    "mount_remove",
    "mount_stat",
    "mount_write",
    "register_builtin_provider",
    "require_read",
    "require_write",
    "unattached_record",
    "validate_descriptor",
]

MAX_MOUNT_KIND_BYTES = 64

ACCESS_VALUES = ("read", "write", "read-write")
LOCALITY_VALUES = ("cache", "local", "remote")
DESCRIPTOR_KEYS = frozenset({"access", "kind", "locality", "source"})

_MOUNT_KIND = re.compile(r"[a-z0-9-]{1,64}")

#: ``{"access", "kind", "locality", "source"}``, all text.
Descriptor = dict[str, str]
#: A provider's ``stat`` answer: ``{"kind": "directory"|"leaf", "facts": {...}}``.
NodeFacts = dict[str, Any]


def validate_descriptor(descriptor: Any) -> Descriptor:
    """Check an untrusted descriptor (e.g. from a snapshot); a fresh copy or ``InvalidMount``."""
    if not isinstance(descriptor, dict):
        raise InvalidMount("mount descriptor must be a map")
    if set(descriptor) != DESCRIPTOR_KEYS:
        raise InvalidMount("mount descriptor must have exactly access, kind, locality and source")
    access, kind, locality, source = (descriptor[k] for k in ("access", "kind", "locality", "source"))
    if access not in ACCESS_VALUES or type(access) is not str:
        raise InvalidMount("mount access must be read, write or read-write")
    if type(kind) is not str or not _MOUNT_KIND.fullmatch(kind):
        raise InvalidMount("mount kind must be 1-64 bytes of [a-z0-9-]")
    if locality not in LOCALITY_VALUES or type(locality) is not str:
        raise InvalidMount("mount locality must be cache, local or remote")
    if type(source) is not str:
        raise InvalidMount("mount source must be text")
    try:
        source.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidMount("mount source must be text") from None
    return {"access": access, "kind": kind, "locality": locality, "source": source}


def can_read(descriptor: Descriptor) -> bool:
    return descriptor["access"] in ("read", "read-write")


def can_write(descriptor: Descriptor) -> bool:
    return descriptor["access"] in ("write", "read-write")


def require_read(mount_name: str, descriptor: Descriptor) -> None:
    """Reading or discovering below a mount root needs the read grant."""
    if not can_read(descriptor):
        raise MountDenied(f"/mounts/{mount_name} is write-only")


def require_write(mount_name: str, descriptor: Descriptor) -> None:
    """Writing or removing needs the write grant."""
    if not can_write(descriptor):
        raise MountDenied(f"/mounts/{mount_name} is read-only")


# ---------------------------------------------------------------------------- records


def mount_node_record(mount_name: str, descriptor: Descriptor, path: Any, node: NodeFacts | None) -> dict[str, Any]:
    """The stat record of a mount node; ``node`` is the provider's ``stat`` answer.

    ``node is None`` gives kind ``missing``, which the process reports only for a root
    the provider cannot stat; below the root a missing node is absent.
    """
    return {
        "access": descriptor["access"],
        "attached": True,
        "facts": copy.deepcopy(node["facts"]) if node is not None else {},
        "kind": node["kind"] if node is not None else "missing",
        "locality": descriptor["locality"],
        "mount": mount_name,
        "path": str(as_mount_path(path)),
        "source": descriptor["source"],
    }


def unattached_record(mount_name: str, descriptor: Descriptor) -> dict[str, Any]:
    """What a mount root reads as when no provider is attached (e.g. after restore)."""
    return {
        "access": descriptor["access"],
        "attached": False,
        "facts": {},
        "kind": descriptor["kind"],
        "locality": descriptor["locality"],
        "mount": mount_name,
        "path": "/",
        "source": descriptor["source"],
    }


def mount_stat(mount_name: str, provider: Mount, path: Any, limits: Limits | None = None) -> dict[str, Any] | None:
    """Stat a mount node for the host or guest: a record, or ``None`` if absent below the root.

    Reading below the root needs the read grant; the root itself always answers.
    """
    path = as_mount_path(path)
    descriptor = provider.descriptor()
    if not path.is_root:
        require_read(mount_name, descriptor)
    node = provider.stat(path, limits)
    if node is None and not path.is_root:
        return None
    return mount_node_record(mount_name, descriptor, path, node)


def mount_read(mount_name: str, provider: Mount, path: Any, limits: Limits | None = None) -> Any:
    """Read a mount node: a directory (or the root) reads as its record, a leaf as its content."""
    path = as_mount_path(path)
    if path.is_root:
        return mount_stat(mount_name, provider, path, limits)
    descriptor = provider.descriptor()
    require_read(mount_name, descriptor)
    node = provider.stat(path, limits)
    if node is None:
        return None
    if node["kind"] == "directory":
        return mount_node_record(mount_name, descriptor, path, node)
    return provider.read(path, limits)


def mount_discover(mount_name: str, provider: Mount, path: Any, limits: Limits | None = None) -> list[str]:
    """List a mount directory (needs the read grant)."""
    path = as_mount_path(path)
    require_read(mount_name, provider.descriptor())
    return list(provider.list(path, limits))


def mount_write(mount_name: str, provider: Mount, path: Any, value: Any, limits: Limits | None = None) -> None:
    """Write through to the provider (needs the write grant)."""
    path = as_mount_path(path)
    require_write(mount_name, provider.descriptor())
    provider.check_write(path)
    provider.write(path, value, limits)


def mount_remove(mount_name: str, provider: Mount, path: Any, limits: Limits | None = None) -> None:
    """Remove through the provider (needs the write grant)."""
    path = as_mount_path(path)
    require_write(mount_name, provider.descriptor())
    provider.check_write(path)
    provider.remove(path, limits)


# ---------------------------------------------------------------------------- providers


class Mount:
    """A mount provider. Subclass it for custom providers; use the factories for built-ins.

    ``stat`` answers ``{"kind": "directory"|"leaf", "facts": {...}}`` or ``None``;
    ``list`` the child names of a directory, sorted; ``read`` a leaf's content (or
    ``None``); ``write`` and ``remove`` are denied unless the provider allows them.
    Paths are :class:`MountPath`; ``limits`` is the calling process's :class:`Limits`.

    ``check_write`` refuses a path the provider never writes, before a write is staged.
    A process calls ``acquire`` when it starts using the provider (build, attach, fork)
    and ``release`` when it stops (detach, close, replacement), so a provider that holds
    a host resource can let it go when no process uses it any more.
    """

    def check_write(self, path: MountPath) -> None:
        """Raise ``MountDenied`` for a path this provider refuses to write or remove."""

    def acquire(self) -> None:
        """A process starts using this provider."""

    def release(self) -> None:
        """A process stops using this provider."""

    def descriptor(self) -> Descriptor:
        raise NotImplementedError

    def stat(self, path: MountPath, limits: Limits | None = None) -> NodeFacts | None:
        raise NotImplementedError

    def list(self, path: MountPath, limits: Limits | None = None) -> builtins.list[str]:
        raise NotImplementedError

    def read(self, path: MountPath, limits: Limits | None = None) -> Any:
        raise NotImplementedError

    def write(self, path: MountPath, value: Any, limits: Limits | None = None) -> None:
        raise MountDenied("mount is read-only")

    def remove(self, path: MountPath, limits: Limits | None = None) -> None:
        raise MountDenied("mount is read-only")

    # The built-in providers live in their own modules, which subclass this one; they
    # register their constructors here when ``svit.mounts`` is imported, so this module
    # needs no import of them (and no import cycle exists).

    @staticmethod
    def folder(path: Any) -> Mount:
        """A read-only view of a host directory (a ``FolderMount``)."""
        return _builtin("folder")(path, writable=False)

    @staticmethod
    def writable_folder(path: Any) -> Mount:
        """A read-write view of a host directory, text files only (a ``FolderMount``)."""
        return _builtin("folder")(path, writable=True)

    @staticmethod
    def value(source: str, value: Any) -> Mount:
        """A read-only mount over a private copy of a plain value (a ``ValueMount``)."""
        return _builtin("value")(source, value, writable=False)

    @staticmethod
    def writable_value(source: str, value: Any) -> Mount:
        """A read-write mount over a private copy of a plain value (a ``ValueMount``)."""
        return _builtin("value")(source, value, writable=True)


_BUILTIN_PROVIDERS: dict[str, Callable[..., Mount]] = {}


def register_builtin_provider(kind: str, constructor: Callable[..., Mount]) -> None:
    """Make ``constructor`` the provider behind the :class:`Mount` factories for ``kind``."""
    _BUILTIN_PROVIDERS[kind] = constructor


def _builtin(kind: str) -> Callable[..., Mount]:
    return _BUILTIN_PROVIDERS[kind]


def limits_or_default(limits: Limits | None) -> Limits:
    """The calling process's limits, or the defaults when a provider is used on its own."""
    return limits if limits is not None else Limits()

