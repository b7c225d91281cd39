"""The reasoning loop: ``Svit`` (a process plus a reason/act loop), messages, tools,
bounded observers, the canonical event log, and ``AsyncSvit`` (its asyncio surface)."""

from .aio import AsyncObserver, AsyncSvit
from .builders import LoopOptions, SvitBuilder, SvitResumeBuilder
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
    ReplyTruncated,
    SetAsideNotFound,
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
    Retrying,
    SvitEvent,
    ThreadHistoryRetention,
)
from .hosting import SvitPortContext
from .messages import Message, Reply, ToolCall
from .observers import Observer
from .prompt import compose_system_prompt
from .svit import Inbox, Svit
from .tools import TOOL_SPECS, ToolSpec
from .turns import TurnOutcome, run_next_turn

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
    "LoopOptions",
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
    "ReplyTruncated",
    "Retrying",
    "SetAsideNotFound",
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
    "TurnOutcome",
    "compose_system_prompt",
    "run_next_turn",
]
