"""Conversation messages, tool calls and model replies.

A :class:`Message` is what enters ``/inbox`` (as JSON), what the reasoning loop records
in its event log, and what the outbox delivers. It is deliberately small: a role, text,
and, for the model's tool use, the calls it made or the call a result answers.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidValue

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
class Reply:
    """What a reasoner returns: tool calls to run, or (when there are none) a final text."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def is_final(self) -> bool:
        return not self.tool_calls


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


__all__ = [
    "Message",
    "ROLES",
    "Reply",
    "ToolCall",
]
