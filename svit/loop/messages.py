"""Conversation messages, tool calls and model replies.

:class:`Message` and :class:`ToolCall` belong to the thread data model and live in
:mod:`svit.thread` (re-exported here); :class:`Reply` is what a reasoner returns to the
loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..thread import ROLES, Message, ToolCall

__all__ = ["ROLES", "Message", "ToolCall", "Reply"]


@dataclass(frozen=True)
class Reply:
    """What a reasoner returns: tool calls to run, or (when there are none) a final text."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def is_final(self) -> bool:
        return not self.tool_calls
