"""``McpHttp`` on a real HTTP server (uvicorn on 127.0.0.1), driven by the official SDK client.

A tiny Starlette app stands in for the server's auth middleware: under ``/w`` it grants
write access to the address in the rest of the path, under ``/r`` read access, under
``/half`` only the address, and under ``/anon`` nothing at all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from svit.loop.prompt import compose_system_prompt
from svit.mcp import McpHttp
from svit.mcp.server import READ_ONLY_NOTE
from svit.process import Process
from svit.protocol import ProcessLike
from svit.store import ProcessStore
from tests.mcp.scenario import (
    check_failed_exec,
    check_instructions,
    check_resources,
    check_tools,
    check_writes_and_execs,
    ok_json,
    read_value,
    text_of,
)

ADDRESS = "svit://local/me/notes"
PATH = "local/me/notes"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


class Grant:
    """Sets the two scope-state keys the server's auth middleware sets (or only some of them)."""

    def __init__(self, app: ASGIApp, access: str | None, *, with_address: bool = True) -> None:
        self.app, self.access, self.with_address = app, access, with_address

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path, root = scope["path"], scope.get("root_path", "")
            rest = path[len(root):] if root and path.startswith(root) else path
            state = scope.setdefault("state", {})
            if self.with_address:
                state["svit_address"] = "svit://" + rest.strip("/")
            if self.access is not None:
                state["svit_access"] = self.access
        await self.app(scope, receive, send)


class Processes:
    """One durable handle per address (a second handle would make the first one stale)."""

    def __init__(self, store: ProcessStore) -> None:
        self.store = store
        self.handles: dict[str, ProcessLike] = {}
        self.lock = threading.Lock()

    def resolve(self, address: str) -> ProcessLike:
        with self.lock:
            if address not in self.handles:
                self.handles[address] = self.store.resume(address)
            return self.handles[address]


@contextmanager
def serving(processes: Processes, *, max_servers: int = 8) -> Iterator[tuple[str, McpHttp]]:
    endpoint = McpHttp(processes.resolve, max_servers=max_servers)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with endpoint.lifespan():
            yield

    app = Starlette(routes=[
        Mount("/w", app=Grant(endpoint.app, "write")),
        Mount("/r", app=Grant(endpoint.app, "read")),
        Mount("/odd", app=Grant(endpoint.app, "admin")),
        Mount("/half", app=Grant(endpoint.app, None)),
        Mount("/anon", app=endpoint.app),
    ], lifespan=lifespan)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the test server did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", endpoint
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    store = ProcessStore.open(tmp_path / "store")
    for address in (ADDRESS, "svit://local/me/a", "svit://local/me/b", "svit://local/me/c"):
        store.create(Process.builder(address).build())
    try:
        yield Processes(store)
    finally:
        store.close()


async def run_session(url: str, body: Any) -> Any:
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            with anyio.fail_after(30):
                return await body(session)


def test_a_write_session_commits_and_a_failed_exec_changes_nothing(processes: Processes) -> None:
    with serving(processes) as (base, _endpoint):
        async def scenario(session: ClientSession) -> int:
            init = await session.initialize()
            check_instructions(init.instructions, ADDRESS)
            await check_tools(session)
            version = await check_writes_and_execs(session)
            await check_failed_exec(session, ADDRESS)
            await check_resources(session, ADDRESS)
            return version + 1

        committed = anyio.run(run_session, f"{base}/w/{PATH}", scenario)

        async def modern(session: ClientSession) -> tuple[Any, int]:  # the 2026 era: server/discover, no handshake
            found = await session.discover()
            check_instructions(found.instructions, ADDRESS)
            return await read_value(session, "/memory/total")

        assert anyio.run(run_session, f"{base}/w/{PATH}", modern) == (42, committed)
    assert processes.store.resume(ADDRESS).version == committed  # durable in the store


def test_read_access_lists_only_the_reading_tools_and_refuses_changes(processes: Processes) -> None:
    with serving(processes) as (base, _endpoint):
        async def seed(session: ClientSession) -> tuple[Any, int]:
            await session.initialize()
            ok_json(await session.call_tool("write", {"path": "/memory/notes", "value": "kept"}))
            return await read_value(session, "/memory/notes")

        before = anyio.run(run_session, f"{base}/w/{PATH}", seed)

        async def reader(session: ClientSession) -> None:
            init = await session.initialize()
            assert init.instructions == f"{compose_system_prompt(ADDRESS, None)}\n\n{READ_ONLY_NOTE}"
            await check_tools(session, ("discover", "read", "stat"))
            refusals = [
                await session.call_tool("write", {"path": "/memory/notes", "value": "changed"}),
                await session.call_tool("remove", {"path": "/memory/notes"}),
                await session.call_tool("exec", {"source": '(define (main input) (write "/memory/notes" 1))'}),
            ]
            for refusal in refusals:
                assert refusal.is_error
                assert text_of(refusal) == "error: forbidden: this token may only read"
            assert await read_value(session, "/memory/notes") == before
            assert ok_json(await session.call_tool("discover", {"path": "/memory"}))["entries"] == ["notes"]
            assert (await session.read_resource(f"{ADDRESS}#/memory/notes")).contents[0].text == '"kept"'

        anyio.run(run_session, f"{base}/r/{PATH}", reader)
    assert processes.store.resume(ADDRESS).read_versioned("/memory/notes") == before


