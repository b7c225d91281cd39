"""The reasoning loop: ``Svit`` (a process plus a reason/act loop), messages, tools,
bounded observers, the canonical event log, and ``AsyncSvit`` (its asyncio surface)."""

from .aio import AsyncObserver, AsyncSvit
from .builders import SvitBuilder, SvitResumeBuilder
from .errors import (
    Closed,
    Empty,
    InboxClosed,
    InvalidThread,
    Lagged,
    MissingOutboxMessage,
    MissingReasoner,
    ObserveError,
    ReasonerFailed,
    ReasonerUnavailable,
    TurnFailed,
)
from .events import (
    CanonicalEvent,
    Checkpoint,
    Committed,
    Event,
    EventLog,
    Failed,
    MemoryEventLog,
    MessageEvent,
    SvitEvent,
    ThreadHistoryRetention,
)
from .hosting import SvitPortContext
from .messages import Message, Reply, ToolCall
from .observers import Observer
from .prompt import compose_system_prompt
from .svit import Inbox, Svit
from .tools import TOOL_SPECS, ToolSpec

__all__ = [
    "AsyncObserver",
    "AsyncSvit",
    "CanonicalEvent",
    "Checkpoint",
    "Closed",
    "Committed",
    "Empty",
    "Event",
    "EventLog",
    "Failed",
    "Inbox",
    "InboxClosed",
    "InvalidThread",
    "Lagged",
    "MemoryEventLog",
    "Message",
    "MessageEvent",
    "MissingOutboxMessage",
    "MissingReasoner",
    "ObserveError",
    "Observer",
    "ReasonerFailed",
    "ReasonerUnavailable",
    "Reply",
    "Svit",
    "SvitBuilder",
    "SvitEvent",
    "SvitPortContext",
    "SvitResumeBuilder",
    "TOOL_SPECS",
    "ThreadHistoryRetention",
    "ToolCall",
    "ToolSpec",
    "TurnFailed",
    "compose_system_prompt",
]
