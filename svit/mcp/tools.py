"""The six model tools as MCP tools: the same specs and the same ``run_tool`` as the loop.

Nothing here restates a tool: names, descriptions and input schemas come from
:data:`svit.loop.tools.TOOL_SPECS`, and a call goes through :func:`svit.loop.tools.run_tool`,
so an MCP client sees exactly the JSON results and ``error: <code>: <message>`` texts a
model in our own loop sees. Each call is one commit or none, because each tool is.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any, Literal

import mcp.types as types

from ..errors import SvitError
from ..loop.messages import ToolCall
from ..loop.tools import TOOL_SPECS, ToolTarget, error_text, run_tool

__all__ = ["Access", "READ_TOOLS", "ReadOnlyAccess", "WRITE_TOOLS", "call_tool", "check_access", "list_tools"]

Access = Literal["read", "write"]

#: The tools that only observe the process.
READ_TOOLS: frozenset[str] = frozenset({"discover", "read", "stat"})

#: The tools that commit (a dry-run exec commits nothing, but exec is still not a read).
WRITE_TOOLS: frozenset[str] = frozenset(spec.name for spec in TOOL_SPECS) - READ_TOOLS


class ReadOnlyAccess(SvitError):
    """A change asked for over a connection that may only read."""

    code, prefix = "forbidden", "this token may only read"


def check_access(access: Any) -> Access:
    """``access`` when it is "read" or "write"; anything else is refused, never widened."""
    if access == "read":
        return "read"
    if access == "write":
        return "write"
    raise ValueError(f"access must be 'read' or 'write', not {access!r}")


def list_tools(access: Access) -> list[types.Tool]:
    """The tools a connection with ``access`` is shown, in the loop's order."""
    return [
        types.Tool(
            name=spec.name,
            description=spec.description,
            input_schema=copy.deepcopy(spec.parameters),
            annotations=types.ToolAnnotations(read_only_hint=spec.name in READ_TOOLS),
        )
        for spec in TOOL_SPECS
        if access == "write" or spec.name in READ_TOOLS
    ]


def call_tool(open_process: Callable[[], ToolTarget], access: Access, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
    """Run one tool call (blocking: call it off the event loop) and wrap its text for MCP.

    A success carries the tool's JSON as text and as structured content; a failure is a
    tool error (``isError``) whose text is the loop's error text, and it changed nothing.
    """
    if access == "read" and name in WRITE_TOOLS:
        text, ok = error_text(ReadOnlyAccess()), False
    else:
        try:
            target = open_process()
        except Exception as exc:  # a process that cannot be opened is reported like any tool failure
            text, ok = error_text(exc), False
        else:
            text, ok = run_tool(target, ToolCall("mcp", name, {} if arguments is None else arguments))
    content: list[types.ContentBlock] = [types.TextContent(text=text)]
    if not ok:
        return types.CallToolResult(content=content, is_error=True)
    return types.CallToolResult(content=content, structured_content=json.loads(text))
