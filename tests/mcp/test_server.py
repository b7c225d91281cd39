"""``build_server`` in process (the SDK client's in-memory connection): tools, errors, resources."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from svit.errors import PersistenceNotFound
from svit.limits import Limits
from svit.loop.messages import ToolCall
from svit.loop.tools import run_tool
from svit.mcp import build_server, catalogue_uri, resource_uri
from svit.mcp.resources import PAGE_SIZE, path_of
from svit.process import Process
from svit.protocol import ProcessLike
from tests.mcp.scenario import check_instructions, check_tools, ok_json, text_of

ADDRESS = "svit://local/me/unit"


def run(process_or_opener: ProcessLike | Callable[[], ProcessLike], body: Callable[[Client], Awaitable[Any]], *,
        access: str = "write") -> Any:
    opener = process_or_opener if callable(process_or_opener) else (lambda: process_or_opener)

    async def main() -> Any:
        async with Client(build_server(opener, access=access), cache=None) as client:
            with anyio.fail_after(20):
                return await body(client)

    return anyio.run(main)


def test_instructions_tools_and_annotations() -> None:
    async def body(client: Client) -> list[types.Tool]:
        check_instructions(client.instructions, ADDRESS)
        await check_tools(client)  # type: ignore[arg-type]
        return (await client.list_tools()).tools

    tools = run(Process.builder(ADDRESS).build(), body)
    hints = {tool.name: tool.annotations.read_only_hint for tool in tools if tool.annotations is not None}
    assert hints == {"discover": True, "read": True, "stat": True, "write": False, "remove": False, "exec": False}


def test_tool_errors_are_the_loops_texts_and_change_nothing() -> None:
    process = Process.builder(ADDRESS).memory("n", 1).build()
    calls = [("nope", {}), ("read", {"path": 3}), ("write", {"path": "/system/x", "value": 1}),
             ("exec", {"source": "(define (main input) (undefined-thing))"}), ("exec", {"path": "/lib/absent"})]
    expected = [run_tool(Process.builder(ADDRESS).memory("n", 1).build(), ToolCall("c", name, args))[0] for name, args in calls]

    async def body(client: Client) -> list[str]:
        texts = []
        for name, args in calls:
            result = await client.call_tool(name, args)
            assert result.is_error and result.structured_content is None
            texts.append(text_of(result))
        return texts

    texts = run(process, body)
    assert texts == expected
    assert all(text.startswith("error: ") for text in texts)
    assert process.version == 0


def test_a_process_that_cannot_be_opened_is_a_tool_error_and_a_protocol_error_for_resources() -> None:
    process = Process.builder(ADDRESS).build()
    opened = [0]

    def opener() -> ProcessLike:
        opened[0] += 1
        if opened[0] > 1:  # the build succeeds; every later operation finds the process gone
            raise PersistenceNotFound(ADDRESS)
        return process

    async def body(client: Client) -> tuple[str, str]:
        result = await client.call_tool("read", {"path": "/memory"})
        assert result.is_error
        with pytest.raises(MCPError) as failure:
            await client.list_resources()
        return text_of(result), failure.value.message

    tool_text, resource_text = run(opener, body)
    assert tool_text == resource_text == f"error: persistence_not_found: persisted process not found: {ADDRESS}"


def test_build_refuses_an_unknown_access_and_a_missing_process() -> None:
    with pytest.raises(ValueError, match="access must be 'read' or 'write'"):
        build_server(lambda: Process.builder(ADDRESS).build(), access="admin")

    def missing() -> ProcessLike:
        raise PersistenceNotFound(ADDRESS)

    with pytest.raises(PersistenceNotFound):
        build_server(missing)


def test_read_access_refuses_every_changing_tool_even_unlisted() -> None:
    process = Process.builder(ADDRESS).memory("n", 1).build()

    async def body(client: Client) -> None:
        await check_tools(client, ("discover", "read", "stat"))  # type: ignore[arg-type]
        assert "write, remove and exec are refused" in (client.instructions or "")
        for name, args in [("write", {"path": "/memory/n", "value": 2}), ("remove", {"path": "/memory/n"}),
                           ("exec", {"source": "(define (main input) 1)", "dry_run": True})]:
            result = await client.call_tool(name, args)
            assert result.is_error and text_of(result) == "error: forbidden: this token may only read"
        assert ok_json(await client.call_tool("read", {"path": "/memory/n"})) == {"path": "/memory/n", "value": 1, "version": 0}

    run(process, body, access="read")
    assert process.version == 0


def test_resource_listing_is_paged_and_says_when_it_is_truncated() -> None:
    builder = Process.builder(ADDRESS)
    for index in range(250):
        builder.memory(f"k{index:03d}", index)
    builder.library("tool", "(define (main input) input)", "echo")
    process = builder.build()

    async def body(client: Client) -> tuple[types.ListResourcesResult, types.ListResourcesResult]:
        first = await client.list_resources()
        assert first.next_cursor is not None
        second = await client.list_resources(cursor=first.next_cursor)
        with pytest.raises(MCPError, match="invalid cursor"):
            await client.list_resources(cursor="not-a-cursor")
        return first, second

    first, second = run(process, body)
    assert len(first.resources) == PAGE_SIZE
    assert first.resources[0].uri == catalogue_uri(ADDRESS)
    assert "truncated here: 52 more follow" in (first.resources[-1].description or "")
    assert second.next_cursor is None and len(second.resources) == 52
    assert second.resources[-1].uri == resource_uri(ADDRESS, "/lib/tool") and second.resources[-1].name == "/lib/tool"
    names = [resource.name for resource in first.resources[1:] + second.resources]
    assert names == [f"/memory/k{index:03d}" for index in range(250)] + ["/lib/tool"]


def test_resource_reads_are_bounded_and_refuse_what_is_not_there() -> None:
    process = Process.builder(ADDRESS).limits(Limits(max_text_bytes=1024)).memory("big", list(range(600))) \
        .memory("odd name#?%", {"deep": {"er": True}}).build()

    async def body(client: Client) -> dict[str, Any]:
        found: dict[str, Any] = {}
        with pytest.raises(MCPError) as failure:
            await client.read_resource(resource_uri(ADDRESS, "/memory/big"))
        found["big"] = failure.value.message
        assert ok_json(await client.call_tool("read", {"path": "/memory/big"}))["value"] == list(range(600))  # the tool is the loop's
        with pytest.raises(MCPError) as failure:
            await client.read_resource(resource_uri(ADDRESS, "/memory/absent"))
        found["absent"] = failure.value.message
        with pytest.raises(MCPError) as failure:
            await client.read_resource("svit://local/someone/else#/memory/big")
        found["foreign"] = failure.value.message
        odd = await client.read_resource(resource_uri(ADDRESS, "/memory/odd name#?%/deep"))
        found["odd"] = odd.contents[0]
        templates = await client.list_resource_templates()
        found["templates"] = [template.uri_template for template in templates.resource_templates]
        return found

    found = run(process, body)
    assert found["big"].startswith("error: resource_too_large: resource too large: the value at /memory/big is ")
    assert "more than max_text_bytes (1024)" in found["big"]
    assert found["absent"] == "resource not found: nothing at /memory/absent"
    assert found["foreign"].startswith("error: invalid_path: ")
    assert json.loads(found["odd"].text) == {"er": True} and found["odd"].meta == {"svit/version": 0}
    assert found["templates"] == [f"{ADDRESS}#/memory/{{name}}", f"{ADDRESS}#/lib/{{name}}"]


def test_resource_uris_round_trip_any_segment() -> None:
    path = "/memory/a b/#frag?q=1/%41/é"
    uri = resource_uri(ADDRESS, path)
    assert uri.startswith(f"{ADDRESS}#/memory/") and " " not in uri and uri.count("#") == 1
    assert path_of(ADDRESS, uri) == path
