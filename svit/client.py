"""A client of ``svit serve`` (the ``serve`` extra): svit-control@1, heads, the tree, history, mail and events.

    from svit.client import Client
    with Client("http://127.0.0.1:8470", token) as client:
        head = client.process("svit://local/team/a")
        answer = client.activate("svit://local/team/a", "plan", {"goal": "x"},
                                 expected_version=head["version"], client_id="me", request_id="turn-1")

``read``, ``discover``, ``stat`` (live or ``at`` a retained version), ``diff``, ``log``
and ``mail`` read a process (a read token suffices); ``send`` puts a user message into
its ``/inbox`` (a write token). Values come back exactly as the Python API returns them
(the server sends them tagged).

Retrying a request with the same ``client_id`` and ``request_id`` after a lost answer is
safe: the server answers from its durable receipt (``replayed: True``) instead of
committing twice. Every refusal that is not a control response (a bad token, a body too
large, ...) raises :class:`ClientError` with the server's status, code and message.
:class:`AsyncClient` is the same over ``async``/``await``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx

from .control import Activate, ControlRequest, ControlResponse, decode_response, encode_request
from .errors import SvitError
from .paths import validate_address
from .values import from_tagged

__all__ = ["AsyncClient", "Client", "ClientError", "SseParser"]

DEFAULT_TIMEOUT = 30.0


class ClientError(Exception):
    """A refusal from the server (or an answer it cannot be): HTTP status, code, message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code} (HTTP {status}): {message}")
        self.status = status
        self.code = code
        self.message = message


def _address_path(address: str) -> str:
    try:
        validate_address(address)
    except SvitError as exc:
        raise ClientError(0, "invalid_request", exc.message) from None
    return quote(address[len("svit://"):], safe="/")


def _refusal(status: int, body: bytes) -> ClientError:
    try:
        error = json.loads(body)["error"]
        return ClientError(status, str(error["code"]), str(error["message"]))
    except (ValueError, KeyError, TypeError):
        return ClientError(status, "http_error", body[:200].decode("utf-8", "replace"))


def _request(address: str, script: str, input: Any, expected_version: int, client_id: str, request_id: str | None) -> ControlRequest:
    return ControlRequest(client_id, request_id or uuid.uuid4().hex, address, expected_version, Activate(script, input))


def _control_answer(status: int, body: bytes) -> ControlResponse:
    if status != 200:
        raise _refusal(status, body)
    try:
        return decode_response(body)
    except SvitError as exc:
        raise ClientError(status, "invalid_response", exc.message) from None


def _head(status: int, body: bytes) -> dict[str, Any]:
    if status != 200:
        raise _refusal(status, body)
    try:
        value = json.loads(body)
    except ValueError:
        raise ClientError(status, "invalid_response", "the answer is not JSON") from None
    if type(value) is not dict:
        raise ClientError(status, "invalid_response", "the answer is not a JSON object")
    return value


def _events_params(from_version: int | None, threads: bool = False, thread_from: int | None = None) -> dict[str, str]:
    params = {} if from_version is None else {"from": str(from_version)}
    if threads:
        params["threads"] = "1"
    if thread_from is not None:
        params["thread_from"] = str(thread_from)
    return params


def _query(**fields: Any) -> dict[str, str]:
    return {name: str(value) for name, value in fields.items() if value is not None}


def _value(status: int, data: Any) -> Any:
    try:
        return from_tagged(data)
    except SvitError as exc:
        raise ClientError(status, "invalid_response", exc.message) from None


def _read_answer(status: int, body: bytes) -> dict[str, Any]:
    answer = _head(status, body)
    answer["value"] = _value(status, answer.get("value"))
    return answer


def _diff_answer(status: int, body: bytes) -> dict[str, Any]:
    answer = _head(status, body)
    differences = answer.get("differences")
    if type(differences) is not list:
        raise ClientError(status, "invalid_response", "a diff answer needs differences")
    for entry in differences:
        if type(entry) is not dict:
            raise ClientError(status, "invalid_response", "a difference is not a JSON object")
        for side in ("before", "after"):
            if entry.get(side) is not None:
                entry[side] = _value(status, entry[side])
    return answer


def _send_body(text: str) -> bytes:
    if type(text) is not str:
        raise ClientError(0, "invalid_request", "a message is text")
    return json.dumps({"body": text}, ensure_ascii=False).encode("utf-8")


class SseParser:
    """Server-sent events from text lines: yields ``(event, id, data)`` per dispatched event."""

    def __init__(self) -> None:
        self.event = ""
        self.id = ""
        self.data: list[str] = []

    def feed(self, line: str) -> tuple[str, str, str] | None:
        line = line.rstrip("\r\n")
        if not line:
            if not self.data:
                self.event = ""
                return None
            found = (self.event or "message", self.id, "\n".join(self.data))
            self.event, self.data = "", []
            return found
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self.event = value
        elif name == "data":
            self.data.append(value)
        elif name == "id":
            self.id = value
        return None


