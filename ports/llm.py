"""The ``llm`` port: one nested model completion through a reasoner the host chose.

The prompt goes to the reasoner as a single user message with no tools, so the nested
call can only answer in text. The reasoner's own errors are not passed through (they may
carry provider details); the script sees ``llm request failed``.
"""

from __future__ import annotations

from typing import Any

from svit import Message, PortContext, PortDescriptor, PortError

__all__ = [
    "EMPTY_OR_TOO_LONG",
    "NESTED_SYSTEM_PROMPT",
    "PROMPT_LIMIT",
    "REQUEST_FAILED",
    "LlmPort",
]

PROMPT_LIMIT = 256 * 1024
NESTED_SYSTEM_PROMPT = "Answer the user's prompt directly and concisely. You have no tools."

EMPTY_OR_TOO_LONG = "llm prompt is empty or exceeds its limit"
REQUEST_FAILED = "llm request failed"


class LlmPort:
    """``{"prompt": str}`` (1 byte to 256 KiB) -> the completion's text."""

    def __init__(self, reasoner: Any, *, system_prompt: str = NESTED_SYSTEM_PROMPT) -> None:
        if not callable(getattr(reasoner, "complete", None)):
            raise TypeError("the llm port needs a reasoner with complete(system_prompt, messages, tools)")
        self.reasoner = reasoner
        self.system_prompt = system_prompt

    def descriptor(self) -> PortDescriptor:
        return PortDescriptor(
            description="One nested model completion: send a prompt, receive the model's text.",
            input_schema={
                "type": "object",
                "properties": {"prompt": {"type": "string", "minLength": 1}},
                "required": ["prompt"],
                "additionalProperties": False,
            },
            output="The completion text (a string).",
            effect="external",
            limits=("prompt: 1 byte to 256 KiB of UTF-8",),
        )

    def execute(self, context: PortContext, input: Any) -> Any:
        prompt = input.get("prompt") if isinstance(input, dict) else None
        if type(prompt) is not str or not 1 <= len(prompt.encode("utf-8", "surrogatepass")) <= PROMPT_LIMIT:
            raise PortError(EMPTY_OR_TOO_LONG)
        try:
            reply = self.reasoner.complete(self.system_prompt, [Message.user(prompt)], [])
        except Exception:
            raise PortError(REQUEST_FAILED) from None
        if getattr(reply, "tool_calls", None) or type(getattr(reply, "text", None)) is not str:
            raise PortError(REQUEST_FAILED)
        return reply.text
