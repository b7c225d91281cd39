"""Process limits: every bound a process enforces, with defaults and hard maxima.

The field order is the order used in snapshots and in ``/system/limits`` listings
(reference §6, plus ``max_steps`` and ``max_port_calls`` from the design's §5).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from .errors import InvalidLimits

__all__ = [
    "LIMIT_FIELDS",
    "LIMIT_TABLE",
    "Limits",
]

#: (default, hard maximum) for every field, in canonical order.
LIMIT_TABLE: dict[str, tuple[int, int]] = {
    "max_execution_millis": (1_000, 60_000),
    "max_guest_memory": (8 * 1024 * 1024, 64 * 1024 * 1024),
    "max_call_stack": (64, 4_096),
    "max_value_stack": (4_096, 1_000_000),
    "max_namespace_entries": (256, 10_000),
    "max_exec_depth": (16, 64),
    "max_syntax_depth": (64, 1_024),
    "max_integer_bits": (64, 4_096),
    "max_value_depth": (32, 128),
    "max_value_entries": (10_000, 1_000_000),
    "max_text_bytes": (1024 * 1024, 64 * 1024 * 1024),
    "max_script_bytes": (64 * 1024, 1024 * 1024),
    "max_logs": (128, 10_000),
    "max_messages": (128, 10_000),
    "max_staged_scripts": (32, 10_000),
    "max_mount_entries": (4_096, 1_000_000),
    "max_mount_writes": (32, 10_000),
    "max_tree_nodes": (100_000, 10_000_000),
    "max_tree_text_bytes": (16 * 1024 * 1024, 512 * 1024 * 1024),
    "max_steps": (1_000_000, 1_000_000_000),
    "max_port_calls": (16, 64),
}

LIMIT_FIELDS: tuple[str, ...] = tuple(LIMIT_TABLE)


@dataclass(frozen=True)
class Limits:
    """Bounds for one process. Unspecified fields keep their defaults."""

    max_execution_millis: int = LIMIT_TABLE["max_execution_millis"][0]
    max_guest_memory: int = LIMIT_TABLE["max_guest_memory"][0]
    max_call_stack: int = LIMIT_TABLE["max_call_stack"][0]
    max_value_stack: int = LIMIT_TABLE["max_value_stack"][0]
    max_namespace_entries: int = LIMIT_TABLE["max_namespace_entries"][0]
    max_exec_depth: int = LIMIT_TABLE["max_exec_depth"][0]
    max_syntax_depth: int = LIMIT_TABLE["max_syntax_depth"][0]
    max_integer_bits: int = LIMIT_TABLE["max_integer_bits"][0]
    max_value_depth: int = LIMIT_TABLE["max_value_depth"][0]
    max_value_entries: int = LIMIT_TABLE["max_value_entries"][0]
    max_text_bytes: int = LIMIT_TABLE["max_text_bytes"][0]
    max_script_bytes: int = LIMIT_TABLE["max_script_bytes"][0]
    max_logs: int = LIMIT_TABLE["max_logs"][0]
    max_messages: int = LIMIT_TABLE["max_messages"][0]
    max_staged_scripts: int = LIMIT_TABLE["max_staged_scripts"][0]
    max_mount_entries: int = LIMIT_TABLE["max_mount_entries"][0]
    max_mount_writes: int = LIMIT_TABLE["max_mount_writes"][0]
    max_tree_nodes: int = LIMIT_TABLE["max_tree_nodes"][0]
    max_tree_text_bytes: int = LIMIT_TABLE["max_tree_text_bytes"][0]
    max_steps: int = LIMIT_TABLE["max_steps"][0]
    max_port_calls: int = LIMIT_TABLE["max_port_calls"][0]

    def validate(self) -> Limits:
        """Check every field is a non-negative integer within its hard maximum."""
        for name, (_default, hard_max) in LIMIT_TABLE.items():
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise InvalidLimits(f"{name} must be a non-negative integer")
            if value > hard_max:
                raise InvalidLimits("one or more limits exceed hard maxima")
        return self

    def to_dict(self) -> dict[str, int]:
        """The limits as a plain mapping in canonical field order."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Limits:
        """Build limits from untrusted data: exactly the known fields, all integers."""
        if not isinstance(data, dict):
            raise InvalidLimits("limits must be a map")
        unknown = sorted(set(data) - set(LIMIT_FIELDS))
        if unknown:
            raise InvalidLimits(f"unknown limit field: {unknown[0]}")
        missing = [name for name in LIMIT_FIELDS if name not in data]
        if missing:
            raise InvalidLimits(f"missing limit field: {missing[0]}")
        for name in LIMIT_FIELDS:
            if type(data[name]) is not int:
                raise InvalidLimits(f"{name} must be an integer")
        return cls(**{name: data[name] for name in LIMIT_FIELDS}).validate()


assert tuple(f.name for f in fields(Limits)) == LIMIT_FIELDS
