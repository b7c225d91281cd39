"""``/mcp/{address}`` through ``svit serve``, driven by the official MCP SDK client."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent

from tests.server.served import ADDRESS, Served, control_body

PATH = "local/srv/counter"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}


def result_json(result: CallToolResult) -> Any:
    assert not result.is_error, result
    first = result.content[0]
    assert isinstance(first, TextContent)
    return json.loads(first.text)


def session_run(served: Served, token: str, body: Callable[[ClientSession], Awaitable[Any]], path: str = PATH) -> Any:
    async def run() -> Any:
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http, \
                streamable_http_client(f"{served.url}/mcp/{path}", http_client=http) as (read, write), \
                ClientSession(read, write) as session:
            with anyio.fail_after(30):
                return await body(session)

    return anyio.run(run)


def version(served: Served) -> int:
    with served.client(served.tokens.read) as client:
        return int(client.get(f"/v1/processes/{PATH}").json()["version"])


def test_a_write_token_lists_tools_writes_execs_and_reads_back(served: Served) -> None:
    before = version(served)

    async def scenario(session: ClientSession) -> tuple[Any, Any, Any]:
        await session.initialize()
        names = sorted(tool.name for tool in (await session.list_tools()).tools)
        written = result_json(await session.call_tool("write", {"path": "/memory/note", "value": "hello"}))
        ran = result_json(await session.call_tool("exec", {"path": "/lib/add"}))
        read = result_json(await session.call_tool("read", {"path": "/memory/note"}))
        return names, (written, ran), read

    names, (written, ran), read = session_run(served, served.tokens.write, scenario)
    assert names == ["discover", "exec", "read", "remove", "stat", "write"]
    assert read["value"] == "hello" and read["version"] == before + 2
    assert ran["version"] == before + 2
    assert version(served) == before + 2
    # the control route sees the MCP commits at once (no stale handle)
    with served.client(served.tokens.write) as client:
        answer = client.post("/v1/control", content=json.dumps(control_body("after-mcp", before + 2))).json()
    assert answer["outcome"]["status"] == "committed"

    async def again(session: ClientSession) -> Any:
        await session.initialize()
        return result_json(await session.call_tool("read", {"path": "/memory/count"}))

    assert session_run(served, served.tokens.write, again)["version"] == before + 3


def test_a_read_token_sees_no_write_tools_and_cannot_change_anything(served: Served) -> None:
    before = version(served)

    async def scenario(session: ClientSession) -> tuple[list[str], CallToolResult]:
        await session.initialize()
        names = sorted(tool.name for tool in (await session.list_tools()).tools)
        refused = await session.call_tool("write", {"path": "/memory/note", "value": "changed"})
        return names, refused

    names, refused = session_run(served, served.tokens.read, scenario)
    assert names == ["discover", "read", "stat"]
    assert refused.is_error
    assert version(served) == before


@pytest.mark.parametrize(("token_kind", "path", "status", "code"), [
    ("none", PATH, 401, "unauthorized"),
    ("wrong", PATH, 401, "unauthorized"),
    ("other", PATH, 403, "forbidden"),
    ("write", "has space", 400, "invalid_request"),
])
def test_refused_tokens_never_reach_the_mcp_app(served: Served, token_kind: str, path: str, status: int, code: str) -> None:
    token = {"none": None, "wrong": "w" * 40, "other": served.tokens.other, "write": served.tokens.write}[token_kind]
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    before = version(served)
    reply = httpx.post(f"{served.url}/mcp/{path}", json=INITIALIZE, headers=headers, timeout=10)
    assert reply.status_code == status and reply.json()["error"]["code"] == code
    assert version(served) == before


def test_an_sdk_client_with_a_wrong_token_cannot_initialize(served: Served) -> None:
    async def scenario(session: ClientSession) -> None:
        await session.initialize()

    with pytest.raises(BaseExceptionGroup) as refused:  # the SDK reports the 401 from its task group
        session_run(served, "w" * 40, scenario)
    assert refused.group_contains(MCPError)


def test_the_mcp_instructions_name_the_address(served: Served) -> None:
    async def scenario(session: ClientSession) -> str | None:
        return (await session.initialize()).instructions

    assert ADDRESS in (session_run(served, served.tokens.read, scenario) or "")


# ---------------------------------------------------------------------------- request bodies

MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def padded_read(padding: int) -> bytes:
    """A stateless ``tools/call`` of read whose body carries ``padding`` extra bytes (an
    argument the tool ignores)."""
    return json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "read", "arguments": {"path": "/memory/count", "padding": "x" * padding}}}).encode()


def test_an_mcp_body_within_the_bound_is_served_whole(served: Served) -> None:
    with served.client(served.tokens.read) as client:
        reply = client.post(f"/mcp/{PATH}", content=padded_read(512 * 1024), headers=MCP_HEADERS)
    assert reply.status_code == 200, reply.text[:300]
    assert reply.json()["result"]["structuredContent"]["path"] == "/memory/count"


def test_an_oversized_mcp_body_is_413_with_and_without_content_length(served: Served) -> None:
    big = padded_read(1024 * 1024 + 10)

    def chunks() -> Any:
        for start in range(0, len(big), 65536):
            yield big[start:start + 65536]

    with served.client(served.tokens.read) as client:
        declared = client.post(f"/mcp/{PATH}", content=big, headers=MCP_HEADERS)
        streamed = client.post(f"/mcp/{PATH}", content=chunks(), headers=MCP_HEADERS)
    assert "content-length" not in {k.lower() for k in streamed.request.headers}
    for reply in (declared, streamed):
        assert reply.status_code == 413, reply.text[:300]
        assert reply.json()["error"]["code"] == "payload_too_large"


def test_a_huge_declared_mcp_length_is_refused_before_the_body_is_sent(served: Served) -> None:
    reply = served.raw_request(f"POST /mcp/{PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {served.tokens.read}\r\n"
                               "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
                               "Content-Length: 1000000000\r\n\r\n")
    assert reply.startswith("HTTP/1.1 413"), reply[:200]
    assert '"payload_too_large"' in reply
