"""The MCP endpoint ``svit serve`` mounts at ``/mcp/{address}``: the six model tools of
every process the store holds, over the streamable-HTTP transport (:class:`svit.mcp.McpHttp`).

The server authenticates and authorizes each request before this app sees it; the
handles come from a :class:`~svit.server.handles.HandleCache`, so a tool call always
starts at the stored head.
"""

from __future__ import annotations

from ..mcp import McpHttp
from ..store import ProcessStore
from .handles import HandleCache
from .options import ServeOptions

__all__ = ["mcp_endpoint"]


def mcp_endpoint(store: ProcessStore, options: ServeOptions | None = None, handles: HandleCache | None = None) -> McpHttp:
    handles = handles or HandleCache(store, (options or ServeOptions()).handle_cache_size)
    return McpHttp(handles.open)
