"""The ``svit serve`` application: svit-control@1, commit events and MCP over HTTP.

Starlette on uvicorn: a small ASGI toolkit with no framework magic, whose routes are
plain async functions, and first-class server-sent events through sse-starlette.

Routes (addresses appear in paths as the text after ``svit://``):

* ``POST /v1/control``: one svit-control@1 request, answered with its response (HTTP
  200 for committed, conflict and rejected alike); needs ``write`` on its process_id.
* ``GET /v1/events/{address}``: the address's commits as server-sent events (``read``);
  ``?threads=1`` adds its reasoning events.
* ``GET /v1/processes/{address}``: ``{"address", "version", "root_hash"}`` (``read``).
* ``GET /v1/read/{address}?path=P[&at=V][&cap=BYTES]``, ``/v1/discover/...``,
  ``/v1/stat/...``: the tree, live or as of a retained version (``read``).
* ``GET /v1/diff/{address}?from=V1&to=V2``, ``GET /v1/log/{address}?limit=N[&path=P]``,
  ``GET /v1/mail/{address}``: differences, recent transactions, the mail lists (``read``).
* ``POST /v1/inbox/{address}`` with ``{"body": TEXT}``: a user message into ``/inbox``
  (``write``). The answers and their bounds are :mod:`svit.server.reading`'s.
* ``GET /healthz`` (liveness) and ``GET /readyz`` (the store answers), without a token.
* ``/mcp/{address}``: the MCP streamable-HTTP transport, when an MCP app is given.

Every request but the two probes is authenticated first (401), then bounded (429, 413),
then authorized for its address (403), and only then touches the store, which it does
in a worker thread, never on the event loop.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import anyio.to_thread
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..control import Committed, decode_request, encode_response
from ..errors import InvalidControlId, InvalidPath, PersistenceNotFound, SvitError
from ..paths import validate_address
from ..store import DurableProcess, ProcessStore
from . import reading
from .body import read_bounded
from .concurrency import TokenConcurrency
from .controllers import ControllerCache
from .events import CommitFeed, commit_stream, head_version
from .handles import HandleCache
from .options import ServeOptions
from .refusals import HttpRefusal, refusal_response
from .tokens import Access, Forbidden, Grant, TokenSet, Unauthorized, check

__all__ = ["McpApp", "create_app", "path_address"]

#: An event stream whose client takes nothing for this long is closed.
SEND_TIMEOUT_SECONDS = 30.0

#: The HTTP status of a Svit error the request itself caused (reading the tree, the
#: history, sending); any other store failure is 503 ``unavailable``.
REQUEST_ERRORS = {
    "invalid_path": 400,
    "invalid_value": 400,
    "persistence_not_found": 404,
    "inbox_conflict": 409,
    "persistence_conflict": 409,
    "resource_limit_exceeded": 422,
    "mount_unavailable": 422,
    "mount_denied": 422,
}

#: Answers a route computes from the durable handle at the stored head (blocking).
Answer = Callable[[DurableProcess], dict[str, Any]]


class McpApp(Protocol):
    """What the server needs of an MCP transport (``svit.mcp.McpHttp``)."""

    @property
    def app(self) -> ASGIApp: ...

    def lifespan(self) -> contextlib.AbstractAsyncContextManager[Any]: ...


def path_address(rest: str) -> str:
    """``local/team/a`` (a URL path after the route) -> ``svit://local/team/a`` (400 if invalid)."""
    address = "svit://" + rest.lstrip("/")
    try:
        return validate_address(address)
    except SvitError:
        raise HttpRefusal(400, "invalid_request", "the path does not name a process address (svit:// followed by a non-empty path)") from None


