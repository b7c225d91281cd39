"""Canonical reasoning events (re-exported from :mod:`svit.thread`) and the runtime signals.

The thread data model (:class:`Event`, :class:`Checkpoint`, the :class:`EventLog`
protocol, :class:`MemoryEventLog`, :func:`read_all`, the projections) lives in
:mod:`svit.thread`, below both the loop and the store; it is re-exported here under its
old names. This module defines the runtime signals published on ``Svit.events()``
(reference §11.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..thread import (
    INPUT_MESSAGE,
    MAX_WINDOW,
    OUTPUT_MESSAGE,
    SUMMARY_HEADING,
    TOOL_COMPLETED,
    TOOL_STARTED,
    TURN_FAILED,
    Checkpoint,
    Event,
    EventLog,
    MemoryEventLog,
    Message,
    ThreadHistoryRetention,
    check_window,
    checkpoint_messages,
    message_of,
    project_messages,
    read_all,
)

__all__ = [
    "INPUT_MESSAGE",
    "OUTPUT_MESSAGE",
    "TOOL_STARTED",
    "TOOL_COMPLETED",
    "TURN_FAILED",
    "MAX_WINDOW",
    "SUMMARY_HEADING",
    "Event",
    "Checkpoint",
    "ThreadHistoryRetention",
    "EventLog",
    "MemoryEventLog",
    "check_window",
    "read_all",
    "checkpoint_messages",
    "message_of",
    "project_messages",
    "SvitEvent",
    "Committed",
    "CanonicalEvent",
    "MessageEvent",
    "Failed",
    "Retrying",
]

# ---------------------------------------------------------------------- runtime signals


class SvitEvent:
    """Base of what ``Svit.events()`` observers receive."""


@dataclass(frozen=True)
class Committed(SvitEvent):
    """The process committed a new version (paths and hashes, no values)."""

    change: Any


@dataclass(frozen=True)
class CanonicalEvent(SvitEvent):
    """One canonical reasoning record was appended to the event log."""

    event: Event


@dataclass(frozen=True)
class MessageEvent(SvitEvent):
    """The message projected from the canonical event published just before it."""

    message: Message


@dataclass(frozen=True)
class Failed(SvitEvent):
    """An inbox item was set aside after its last failed turn (``item_id`` and the
    ``error`` record say which and why), or, without an ``item_id``, the loop stopped on
    a failure outside a turn; ``text`` is a sanitized diagnostic."""

    text: str = field(default="")
    item_id: str | None = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class Retrying(SvitEvent):
    """A turn for ``item_id`` failed (``error``); the item is tried again at ``retry_at``
    (seconds since the epoch)."""

    item_id: str | None
    retry_at: float
    error: dict[str, Any] | None = None
