"""Running the app on uvicorn: one line once listening, a clean stop on SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

import uvicorn

from ..store import ProcessStore
from .app import McpApp, create_app
from .handles import HandleCache
from .mcp_mount import mcp_endpoint
from .options import ServeOptions
from .tokens import TokenSet

__all__ = ["LOOPBACK_HOSTS", "parse_listen", "serve"]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
#: Open event streams get this long to end after a stop signal.
GRACEFUL_SECONDS = 5


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> ``(host, port)``; ValueError naming the problem."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"--listen must be HOST:PORT, not {text[:80]!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isascii() or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen port must be 0-65535, not {port[:20]!r}")
    return host, int(port)


class _Server(uvicorn.Server):
    """Stops on SIGTERM/SIGINT like uvicorn, but returns instead of re-raising the signal,
    so the caller closes the store and exits 0; open event streams are ended at once
    rather than waited for."""

    def __init__(self, config: uvicorn.Config, stop_streams: Callable[[], None]) -> None:
        super().__init__(config)
        self.stop_streams = stop_streams
        self.loop: asyncio.AbstractEventLoop | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.stop_streams)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def serve(store: ProcessStore, tokens: TokenSet, host: str, port: int, *, options: ServeOptions | None = None,
          mcp: McpApp | None = None, announce: Callable[[str], None] | None = None) -> None:
    """Serve until a stop signal; ``announce`` gets ``svit: serving http://HOST:PORT`` once
    the socket listens (default: stdout, flushed). ``mcp`` defaults to the store's MCP
    endpoint (:func:`~svit.server.mcp_mount.mcp_endpoint`). The caller closes the store."""
    handles = HandleCache(store, (options or ServeOptions()).handle_cache_size)
    app = create_app(store, tokens, options=options, mcp=mcp or mcp_endpoint(store, options, handles), handles=handles)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=GRACEFUL_SECONDS, server_header=False)
    server = _Server(config, app.state.stop_streams)

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    async def run() -> None:
        server.loop = asyncio.get_running_loop()
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started:
            bound = server.servers[0].sockets[0].getsockname()
            shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
            (announce or say)(f"svit: serving http://{shown}:{bound[1]}")
        await task

    asyncio.run(run())
    if not server.started:
        raise OSError(f"cannot listen on {host}:{port}")
