"""The thread data model: conversation messages and the canonical reasoning events.

A :class:`Message` is what enters ``/inbox`` (as JSON), what the reasoning loop records
in its event log, and what the outbox delivers: a role, text, and, for the model's tool
use, the calls it made or the call a result answers.

Reasoning history is not process state (reference §10.8): the loop appends one event per
conversation fact (an input message, an agent message, a tool call and its result, a
failed turn) to an :class:`EventLog`, partitioned by process address and session id.
Messages are a projection of those events. :class:`MemoryEventLog` is the in-memory
implementation; the durable one (:class:`svit.store.events.StoreEventLog`) provides the
same three methods.

Thread-history retention (reference §10.8) is optional on a log: a
:class:`Checkpoint` records that events ``1..through`` of a session are summarised by a
host-chosen payload, and a log that can also cut lets a host drop the summarised prefix.
After a cut, :meth:`EventLog.events` starts at the first retained sequence, so callers
page by the last sequence they saw (:func:`read_all`), never by a count.

This module depends on nothing but :mod:`svit.errors`, so the store (which keeps the
durable log) and the loop (which writes it) both build on it without depending on each
other.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol, runtime_checkable

from .errors import InvalidValue, SvitError

__all__ = [
    "INPUT_MESSAGE",
    "OUTPUT_MESSAGE",
    "TOOL_STARTED",
    "TOOL_COMPLETED",
    "TURN_FAILED",
    "MAX_WINDOW",
    "ROLES",
    "SUMMARY_HEADING",
    "ToolCall",
    "Message",
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
]

ROLES = ("user", "agent", "tool")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass(frozen=True)
class ToolCall:
    """One tool invocation requested by the model.

    ``arguments`` is the decoded JSON object; when a model sent something that is not a
    JSON object it stays as the raw text so the tool can report the problem to the model.
    """

    id: str
    name: str
    arguments: Any = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"arguments": self.arguments, "id": self.id, "name": self.name}

    @classmethod
    def from_json(cls, value: Any) -> ToolCall:
        if not isinstance(value, dict) or type(value.get("id")) is not str or type(value.get("name")) is not str:
            raise InvalidValue("a tool call needs text id and name")
        return cls(value["id"], value["name"], value.get("arguments", {}))


@dataclass(frozen=True)
class Message:
    """One conversation message (user input, agent output, or a tool result)."""

    role: str
    text: str
    id: str = field(default_factory=lambda: _new_id("msg"))
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise InvalidValue(f"message role must be one of {', '.join(ROLES)}")
        if type(self.text) is not str:
            raise InvalidValue("message text must be a string")
        if type(self.id) is not str or not self.id:
            raise InvalidValue("message id must be non-empty text")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def user(cls, text: str, *, id: str | None = None) -> Message:
        return cls("user", text, id or _new_id("msg"))

    @classmethod
    def agent(cls, text: str, tool_calls: tuple[ToolCall, ...] | list[ToolCall] = (), *, id: str | None = None) -> Message:
        return cls("agent", text, id or _new_id("msg"), tuple(tool_calls))

    @classmethod
    def tool_result(cls, call: ToolCall, text: str, *, id: str | None = None) -> Message:
        return cls("tool", text, id or _new_id("msg"), (), call.id, call.name)

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict[str, Any]:
        """The JSON stored in ``/inbox`` and in the event log (plain Svit values only)."""
        value: dict[str, Any] = {
            "content": [{"text": self.text, "type": "text"}],
            "id": self.id,
            "role": self.role,
        }
        if self.tool_calls:
            value["tool_calls"] = [call.to_json() for call in self.tool_calls]
        if self.tool_call_id is not None:
            value["tool_call_id"] = self.tool_call_id
            value["tool_name"] = self.tool_name
        return value

    @classmethod
    def from_json(cls, value: Any) -> Message:
        if not isinstance(value, dict):
            raise InvalidValue("a message must be a map")
        content = value.get("content")
        if not isinstance(content, list):
            raise InvalidValue("message content must be a list of parts")
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or type(part.get("text")) is not str:
                raise InvalidValue("only text message parts are supported")
            texts.append(part["text"])
        calls = tuple(ToolCall.from_json(call) for call in value.get("tool_calls", []) or [])
        return cls(
            role=value.get("role"),  # type: ignore[arg-type]  # checked in __post_init__
            text="".join(texts),
            id=value.get("id"),  # type: ignore[arg-type]
            tool_calls=calls,
            tool_call_id=value.get("tool_call_id"),
            tool_name=value.get("tool_name"),
        )

    def json_payload(self) -> Any:
        """A tool result's text parsed as JSON when it looks like JSON, else the text."""
        stripped = self.text.strip()
        if stripped[:1] in ("{", "["):
            try:
                return json.loads(stripped)
            except ValueError:
                pass
        return self.text


INPUT_MESSAGE = "input.message"
OUTPUT_MESSAGE = "output.message.completed"
TOOL_STARTED = "tool.call.started"
TOOL_COMPLETED = "tool.call.completed"
TURN_FAILED = "turn.failed"

MAX_WINDOW = 4096


@dataclass(frozen=True)
class Event:
    """One canonical record; ``sequence`` starts at 1 per (process, session), never reused."""

    sequence: int
    process_id: str
    session_id: str
    type: str
    data: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "data": self.data,
            "process_id": self.process_id,
            "sequence": self.sequence,
            "session_id": self.session_id,
            "type": self.type,
        }


