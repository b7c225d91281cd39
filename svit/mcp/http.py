"""``McpHttp``: the MCP streamable-HTTP transport for every process a server can reach.

The server's auth middleware decides who may reach what and says so in the ASGI scope:
``scope["state"]["svit_address"]`` (the process) and ``scope["state"]["svit_access"]``
("read" or "write"). Without both, this app refuses with 403: it never serves a request
nobody authenticated.

Why one SDK server per (address, access), each with its own stateless session manager,
kept in a bounded least-recently-used map:

- The instructions a client receives name the process address, and a read-only
  connection is shown only the reading tools. Both are fixed per SDK server (the
  handshake and ``server/discover`` answer from the server's own fields), so a single
  shared server would need request-context tricks to vary them; one server per
  (address, access) makes them plain facts.
- Stateless mode keeps nothing between requests: every POST is authenticated by the
  server's middleware on its own, no session id can be replayed under another token or
  another address, nothing leaks when a client disappears, and evicting an idle entry
  from the map loses no client state (the next request builds a fresh one). Our tools
  need nothing stateful: no server-to-client requests, no resumable streams.
- Replies are plain JSON (no SSE stream per POST): every tool answers once.

Each session manager runs inside this object's task group (entered by :meth:`lifespan`),
started when its entry is created and stopped when an idle entry is evicted, so the
number of live managers stays at most ``max_servers``.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import PersistenceNotFound, SvitError, sanitize
from ..protocol import ProcessLike
from ..redact import redact
from .server import build_server
from .tools import Access, check_access

__all__ = ["DEFAULT_MAX_SERVERS", "McpHttp", "error_response"]

#: How many (address, access) servers are kept ready at once.
DEFAULT_MAX_SERVERS = 64

ADDRESS_KEY = "svit_address"
ACCESS_KEY = "svit_access"


async def error_response(send: Send, status: int, code: str, message: str) -> None:
    """An HTTP refusal in the protocol's error shape."""
    body = json.dumps({"error": {"code": code, "message": message}}, ensure_ascii=False).encode("utf-8")
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode("ascii"))],
    })
    await send({"type": "http.response.body", "body": body})


@dataclass
class _Entry:
    """One ready SDK server: its session manager, how many requests it serves, how to stop it."""

    manager: StreamableHTTPSessionManager
    stop: anyio.Event = field(default_factory=anyio.Event)
    in_flight: int = 0


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


async def _run_manager(manager: StreamableHTTPSessionManager, stop: anyio.Event, *, task_status: anyio.abc.TaskStatus[None]) -> None:
    async with manager.run():
        task_status.started()
        await stop.wait()


class McpHttp:
    """The streamable-HTTP MCP endpoint; mount :attr:`app` and enter :meth:`lifespan`.

    ``resolve(address)`` returns the process to serve; it is called when a server for the
    address is built and again for each tool call and resource read.
    """

    def __init__(self, resolve: Callable[[str], ProcessLike], *, max_servers: int = DEFAULT_MAX_SERVERS) -> None:
        if type(max_servers) is not int or max_servers < 1:
            raise ValueError("max_servers must be a positive integer")
        self._resolve = resolve
        self._max_servers = max_servers
        self._entries: OrderedDict[tuple[str, Access], _Entry] = OrderedDict()
        self._task_group: anyio.abc.TaskGroup | None = None
        self._lock: anyio.Lock | None = None

    @property
    def app(self) -> ASGIApp:
        """The ASGI application (for ``/mcp/{address}``)."""
        return self._handle

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Run the session managers for as long as the server runs."""
        if self._task_group is not None:
            raise RuntimeError("McpHttp.lifespan() is already running")
        async with anyio.create_task_group() as group:
            self._task_group, self._lock = group, anyio.Lock()
            try:
                yield
            finally:
                self._task_group = None
                for entry in self._entries.values():
                    entry.stop.set()
                self._entries.clear()

    @property
    def ready_servers(self) -> int:
        """How many (address, access) servers are live now (at most ``max_servers``)."""
        return len(self._entries)

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # the transport is plain HTTP
            await send({"type": "websocket.close", "code": 1003})
            return
        if scope["type"] != "http":
            return
        state = scope.get("state")
        address = state.get(ADDRESS_KEY) if isinstance(state, dict) else None
        access = state.get(ACCESS_KEY) if isinstance(state, dict) else None
        if type(address) is not str or access not in ("read", "write"):
            await error_response(send, 403, "forbidden", "this endpoint is only served to an authenticated request")
            return
        try:
            entry = await self._acquire(address, check_access(access))
        except _Refused as refusal:
            await error_response(send, refusal.status, refusal.code, refusal.message)
            return
        try:
            await entry.manager.handle_request(scope, receive, send)
        finally:
            entry.in_flight -= 1

    async def _acquire(self, address: str, access: Access) -> _Entry:
        """The entry serving (address, access), built on first use; counted as in flight.

        The build (opening the process, in a worker thread) runs outside the lock, so a
        process that is slow to open holds up only the requests for it, never those for
        servers already ready; two requests building the same key at once keep the first
        entry stored."""
        lock = self._lock
        if self._task_group is None or lock is None:
            raise _Refused(503, "unavailable", "the MCP endpoint is not running")
        key = (address, access)
        async with lock:
            entry = self._ready(key)
            if entry is not None:
                return entry
            self._check_room()
        server = await self._build(address, access)  # a refused build evicts nothing
        async with lock:
            entry = self._ready(key)
            if entry is not None:
                return entry
            group = self._task_group
            if group is None:
                raise _Refused(503, "unavailable", "the MCP endpoint is not running")
            self._check_room()
            if len(self._entries) >= self._max_servers:
                self._evict_one()
            entry = _Entry(StreamableHTTPSessionManager(server, stateless=True, json_response=True))
            await group.start(_run_manager, entry.manager, entry.stop)
            entry.in_flight += 1
            self._entries[key] = entry
            return entry

    def _ready(self, key: tuple[str, Access]) -> _Entry | None:
        """The live entry of ``key`` counted as in flight, or None (under the lock)."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            entry.in_flight += 1
        return entry

    def _check_room(self) -> None:
        """Refuse (503) when every live server is serving and no more may start (under the lock)."""
        if len(self._entries) >= self._max_servers and all(other.in_flight for other in self._entries.values()):
            raise _Refused(503, "unavailable", "too many processes are being served over MCP at once; retry later")

    def _evict_one(self) -> None:
        """Stop the least recently used idle server."""
        for key, entry in self._entries.items():
            if entry.in_flight == 0:
                del self._entries[key]
                entry.stop.set()
                return

    async def _build(self, address: str, access: Access) -> Server[Any]:
        def build() -> Server[Any]:
            return build_server(lambda: self._resolve(address), access=access)

        try:
            return await anyio.to_thread.run_sync(build)
        except PersistenceNotFound as exc:
            raise _Refused(404, "not_found", exc.message) from None
        except SvitError as exc:
            raise _Refused(400, "invalid_request", exc.message) from None
        except Exception as exc:
            detail = sanitize(redact(str(exc).replace("\n", " "))) or type(exc).__name__
            raise _Refused(503, "unavailable", f"the process could not be opened: {detail[:200]}") from None
