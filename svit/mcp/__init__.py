"""A Svit process as an MCP server, on the official ``mcp`` SDK (the "serve" extra).

- :func:`build_server`: the SDK server for one process: the six model tools, the loop's
  system prompt as instructions, ``/memory`` and ``/lib`` (and the function catalogue)
  as resources.
- :func:`run_stdio`: that server on stdin/stdout (``svit mcp ADDR``).
- :class:`McpHttp`: the streamable-HTTP transport ``svit serve`` mounts at ``/mcp``.
"""

from __future__ import annotations

from .http import McpHttp
from .resources import catalogue_uri, resource_uri
from .server import build_server, instructions_for
from .stdio import run_stdio
from .tools import ReadOnlyAccess

__all__ = ["McpHttp", "ReadOnlyAccess", "build_server", "catalogue_uri", "instructions_for", "resource_uri", "run_stdio"]
