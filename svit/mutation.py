"""Typed mutations: the one description of a change to a process tree.

A commit is a list of mutations. The process applies them to build the new root, the
store records them, and resume replays them with the same :func:`apply`, so the log
reproduces the root by construction. Each class is frozen; its ``record()`` is the
plain data the store encodes (fields in a fixed order) and :func:`from_record` is the
strict inverse used on every byte read back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Union

from . import tree
from .cbor import Raw
from .errors import InvalidPersistence, InvalidValue, SvitError
from .paths import format_path, parse
from .tree import Node

__all__ = [
    "Append",
    "Mutation",
    "Remove",
    "RemoveFront",
    "Set",
    "apply",
    "apply_all",
    "apply_each",
    "check_path",
    "from_record",
    "touched_paths",
]


def _hex_hash(value: Any) -> bool:
    return type(value) is str and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


@dataclass(frozen=True, slots=True)
class Set:
    """Put ``value`` at ``path`` (a new key, or a replacement)."""

    path: str
    value: Node
    operation: ClassVar[str] = "set"

    def apply(self, root: Node) -> Node:
        return self.apply_below(root, 0)

    def apply_below(self, node: Node, depth: int) -> Node:
        return tree.set_at(node, parse(self.path)[depth:], self.value)

    def record(self) -> dict[str, Any]:
        return {"operation": "set", "path": self.path, "value": Raw(tree.node_cbor(self.value))}

    def plain(self) -> dict[str, Any]:
        return {"operation": "set", "path": self.path, "value": self.value.to_value()}


@dataclass(frozen=True, slots=True)
class Remove:
    """Remove the node at ``path``."""

    path: str
    operation: ClassVar[str] = "remove"

    def apply(self, root: Node) -> Node:
        return self.apply_below(root, 0)

    def apply_below(self, node: Node, depth: int) -> Node:
        return tree.remove_at(node, parse(self.path)[depth:])

    def record(self) -> dict[str, Any]:
        return {"operation": "remove", "path": self.path}

    def plain(self) -> dict[str, Any]:
        return {"operation": "remove", "path": self.path}


@dataclass(frozen=True, slots=True)
class Append:
    """Append ``values`` to the array at ``path`` (the inbox and the outbox)."""

    path: str
    values: tuple[Node, ...]
    operation: ClassVar[str] = "append"

    def apply(self, root: Node) -> Node:
        return self.apply_below(root, 0)

    def apply_below(self, node: Node, depth: int) -> Node:
        segments = parse(self.path)[depth:]
        target = tree.get(node, segments)
        if target is None or target.kind != "array":
            raise InvalidValue(f"append target {self.path} is not an array")
        return tree.set_at(node, segments, tree.append_items(target, self.values))

    def record(self) -> dict[str, Any]:
        return {"operation": "append", "path": self.path, "values": [Raw(tree.node_cbor(v)) for v in self.values]}

    def plain(self) -> dict[str, Any]:
        return {"operation": "append", "path": self.path, "values": [v.to_value() for v in self.values]}


@dataclass(frozen=True, slots=True)
class RemoveFront:
    """Remove the first item of the array at ``path``, which must hash to ``expected_value_hash``."""

    path: str
    expected_value_hash: str
    operation: ClassVar[str] = "remove_front"

    def apply(self, root: Node) -> Node:
        return self.apply_below(root, 0)

    def apply_below(self, node: Node, depth: int) -> Node:
        segments = parse(self.path)[depth:]
        target = tree.get(node, segments)
        if target is None or target.kind != "array" or target.size == 0:
            raise InvalidValue(f"remove_front target {self.path} is not a non-empty array")
        front = tree.get(target, ("0",))
        if front is None or front.hash != self.expected_value_hash:
            raise InvalidValue("remove_front expected value hash does not match")
        return tree.set_at(node, segments, tree.remove_at(target, ("0",)))

    def record(self) -> dict[str, Any]:
        return {"operation": "remove_front", "path": self.path, "expected_value_hash": self.expected_value_hash}

    def plain(self) -> dict[str, Any]:
        return self.record()


Mutation = Union[Set, Remove, Append, RemoveFront]

_FIELDS: dict[str, list[str]] = {
    "set": ["operation", "path", "value"],
    "remove": ["operation", "path"],
    "append": ["operation", "path", "values"],
    "remove_front": ["expected_value_hash", "operation", "path"],
}


def apply(root: Node, mutation: Mutation) -> Node:
    """``root`` with ``mutation`` applied; a mutation that does not fit raises a SvitError.

    Each class also has ``apply_below(node, depth)``: the same edit made to ``node``, the
    subtree at the first ``depth`` segments of the mutation's path (an activation keeps
    its working ``/memory`` that way; splicing the subtree back gives the same root).
    """
    return mutation.apply(root)


def apply_each(root: Node, mutations: Iterable[Mutation]) -> Node:
    """``root`` with ``mutations`` applied in order: how every commit builds its new root."""
    for mutation in mutations:
        root = mutation.apply(root)
    return root


def apply_all(root: Node, mutations: Iterable[Mutation], what: str) -> Node:
    """Replay ``mutations`` on ``root`` (no guest code runs); any failure is InvalidPersistence."""
    for index, mutation in enumerate(mutations):
        try:
            check_path(mutation.path, what)
            root = mutation.apply(root)
        except InvalidPersistence:
            raise
        except SvitError as exc:
            raise InvalidPersistence(
                f"{what}: mutation {index} ({mutation.operation} {mutation.path}) does not apply: {exc.message}"
            ) from None
    return root


def check_path(path: Any, what: str) -> tuple[str, ...]:
    """A mutation path: absolute, not the root, canonical, no empty, ``.`` or ``..`` segment."""
    try:
        segments = parse(path) if type(path) is str else None
    except SvitError:
        segments = None
    if not segments or format_path(segments) != path:
        raise InvalidPersistence(f"{what}: invalid mutation path {str(path)[:128]!r}")
    return segments


def from_record(item: Any, what: str) -> Mutation:
    """The mutation a decoded record describes; anything malformed is InvalidPersistence."""
    if type(item) is not dict or item.get("operation") not in _FIELDS:
        raise InvalidPersistence(f"{what}: malformed mutation")
    operation = item["operation"]
    if list(item) != _FIELDS[operation]:
        raise InvalidPersistence(f"{what}: malformed {operation} mutation")
    path = item["path"]
    check_path(path, what)
    try:
        if operation == "set":
            return Set(path, tree.from_decoded(item["value"]))
        if operation == "append":
            if type(item["values"]) is not list:
                raise InvalidPersistence(f"{what}: append values must be a list")
            return Append(path, tuple(tree.from_decoded(v) for v in item["values"]))
    except InvalidValue as exc:
        raise InvalidPersistence(f"{what}: invalid mutation value: {exc.detail}") from None
    if operation == "remove":
        return Remove(path)
    if not _hex_hash(item["expected_value_hash"]):
        raise InvalidPersistence(f"{what}: malformed expected_value_hash")
    return RemoveFront(path, item["expected_value_hash"])


def touched_paths(mutations: Iterable[Mutation]) -> list[str]:
    """The distinct paths ``mutations`` name, sorted."""
    return sorted({m.path for m in mutations})