def test_a_request_without_both_grant_keys_is_refused(processes: Processes) -> None:
    with serving(processes) as (base, _endpoint):
        for prefix in ("anon", "half", "odd"):
            reply = httpx.post(f"{base}/{prefix}/{PATH}", json=INITIALIZE, headers=HEADERS, timeout=10)
            assert reply.status_code == 403
            assert reply.json() == {"error": {
                "code": "forbidden", "message": "this endpoint is only served to an authenticated request"}}

        async def refused(session: ClientSession) -> None:
            await session.initialize()

        with pytest.raises(BaseExceptionGroup) as refusal:  # the SDK client cannot even initialize
            anyio.run(run_session, f"{base}/anon/{PATH}", refused)
        assert refusal.group_contains(MCPError)
    assert processes.store.resume(ADDRESS).version == 0  # nothing changed


def test_an_absent_process_is_not_found(processes: Processes) -> None:
    with serving(processes) as (base, _endpoint):
        reply = httpx.post(f"{base}/w/local/me/nobody", json=INITIALIZE, headers=HEADERS, timeout=10)
    assert reply.status_code == 404
    assert reply.json() == {"error": {
        "code": "not_found", "message": "persisted process not found: svit://local/me/nobody"}}


def test_ready_servers_stay_bounded(processes: Processes) -> None:
    """At most max_servers SDK servers are live; an evicted one is rebuilt on its next request."""
    with serving(processes, max_servers=2) as (base, endpoint):
        for name in ("a", "b", "c", "a", "c", "b"):
            reply = httpx.post(f"{base}/w/local/me/{name}", json=INITIALIZE, headers=HEADERS, timeout=10)
            assert reply.status_code == 200
            assert reply.json()["result"]["instructions"].endswith(f"Process address: svit://local/me/{name}")
            assert endpoint.ready_servers <= 2
        assert endpoint.ready_servers == 2
        absent = httpx.post(f"{base}/w/local/me/nobody", json=INITIALIZE, headers=HEADERS, timeout=10)
        assert absent.status_code == 404
        assert endpoint.ready_servers == 2  # a refused build evicts nothing


def test_concurrent_calls_each_commit_once(processes: Processes) -> None:
    with serving(processes) as (base, _endpoint):
        async def burst(session: ClientSession) -> tuple[list[int], tuple[Any, int]]:
            await session.initialize()
            versions: list[int] = []

            async def write(index: int) -> None:
                versions.append(ok_json(await session.call_tool("write", {"path": f"/memory/k{index}", "value": index}))["version"])

            async with anyio.create_task_group() as group:
                for index in range(8):
                    group.start_soon(write, index)
            listed = ok_json(await session.call_tool("discover", {"path": "/memory"}))["entries"]
            return versions, (sorted(listed), len(listed))

        versions, listed = anyio.run(run_session, f"{base}/w/{PATH}", burst)
    assert sorted(versions) == list(range(1, 9))
    assert listed == (sorted(f"k{index}" for index in range(8)), 8)


def test_refusals_before_the_lifespan_and_for_other_protocols() -> None:
    endpoint = McpHttp(lambda address: Process.builder(address).build())

    async def main() -> tuple[int, Any, list[dict[str, Any]]]:
        transport = httpx.ASGITransport(app=Grant(endpoint.app, "write"))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            reply = await client.post(f"/{PATH}", json=INITIALIZE, headers=HEADERS)
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "websocket.connect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await endpoint.app({"type": "websocket", "path": f"/{PATH}", "state": {}}, receive, send)
        return reply.status_code, reply.json(), sent

    status, body, sent = anyio.run(main)
    assert status == 503 and body == {"error": {"code": "unavailable", "message": "the MCP endpoint is not running"}}
    assert sent == [{"type": "websocket.close", "code": 1003}]


class SlowToOpen(Processes):
    """Opening ``svit://local/me/c`` waits until a request to another address was served
    (at most 20 s), and records whether it was."""

    def __init__(self, store: ProcessStore) -> None:
        super().__init__(store)
        self.opening = threading.Event()
        self.other_served = threading.Event()
        self.saw_other_served: bool | None = None

    def resolve(self, address: str) -> ProcessLike:
        if address == "svit://local/me/c" and self.saw_other_served is None:
            self.opening.set()
            self.saw_other_served = self.other_served.wait(20)
        return super().resolve(address)


def test_a_slow_process_open_does_not_hold_up_requests_to_other_addresses(processes: Processes) -> None:
    slow = SlowToOpen(processes.store)
    with serving(slow) as (base, _endpoint):
        warm = httpx.post(f"{base}/w/local/me/a", json=INITIALIZE, headers=HEADERS, timeout=30)
        assert warm.status_code == 200
        answers: list[httpx.Response] = []
        opener = threading.Thread(target=lambda: answers.append(
            httpx.post(f"{base}/w/local/me/c", json=INITIALIZE, headers=HEADERS, timeout=60)))
        opener.start()
        try:
            assert slow.opening.wait(20), "the slow open did not start"
            served = httpx.post(f"{base}/w/local/me/a", json=INITIALIZE, headers=HEADERS, timeout=60)
            assert served.status_code == 200
            slow.other_served.set()
        finally:
            slow.other_served.set()
            opener.join(60)
    assert slow.saw_other_served is True
    assert [answer.status_code for answer in answers] == [200]
