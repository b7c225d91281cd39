"""``svit serve``: processes of a store reachable over HTTP (needs the ``serve`` extra).

    from svit.server import ServeOptions, TokenSet, create_app
    app = create_app(store, TokenSet.load("tokens.json"), options=ServeOptions())

:mod:`svit.server.app` has the routes, :mod:`svit.server.tokens` the bearer tokens,
:mod:`svit.server.events` the commit streams, :mod:`svit.server.reading` the tree,
history, mail and inbox answers, and :mod:`svit.server.run` the uvicorn runner.
"""

from .app import McpApp, create_app, path_address
from .handles import HandleCache
from .mcp_mount import mcp_endpoint
from .options import DEFAULT_LISTEN_PORT, ServeOptions
from .run import LOOPBACK_HOSTS, parse_listen, serve
from .tokens import TOKENS_ENV, Forbidden, Grant, InvalidTokens, TokenSet, Unauthorized

__all__ = [
    "DEFAULT_LISTEN_PORT",
    "LOOPBACK_HOSTS",
    "TOKENS_ENV",
    "Forbidden",
    "Grant",
    "HandleCache",
    "InvalidTokens",
    "McpApp",
    "ServeOptions",
    "TokenSet",
    "Unauthorized",
    "create_app",
    "mcp_endpoint",
    "parse_listen",
    "path_address",
    "serve",
]
