"""``run_stdio``: serve one process over MCP's stdio transport until the client hangs up.

Only MCP JSON-RPC goes to stdout: while serving, the SDK's transport points file
descriptor 1 at stderr, so a stray print (ours or a library's) lands in the diagnostics.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
from mcp.server.stdio import stdio_server

from ..protocol import ProcessLike
from .server import build_server

__all__ = ["run_stdio"]


def run_stdio(open_process: Callable[[], ProcessLike], *, access: str = "write") -> None:
    """Serve the process ``open_process`` returns on stdin/stdout (blocking)."""
    server = build_server(open_process, access=access)

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(serve)
