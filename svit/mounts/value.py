"""The value provider: a private copy of a plain value, browsed like a directory tree."""

from __future__ import annotations

import builtins
import copy
import math
from typing import Any

from ..errors import InvalidMount, InvalidPath, InvalidValue, MountDenied, ResourceLimitExceeded
from ..limits import Limits
from .paths import MountPath, as_mount_path
from .protocol import Descriptor, Mount, NodeFacts, limits_or_default, register_builtin_provider

__all__ = ["ValueMount"]


def _plain_copy(value: Any, limits: Limits | None = None, depth: int = 0) -> Any:
    """A deep copy of a plain value, refusing anything else (``InvalidValue``).

    With ``limits``, the per-value depth bound applies as well.
    """
    if limits is not None and depth > limits.max_value_depth:
        raise InvalidValue("maximum nesting depth exceeded")
    if value is None or type(value) in (bool, int, str):
        if type(value) is int and not (-(2**63) <= value < 2**63):
            raise InvalidValue("integer outside the signed 64-bit range")
        return value
    if type(value) is float:
        if not math.isfinite(value):
            raise InvalidValue("numbers must be finite")
        return value
    if type(value) is list:
        return [_plain_copy(item, limits, depth + 1) for item in value]
    if type(value) is dict:
        if any(type(key) is not str for key in value):
            raise InvalidValue("map keys must be text")
        return {key: _plain_copy(value[key], limits, depth + 1) for key in sorted(value)}
    raise InvalidValue(f"unsupported value kind: {type(value).__name__}")


def _value_facts(node: Any) -> NodeFacts:
    if isinstance(node, dict):
        return {"facts": {"content": "object", "entries": len(node)}, "kind": "directory"}
    if isinstance(node, list):
        return {"facts": {"content": "array", "entries": len(node)}, "kind": "directory"}
    if isinstance(node, str):
        return {"facts": {"bytes": len(node.encode("utf-8")), "content": "text/plain"}, "kind": "leaf"}
    return {"facts": {"content": "scalar"}, "kind": "leaf"}


def _array_index(segment: str) -> int:
    if not segment.isascii() or not segment.isdigit():
        raise InvalidPath(f"array index must be a non-negative decimal: {segment}")
    return int(segment)


class ValueMount(Mount):
    """A private copy of a plain value; maps and arrays are directories, the rest leaves.

    Array children are listed in index order (``"0".."n-1"``), as committed arrays are.
    """

    def __init__(self, source: Any, value: Any, writable: bool) -> None:
        if type(source) is not str:
            raise InvalidMount("mount source must be text")
        self.source = source
        self.writable = writable
        self._value = _plain_copy(value)

    def descriptor(self) -> Descriptor:
        return {
            "access": "read-write" if self.writable else "read",
            "kind": "value",
            "locality": "cache",
            "source": self.source,
        }

    def _lookup(self, segments: tuple[str, ...]) -> tuple[bool, Any]:
        node = self._value
        for segment in segments:
            if isinstance(node, dict):
                if segment not in node:
                    return False, None
                node = node[segment]
            elif isinstance(node, list):
                index = _array_index(segment)
                if index >= len(node):
                    return False, None
                node = node[index]
            else:
                raise InvalidPath("mount path walks through a scalar")
        return True, node

    def stat(self, path: MountPath, limits: Limits | None = None) -> NodeFacts | None:
        found, node = self._lookup(as_mount_path(path).segments)
        return _value_facts(node) if found else None

    def list(self, path: MountPath, limits: Limits | None = None) -> builtins.list[str]:
        path = as_mount_path(path)
        found, node = self._lookup(path.segments)
        if found and isinstance(node, dict):
            names = sorted(node)
        elif found and isinstance(node, list):
            names = [str(i) for i in range(len(node))]
        else:
            raise InvalidPath(f"{path} is not a mount directory")
        if len(names) > limits_or_default(limits).max_mount_entries:
            raise ResourceLimitExceeded("mount entries")
        return names

    def read(self, path: MountPath, limits: Limits | None = None) -> Any:
        found, node = self._lookup(as_mount_path(path).segments)
        if not found:
            return None
        if isinstance(node, str) and len(node.encode("utf-8")) > limits_or_default(limits).max_text_bytes:
            raise ResourceLimitExceeded("mount leaf bytes")
        return copy.deepcopy(node)

    def _parent(self, path: MountPath) -> tuple[Any, str]:
        if path.is_root:
            raise InvalidPath("cannot change a mount root")
        found, parent = self._lookup(path.segments[:-1])
        if not found or not isinstance(parent, (dict, list)):
            raise InvalidPath(f"{path.parent()} is not an existing mount directory")
        return parent, path.segments[-1]

    def write(self, path: MountPath, value: Any, limits: Limits | None = None) -> None:
        """Insert or replace a map key, or replace an existing array index."""
        if not self.writable:
            raise MountDenied("mount is read-only")
        path = as_mount_path(path)
        parent, key = self._parent(path)
        new = _plain_copy(value, limits_or_default(limits))
        if isinstance(parent, dict):
            parent[key] = new
            return
        index = _array_index(key)
        if index >= len(parent):
            raise InvalidPath(f"{path} is past the end of the array")
        parent[index] = new

    def remove(self, path: MountPath, limits: Limits | None = None) -> None:
        """Delete a map key or an array element (later elements shift down)."""
        if not self.writable:
            raise MountDenied("mount is read-only")
        path = as_mount_path(path)
        parent, key = self._parent(path)
        if isinstance(parent, dict):
            if key not in parent:
                raise InvalidPath(f"{path} does not exist")
            del parent[key]
            return
        index = _array_index(key)
        if index >= len(parent):
            raise InvalidPath(f"{path} does not exist")
        del parent[index]



register_builtin_provider("value", ValueMount)
