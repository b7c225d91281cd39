"""``build_server``: one MCP server (the SDK's low-level ``Server``) for one process.

The server is the process as our own reason/act loop shows it to a model: the six tools
(:mod:`svit.mcp.tools`), the loop's system prompt with the process address as the
server's instructions, and the process's values as resources (:mod:`svit.mcp.resources`).

Every operation runs in a worker thread (a script may run up to its execution limit and
a durable commit waits for its synced write), so one slow call never stalls the event
loop; the process serializes its own commits. ``open_process`` is called for each
operation, so a host that replaces its handle (a resumed or reopened process) is followed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio.to_thread
import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from .._version import __version__
from ..loop.prompt import compose_system_prompt
from ..loop.tools import error_text
from ..protocol import ProcessLike
from .resources import list_resource_templates, list_resources, read_resource
from .tools import Access, call_tool, check_access, list_tools

__all__ = ["READ_ONLY_NOTE", "SERVER_NAME", "build_server", "instructions_for"]

SERVER_NAME = "svit"

#: Added to the instructions of a connection that may only read.
READ_ONLY_NOTE = "This connection may only read: discover, read and stat are available; write, remove and exec are refused."


def instructions_for(address: str, access: Access) -> str:
    """What the model is told: the loop's system prompt for ``address`` (and, read-only, why the
    changing tools are missing)."""
    text = compose_system_prompt(address, None)
    return text if access == "write" else f"{text}\n\n{READ_ONLY_NOTE}"


def _opened(open_process: Callable[[], ProcessLike]) -> ProcessLike:
    """The process, or a protocol error carrying the loop's error text (never a traceback)."""
    try:
        return open_process()
    except Exception as exc:
        raise MCPError(types.INTERNAL_ERROR, error_text(exc)) from None


def build_server(open_process: Callable[[], ProcessLike], *, access: str = "write") -> Server[Any]:
    """An SDK server for the process ``open_process`` returns, with ``access`` "write" or "read".

    ``open_process`` is called once here (its address goes into the instructions; an
    absent process fails now) and again for each tool call and resource read.
    """
    level = check_access(access)
    address = open_process().address

    async def on_list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list_tools(level))

    async def on_call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        return await anyio.to_thread.run_sync(call_tool, open_process, level, params.name, params.arguments)

    async def on_list_resources(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None,
    ) -> types.ListResourcesResult:
        cursor = params.cursor if params is not None else None
        return await anyio.to_thread.run_sync(lambda: list_resources(_opened(open_process), cursor))

    async def on_list_resource_templates(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None,
    ) -> types.ListResourceTemplatesResult:
        return list_resource_templates(address)

    async def on_read_resource(ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = params.uri
        return await anyio.to_thread.run_sync(lambda: read_resource(_opened(open_process), uri))

    return Server(
        SERVER_NAME,
        version=__version__,
        title=f"Svit process {address}",
        instructions=instructions_for(address, level),
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        on_list_resources=on_list_resources,
        on_list_resource_templates=on_list_resource_templates,
        on_read_resource=on_read_resource,
    )