@dataclass(frozen=True)
class Checkpoint:
    """A compaction checkpoint: events ``1..through`` of a session are summarised by ``summary``.

    ``summary`` is plain JSON-like data chosen by whoever compacted. The reasoning loop
    reads ``{"text": ...}``, a bare string, or ``{"messages": [<message JSON>, ...]}``
    (see :func:`checkpoint_messages`).
    """

    process_id: str
    session_id: str
    through: int
    summary: Any

    def to_json(self) -> dict[str, Any]:
        return {
            "process_id": self.process_id,
            "session_id": self.session_id,
            "summary": self.summary,
            "through": self.through,
        }


@runtime_checkable
class ThreadHistoryRetention(Protocol):
    """Retention of one process's reasoning history (a durable handle offers it).

    ``retained_from`` is the first retained sequence (1 when nothing was cut),
    ``compacted_through`` the highest checkpoint boundary (0 when none), and
    ``cut_thread_events`` drops events ``1..through`` once a checkpoint covers them.
    """

    def retained_from(self, session: str) -> int: ...

    def compacted_through(self, session: str) -> int: ...

    def cut_thread_events(self, session: str, through: int) -> int: ...


@runtime_checkable
class EventLog(Protocol):
    """Where canonical reasoning events live (in memory here; durable elsewhere)."""

    def append(self, process_id: str, session_id: str, type: str, data: dict[str, Any]) -> Event: ...

    def events(self, process_id: str, session_id: str, after: int = 0, limit: int = MAX_WINDOW) -> list[Event]: ...

    def recent(self, process_id: str, session_id: str, limit: int) -> list[Event]: ...


def check_window(limit: int) -> int:
    if type(limit) is not int or not 1 <= limit <= MAX_WINDOW:
        raise InvalidValue(f"event window must be between 1 and {MAX_WINDOW}")
    return limit


class MemoryEventLog:
    """An in-process :class:`EventLog`; lost with the host, shareable between Svit instances."""

    def __init__(self) -> None:
        self._partitions: dict[tuple[str, str], list[Event]] = {}
        self._lock = threading.Lock()

    def append(self, process_id: str, session_id: str, type: str, data: dict[str, Any]) -> Event:
        with self._lock:
            partition = self._partitions.setdefault((process_id, session_id), [])
            event = Event(len(partition) + 1, process_id, session_id, type, data)
            partition.append(event)
            return event

    def events(self, process_id: str, session_id: str, after: int = 0, limit: int = MAX_WINDOW) -> list[Event]:
        check_window(limit)
        with self._lock:
            partition = self._partitions.get((process_id, session_id), [])
            start = max(after, 0)
            return partition[start : start + limit]

    def recent(self, process_id: str, session_id: str, limit: int) -> list[Event]:
        check_window(limit)
        with self._lock:
            return list(self._partitions.get((process_id, session_id), [])[-limit:])

    def all_events(self, process_id: str, session_id: str) -> list[Event]:
        """Every event of one partition, paging through :meth:`events`."""
        return read_all(self, process_id, session_id)


def read_all(log: EventLog, process_id: str, session_id: str, after: int = 0) -> list[Event]:
    """Every retained event with sequence > ``after`` (any :class:`EventLog`).

    Pages continue from the last sequence seen: after a cut the first retained event
    is not sequence 1, so a count of events read is not a position.
    """
    found: list[Event] = []
    while True:
        page = log.events(process_id, session_id, after=found[-1].sequence if found else after, limit=MAX_WINDOW)
        found.extend(page)
        if len(page) < MAX_WINDOW:
            return found


SUMMARY_HEADING = "Summary of the conversation so far (events 1-{through}, compacted):"


def checkpoint_messages(checkpoint: Checkpoint) -> list[Message]:
    """The messages a checkpoint stands for at the head of a conversation.

    ``{"messages": [...]}`` gives those messages verbatim (the compacted conversation);
    ``{"text": t}`` or a bare string ``t`` gives one user message: a fixed heading
    naming the covered sequences, a blank line, then ``t``, with the stable id
    ``checkpoint-<through>`` so the projection is the same on every read. Any other
    shape (a host may record any plain data) is shown the same way as its canonical
    JSON text: the loop never guesses what a summary means, and never refuses to show
    one, which would leave an agent whose history was cut unable to take a turn.
    """
    summary = checkpoint.summary
    if type(summary) is dict and list(summary) == ["messages"] and type(summary["messages"]) is list:
        try:
            return [Message.from_json(item) for item in summary["messages"]]
        except SvitError:
            pass  # not messages after all: shown as data below
    if type(summary) is dict and list(summary) == ["text"] and type(summary["text"]) is str:
        summary = summary["text"]
    if type(summary) is not str:
        try:
            summary = json.dumps(summary, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError):
            raise InvalidValue("a checkpoint summary must be plain JSON-like data") from None
    heading = SUMMARY_HEADING.format(through=checkpoint.through)
    return [Message.user(f"{heading}\n\n{summary}", id=f"checkpoint-{checkpoint.through}")]


def message_of(event: Event) -> Message | None:
    """The message an event projects to (input, agent output, tool result), if any."""
    if event.type in (INPUT_MESSAGE, OUTPUT_MESSAGE):
        return Message.from_json(event.data["message"])
    if event.type == TOOL_COMPLETED:
        return Message.from_json(event.data["result"])
    return None


def project_messages(events: Iterable[Event], *, skip_failed_turns: bool = False) -> list[Message]:
    """Messages in event order; optionally without the turns that failed (for a retry)."""
    events = list(events)
    failed = {e.data.get("turn_id") for e in events if e.type == TURN_FAILED} if skip_failed_turns else set()
    messages = []
    for event in events:
        if failed and event.data.get("turn_id") in failed:
            continue
        message = message_of(event)
        if message is not None:
            messages.append(message)
    return messages
