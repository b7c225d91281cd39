"""Conversation messages, tool calls and model replies.

:class:`Message` and :class:`ToolCall` belong to the thread data model and live in
:mod:`svit.thread` (re-exported here); :class:`Reply` is what a reasoner returns to the
loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..thread import ROLES, Message, ToolCall

__all__ = ["ROLES", "Message", "ToolCall", "Reply"]


@dataclass(frozen=True)
class Reply:
    """What a reasoner returns: tool calls to run, or (when there are none) a final text.

    ``finish_reason`` is why the model stopped, as the provider says (``"stop"``,
    ``"tool_calls"``, ``"length"``...); ``"length"`` means the reply was cut off and the
    loop does not take it as an answer. ``usage`` is the request's token counts
    (``prompt_tokens``, ``completion_tokens``, ``total_tokens``). Both are recorded with
    the turn's output event when the reasoner reports them.
    """

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None

    @property
    def is_final(self) -> bool:
        return not self.tool_calls