def bearer(headers: Any) -> str | None:
    value = headers.get("authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


class _Held(Response):
    """A response that gives back its token's concurrency slot once fully sent (or abandoned)."""

    def __init__(self, inner: Response, release: Callable[[], None]) -> None:
        self.inner = inner
        self.release = release
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.inner(scope, receive, send)
        finally:
            self.release()


class _Server:
    """The state the routes share."""

    def __init__(self, store: ProcessStore, tokens: TokenSet, options: ServeOptions, handles: HandleCache) -> None:
        self.store = store
        self.handles = handles
        self.tokens = tokens
        self.options = options
        self.controllers = ControllerCache(store, options.handle_cache_size, options.receipt_limit)
        self.feed = CommitFeed()
        self.concurrency = TokenConcurrency(options.max_concurrent_per_token)

    def authenticate(self, headers: Any) -> Grant:
        try:
            return self.tokens.authenticate(bearer(headers))
        except Unauthorized as exc:
            raise HttpRefusal(401, "unauthorized", str(exc)) from None

    @staticmethod
    def authorize(grant: Grant, address: str, need: Access) -> None:
        try:
            check(grant, address, need)
        except Forbidden as exc:
            raise HttpRefusal(403, "forbidden", str(exc)) from None

    async def blocking(self, function: Callable[..., Any], *args: Any) -> Any:
        """Store work in a worker thread; a store failure is a 503 naming it."""
        try:
            return await anyio.to_thread.run_sync(function, *args)
        except (PersistenceNotFound, HttpRefusal):
            raise
        except SvitError as exc:
            raise HttpRefusal(503, "unavailable", exc.message) from None

    # ------------------------------------------------------------------ routes
    async def control(self, request: Request) -> Response:
        grant = self.authenticate(request.headers)
        release = self.concurrency.acquire(grant)
        try:
            body = await read_bounded(request, self.options.max_body_bytes)
            try:
                control = decode_request(body)
            except InvalidControlId as exc:
                raise HttpRefusal(400, "invalid_control_id", exc.message) from None
            except SvitError as exc:
                raise HttpRefusal(400, "invalid_request", exc.message) from None
            self.authorize(grant, control.process_id, "write")
            answer = await self.blocking(self.controllers.execute, control)
            if isinstance(answer.outcome, Committed) and not answer.replayed:
                self.feed.notify(control.process_id)
            return Response(encode_response(answer), media_type="application/json")
        finally:
            release()

    async def events(self, request: Request) -> Response:
        grant = self.authenticate(request.headers)
        release = self.concurrency.acquire(grant)
        try:
            address = path_address(request.path_params["address"])
            self.authorize(grant, address, "read")
            start = self._start_version(request)
            threads = request.query_params.get("threads", "0")
            if threads not in ("0", "1"):
                raise HttpRefusal(400, "invalid_request", "threads must be 0 or 1")
            thread_from = self._number(request.query_params.get("thread_from"), "thread_from")
            try:
                current = await self.blocking(head_version, self.store, address)
            except PersistenceNotFound:
                raise HttpRefusal(404, "not_found", f"no process at {address}") from None
            stream = commit_stream(self.store, address, current if start is None else start, self.feed,
                                   page=self.options.events_page, poll_seconds=self.options.poll_interval_seconds,
                                   session_of=self.session_of if threads == "1" else None, thread_from=thread_from)
            response = EventSourceResponse(stream, ping=self.options.idle_ping_seconds, send_timeout=SEND_TIMEOUT_SECONDS,
                                           headers={"Cache-Control": "no-store"})
        except BaseException:
            release()
            raise
        return _Held(response, release)

    @classmethod
    def _start_version(cls, request: Request) -> int | None:
        """``Last-Event-ID`` (a reconnect) wins over ``?from=``; None: only new commits."""
        for name, text in (("Last-Event-ID", request.headers.get("last-event-id")), ("from", request.query_params.get("from"))):
            if text is not None:
                return cls._number(text, name)
        return None

    @staticmethod
    def _number(text: str | None, name: str) -> int | None:
        if text is None:
            return None
        text = text.strip()
        if not text.isascii() or not text.isdigit() or len(text) > 20 or int(text) >= 2**64:
            raise HttpRefusal(400, "invalid_request", f"{name} must be an unsigned 64-bit integer")
        return int(text)

    def session_of(self, address: str) -> str | None:
        """The current reasoning session of ``address`` (``/thread/session_id``), or None."""
        try:
            session = self.handles.open(address).read("/thread/session_id")
        except InvalidPath:  # /thread is null on a process that never ran a loop
            return None
        return session if type(session) is str and session else None

    async def process(self, request: Request) -> Response:
        grant = self.authenticate(request.headers)
        release = self.concurrency.acquire(grant)
        try:
            address = path_address(request.path_params["address"])
            self.authorize(grant, address, "read")
            head = await self.blocking(self.store.stored_head, address)
            if head is None:
                raise HttpRefusal(404, "not_found", f"no process at {address}")
            return JSONResponse({"address": address, "version": head["process_version"], "root_hash": head["root_hash"]})
        finally:
            release()

    # ------------------------------------------------------------------ the tree, history and mail
    async def _answered(self, request: Request, need: Access, parse: Callable[[Request], Answer]) -> Response:
        """Authenticate (401), bound (429), authorize (403), parse the query (400), and
        only then read the store in a worker thread."""
        grant = self.authenticate(request.headers)
        release = self.concurrency.acquire(grant)
        try:
            address = path_address(request.path_params["address"])
            self.authorize(grant, address, need)
            answer = parse(request)
            return JSONResponse(await self.answering(address, answer))
        finally:
            release()

    async def answering(self, address: str, answer: Answer) -> dict[str, Any]:
        """``answer`` over the handle at the stored head; an unknown address is 404
        ``not_found``, a request error its own code (:data:`REQUEST_ERRORS`)."""
        def run() -> dict[str, Any]:
            try:
                handle = self.handles.open(address)
            except PersistenceNotFound:
                raise HttpRefusal(404, "not_found", f"no process at {address}") from None
            return answer(handle)

        try:
            return await anyio.to_thread.run_sync(run)
        except HttpRefusal:
            raise
        except SvitError as exc:
            status = REQUEST_ERRORS.get(exc.code)
            if status is None:
                raise HttpRefusal(503, "unavailable", exc.message) from None
            raise HttpRefusal(status, exc.code, exc.message) from None

    def _bounded(self, request: Request, name: str, default: int, most: int) -> int:
        value = self._number(request.query_params.get(name), name)
        if value is None:
            return default
        if not 1 <= value <= most:
            raise HttpRefusal(400, "invalid_request", f"{name} must be 1-{most}")
        return value

    def _read(self, request: Request) -> Answer:
        path, at = request.query_params.get("path", "/"), self._number(request.query_params.get("at"), "at")
        cap = None if request.query_params.get("cap") is None else \
            self._bounded(request, "cap", 0, self.options.max_answer_bytes)
        limit = self.options.max_answer_bytes
        return lambda handle: reading.read(handle, path, at, cap, limit)

    def _discover(self, request: Request) -> Answer:
        path, at = request.query_params.get("path", "/"), self._number(request.query_params.get("at"), "at")
        offset = self._number(request.query_params.get("offset"), "offset") or 0
        limit = self._bounded(request, "limit", reading.MAX_NAMES, reading.MAX_NAMES)
        return lambda handle: reading.discover(handle, path, at, offset, limit)

    def _stat(self, request: Request) -> Answer:
        path, at = request.query_params.get("path", "/"), self._number(request.query_params.get("at"), "at")
        return lambda handle: reading.stat(handle, path, at)

    def _diff(self, request: Request) -> Answer:
        before = self._number(request.query_params.get("from"), "from")
        after = self._number(request.query_params.get("to"), "to")
        if before is None or after is None:
            raise HttpRefusal(400, "invalid_request", "a diff needs from and to (versions)")
        limit = self._bounded(request, "limit", reading.MAX_DIFFERENCES, reading.MAX_DIFFERENCES)
        return lambda handle: reading.diff(handle, before, after, limit)

    def _log(self, request: Request) -> Answer:
        limit = self._bounded(request, "limit", 50, reading.MAX_LOG)
        path = request.query_params.get("path")
        return lambda handle: reading.log(self.store, handle, limit, path)

    def _mail(self, request: Request) -> Answer:
        return lambda handle: reading.mail(self.store, handle)

    async def read(self, request: Request) -> Response:
        return await self._answered(request, "read", self._read)

    async def discover(self, request: Request) -> Response:
        return await self._answered(request, "read", self._discover)

    async def stat(self, request: Request) -> Response:
        return await self._answered(request, "read", self._stat)

    async def diff(self, request: Request) -> Response:
        return await self._answered(request, "read", self._diff)

    async def log(self, request: Request) -> Response:
        return await self._answered(request, "read", self._log)

    async def mail(self, request: Request) -> Response:
        return await self._answered(request, "read", self._mail)

    async def inbox(self, request: Request) -> Response:
        """``{"body": TEXT}``: a user message into ``/inbox``, one commit."""
        grant = self.authenticate(request.headers)
        release = self.concurrency.acquire(grant)
        try:
            address = path_address(request.path_params["address"])
            self.authorize(grant, address, "write")
            body = await read_bounded(request, self.options.max_body_bytes)
            try:
                data = json.loads(body)
            except (ValueError, RecursionError):
                raise HttpRefusal(400, "invalid_request", "the body is not JSON") from None
            if type(data) is not dict or set(data) != {"body"} or type(data["body"]) is not str:
                raise HttpRefusal(400, "invalid_request", 'the body must be {"body": TEXT}')
            text: str = data["body"]
            answer = await self.answering(address, lambda handle: reading.send(lambda: self.handles.open(address), text))
            self.feed.notify(address)
            return JSONResponse(answer)
        finally:
            release()

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        try:
            await anyio.to_thread.run_sync(self._probe)
        except Exception as exc:
            message = exc.message if isinstance(exc, SvitError) else "the store does not answer"
            return refusal_response(503, "unavailable", message)
        return JSONResponse({"status": "ready"})

    def _probe(self) -> None:
        if self.store.closed or self.store.terminal:
            raise HttpRefusal(503, "unavailable", "the store is closed or failed")
        self.store.stored_head("svit://local/readyz")

    def mcp_gate(self, inner: ASGIApp) -> ASGIApp:
        """``/mcp/{address}``: authenticated and authorized here, served by ``inner`` with
        ``svit_address`` and ``svit_access`` in the request state.

        The body is read here under ``max_body_bytes`` (413 as on the other routes) and
        handed on whole: the MCP SDK reads a request body without any bound."""

        async def gate(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await inner(scope, receive, send)
                return
            request = Request(scope, receive)
            try:
                grant = self.authenticate(request.headers)
                rest = scope["path"][len(scope.get("root_path", "")):] if scope["path"].startswith(scope.get("root_path", "")) else scope["path"]
                address = path_address(rest)
                self.authorize(grant, address, "read")
                release = self.concurrency.acquire(grant)
            except HttpRefusal as refusal:
                await refusal.response()(scope, receive, send)
                return
            try:
                try:
                    body = await read_bounded(request, self.options.max_body_bytes)
                except HttpRefusal as refusal:
                    await refusal.response()(scope, receive, send)
                    return
                state = dict(scope.get("state") or {})
                state["svit_address"] = address
                state["svit_access"] = grant.access
                await inner({**scope, "state": state}, _replaying(body, receive), send)
            finally:
                release()

        return gate


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` (already read) as the whole request, then hands
    on to ``receive`` (which then only reports the client leaving)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refused(request: Request, exc: Exception) -> Response:
    if isinstance(exc, HttpRefusal):
        return exc.response()
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 404:
        return refusal_response(404, "not_found", "no such route")
    if status == 405:
        return refusal_response(405, "invalid_request", f"{request.method} is not allowed here")
    return refusal_response(status, "invalid_request" if status < 500 else "unavailable", "the request could not be answered")


def create_app(store: ProcessStore, tokens: TokenSet, *, options: ServeOptions | None = None, mcp: McpApp | None = None,
               handles: HandleCache | None = None) -> Starlette:
    """The ASGI app serving ``store`` to the holders of ``tokens`` (``handles``: the
    cache the MCP endpoint reads through, shared so each address is resumed once)."""
    options = options or ServeOptions()
    server = _Server(store, tokens, options, handles or HandleCache(store, options.handle_cache_size))
    routes: list[Route | Mount] = [
        Route("/v1/control", server.control, methods=["POST"]),
        Route("/v1/events/{address:path}", server.events, methods=["GET"]),
        Route("/v1/processes/{address:path}", server.process, methods=["GET"]),
        Route("/v1/read/{address:path}", server.read, methods=["GET"]),
        Route("/v1/discover/{address:path}", server.discover, methods=["GET"]),
        Route("/v1/stat/{address:path}", server.stat, methods=["GET"]),
        Route("/v1/diff/{address:path}", server.diff, methods=["GET"]),
        Route("/v1/log/{address:path}", server.log, methods=["GET"]),
        Route("/v1/mail/{address:path}", server.mail, methods=["GET"]),
        Route("/v1/inbox/{address:path}", server.inbox, methods=["POST"]),
        Route("/healthz", server.healthz, methods=["GET"]),
        Route("/readyz", server.readyz, methods=["GET"]),
    ]
    if mcp is not None:
        routes.append(Mount("/mcp", app=server.mcp_gate(mcp.app)))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if mcp is not None:
                await stack.enter_async_context(mcp.lifespan())
            yield

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HttpRefusal: _refused, HTTPException: _refused, Exception: _refused})
    #: Ends every open event stream (a stopping server calls it, so it need not wait for them).
    app.state.stop_streams = server.feed.close
    return app