def _event(found: tuple[str, str, str] | None) -> tuple[str, dict[str, Any]] | None:
    if found is None or found[0] not in ("commit", "thread"):
        return None
    value = json.loads(found[2])
    return (found[0], value) if type(value) is dict else None


class Client:
    """A blocking client of one ``svit serve`` (one connection pool; close it, or use ``with``)."""

    def __init__(self, base_url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT, transport: httpx.BaseTransport | None = None) -> None:
        self._http = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None) -> None:
        self.close()

    def control(self, request: ControlRequest) -> ControlResponse:
        """Send one request; the response whatever its outcome (committed, conflict, rejected)."""
        answer = self._http.post("/v1/control", content=encode_request(request).encode("utf-8"),
                                 headers={"Content-Type": "application/json"})
        return _control_answer(answer.status_code, answer.content)

    def activate(self, address: str, script: str, input: Any = None, *, expected_version: int, client_id: str,
                 request_id: str | None = None) -> ControlResponse:
        """Run ``/lib/<script>`` at ``address`` if it is still at ``expected_version``
        (``request_id`` defaults to a fresh one: pass your own to retry safely)."""
        return self.control(_request(address, script, input, expected_version, client_id, request_id))

    def process(self, address: str) -> dict[str, Any]:
        """``{"address", "version", "root_hash"}`` of the stored head."""
        answer = self._http.get(f"/v1/processes/{_address_path(address)}")
        return _head(answer.status_code, answer.content)

    def _get(self, route: str, address: str, params: dict[str, str]) -> tuple[int, bytes]:
        answer = self._http.get(f"/v1/{route}/{_address_path(address)}", params=params)
        return answer.status_code, answer.content

    def read(self, address: str, path: str = "/", *, at: int | None = None) -> Any:
        """The value at ``path`` (as of version ``at``, else the head), exactly as
        ``DurableProcess.read`` returns it; a value over the server's answer bound is refused."""
        return _read_answer(*self._get("read", address, _query(path=path, at=at)))["value"]

    def preview(self, address: str, path: str = "/", cap: int = 64 * 1024, *, at: int | None = None) -> tuple[Any, int]:
        """``(value, bytes left out)``: text or a script's source over ``cap`` bytes is cut."""
        answer = _read_answer(*self._get("read", address, _query(path=path, at=at, cap=cap)))
        return answer["value"], int(answer.get("cut", 0))

    def discover(self, address: str, path: str = "/", *, at: int | None = None, offset: int = 0,
                 limit: int | None = None) -> dict[str, Any]:
        """``{"names", "offset", "total", "truncated", "version", ...}``: at most 200 child
        names from ``offset`` (``truncated`` when more follow)."""
        return _head(*self._get("discover", address, _query(path=path, at=at, offset=offset or None, limit=limit)))

    def stat(self, address: str, path: str = "/", *, at: int | None = None) -> dict[str, Any] | None:
        """The stat record of ``path`` (None when absent)."""
        stat: dict[str, Any] | None = _head(*self._get("stat", address, _query(path=path, at=at)))["stat"]
        return stat

    def diff(self, address: str, before: int, after: int, *, limit: int | None = None) -> dict[str, Any]:
        """``{"differences": [{"path", "kind", "before", "after"}], "total", "truncated", ...}``
        (a side over 64 KiB is cut, ``before_cut``/``after_cut`` counting the bytes left out)."""
        return _diff_answer(*self._get("diff", address, _query(**{"from": before, "to": after, "limit": limit})))

    def log(self, address: str, limit: int = 50, *, path: str | None = None) -> list[dict[str, Any]]:
        """The newest ``limit`` transactions, newest first: ``{"version", "committed_at",
        "source", "script", "output", "changed", "root_hash"}``."""
        found: list[dict[str, Any]] = _head(*self._get("log", address, _query(limit=limit, path=path)))["transactions"]
        return found

    def mail(self, address: str) -> dict[str, Any]:
        """``{"inbox", "set_aside", "outbox", "undeliverable", "waiting"}``, each ``{"items", "total"}``."""
        return _head(*self._get("mail", address, {}))

    def send(self, address: str, text: str) -> dict[str, Any]:
        """Put a user message into ``/inbox`` (one commit): ``{"address", "version", "message_id"}``."""
        answer = self._http.post(f"/v1/inbox/{_address_path(address)}", content=_send_body(text),
                                 headers={"Content-Type": "application/json"})
        return _head(answer.status_code, answer.content)

    def events(self, address: str, from_version: int | None = None) -> Iterator[dict[str, Any]]:
        """Commits of ``address`` (``{"address", "version", "root_hash", "changed",
        "source"}``) in order: every one above ``from_version``, else only new ones."""
        for _, data in self.stream(address, from_version):
            yield data

    def stream(self, address: str, from_version: int | None = None, *, threads: bool = False,
               thread_from: int | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """``("commit", data)`` as :meth:`events`, and with ``threads`` also ``("thread",
        {"session_id", "sequence", "type", "data"})`` for the current session's reasoning
        events (after sequence ``thread_from``; default: new ones)."""
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        params = _events_params(from_version, threads, thread_from)
        with self._http.stream("GET", f"/v1/events/{_address_path(address)}", params=params,
                               timeout=timeout, headers={"Accept": "text/event-stream"}) as answer:
            if answer.status_code != 200:
                raise _refusal(answer.status_code, answer.read())
            parser = SseParser()
            for line in answer.iter_lines():
                found = _event(parser.feed(line))
                if found is not None:
                    yield found

    def health(self) -> bool:
        try:
            return self._http.get("/healthz").status_code == 200
        except httpx.HTTPError:
            return False


class AsyncClient:
    """:class:`Client` over ``async``/``await`` (close it, or use ``async with``)."""

    def __init__(self, base_url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._http = httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout,
                                       transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None) -> None:
        await self.aclose()

    async def control(self, request: ControlRequest) -> ControlResponse:
        answer = await self._http.post("/v1/control", content=encode_request(request).encode("utf-8"),
                                       headers={"Content-Type": "application/json"})
        return _control_answer(answer.status_code, answer.content)

    async def activate(self, address: str, script: str, input: Any = None, *, expected_version: int, client_id: str,
                       request_id: str | None = None) -> ControlResponse:
        return await self.control(_request(address, script, input, expected_version, client_id, request_id))

    async def process(self, address: str) -> dict[str, Any]:
        answer = await self._http.get(f"/v1/processes/{_address_path(address)}")
        return _head(answer.status_code, answer.content)

    async def _get(self, route: str, address: str, params: dict[str, str]) -> tuple[int, bytes]:
        answer = await self._http.get(f"/v1/{route}/{_address_path(address)}", params=params)
        return answer.status_code, answer.content

    async def read(self, address: str, path: str = "/", *, at: int | None = None) -> Any:
        return _read_answer(*await self._get("read", address, _query(path=path, at=at)))["value"]

    async def preview(self, address: str, path: str = "/", cap: int = 64 * 1024, *, at: int | None = None) -> tuple[Any, int]:
        answer = _read_answer(*await self._get("read", address, _query(path=path, at=at, cap=cap)))
        return answer["value"], int(answer.get("cut", 0))

    async def discover(self, address: str, path: str = "/", *, at: int | None = None, offset: int = 0,
                       limit: int | None = None) -> dict[str, Any]:
        return _head(*await self._get("discover", address, _query(path=path, at=at, offset=offset or None, limit=limit)))

    async def stat(self, address: str, path: str = "/", *, at: int | None = None) -> dict[str, Any] | None:
        stat: dict[str, Any] | None = _head(*await self._get("stat", address, _query(path=path, at=at)))["stat"]
        return stat

    async def diff(self, address: str, before: int, after: int, *, limit: int | None = None) -> dict[str, Any]:
        return _diff_answer(*await self._get("diff", address, _query(**{"from": before, "to": after, "limit": limit})))

    async def log(self, address: str, limit: int = 50, *, path: str | None = None) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = _head(*await self._get("log", address, _query(limit=limit, path=path)))["transactions"]
        return found

    async def mail(self, address: str) -> dict[str, Any]:
        return _head(*await self._get("mail", address, {}))

    async def send(self, address: str, text: str) -> dict[str, Any]:
        answer = await self._http.post(f"/v1/inbox/{_address_path(address)}", content=_send_body(text),
                                       headers={"Content-Type": "application/json"})
        return _head(answer.status_code, answer.content)

    async def events(self, address: str, from_version: int | None = None) -> AsyncIterator[dict[str, Any]]:
        async for _, data in self.stream(address, from_version):
            yield data

    async def stream(self, address: str, from_version: int | None = None, *, threads: bool = False,
                     thread_from: int | None = None) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        params = _events_params(from_version, threads, thread_from)
        async with self._http.stream("GET", f"/v1/events/{_address_path(address)}", params=params,
                                     timeout=timeout, headers={"Accept": "text/event-stream"}) as answer:
            if answer.status_code != 200:
                raise _refusal(answer.status_code, await answer.aread())
            parser = SseParser()
            async for line in answer.aiter_lines():
                found = _event(parser.feed(line))
                if found is not None:
                    yield found

    async def health(self) -> bool:
        try:
            return (await self._http.get("/healthz")).status_code == 200
        except httpx.HTTPError:
            return False
