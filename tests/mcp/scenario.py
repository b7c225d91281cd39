"""What every MCP transport must show a client, checked through the official SDK client.

One scenario is run over stdio and over streamable HTTP: the instructions are the loop's
prompt, the tools are the loop's tools, a write and two execs commit, a failed exec
changes nothing and reports the loop's error text, and the resources list and read the
committed values.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import mcp.types as types

from svit.builtins import runtime_catalogue
from svit.loop.messages import ToolCall
from svit.loop.prompt import compose_system_prompt
from svit.loop.tools import TOOL_SPECS, run_tool
from svit.mcp import catalogue_uri, resource_uri
from svit.process import Process

__all__ = [
    "ADD_SCRIPT",
    "BAD_SCRIPT",
    "McpSession",
    "check_failed_exec",
    "check_instructions",
    "check_resources",
    "check_tools",
    "check_writes_and_execs",
    "ok_json",
    "read_value",
    "text_of",
]

ADD_SCRIPT = {
    "source": '(define (main input) (let ((total (+ (map-get input "a") (map-get input "b")))) (do (write "/memory/total" total) total)))',
    "documentation": "Adds a and b and keeps the total",
}

#: Writes, then fails: the write must not survive.
BAD_SCRIPT = {
    "source": '(define (main input) (do (write "/memory/total" 999) (panic "refused on purpose")))',
    "documentation": "Writes then fails",
}


class McpSession(Protocol):
    """The part of the SDK's ``ClientSession`` the scenario uses."""

    async def list_tools(self) -> types.ListToolsResult: ...
    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> types.CallToolResult: ...
    async def list_resources(self) -> types.ListResourcesResult: ...
    async def read_resource(self, uri: str) -> types.ReadResourceResult: ...


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def ok_json(result: types.CallToolResult) -> Any:
    """A successful tool result's JSON, checked to be the same as text and as structured content."""
    assert not result.is_error, text_of(result)
    value = json.loads(text_of(result))
    assert result.structured_content == value
    return value


async def read_value(session: McpSession, path: str) -> tuple[Any, int]:
    result = ok_json(await session.call_tool("read", {"path": path}))
    return result["value"], result["version"]


def check_instructions(instructions: str | None, address: str) -> None:
    assert instructions == compose_system_prompt(address, None)
    assert f"Process address: {address}" in instructions


async def check_tools(session: McpSession, names: tuple[str, ...] = tuple(spec.name for spec in TOOL_SPECS)) -> None:
    """The listed tools are the loop's (in its order), with its descriptions and schemas."""
    listed = (await session.list_tools()).tools
    assert [tool.name for tool in listed] == list(names)
    specs = {spec.name: spec for spec in TOOL_SPECS}
    for tool in listed:
        assert tool.description == specs[tool.name].description
        assert tool.input_schema == specs[tool.name].parameters


async def check_writes_and_execs(session: McpSession) -> int:
    """A write, a stored script and an inline exec each commit one version; returns the last."""
    written = ok_json(await session.call_tool("write", {"path": "/memory/notes", "value": {"items": ["a", "b"]}}))
    assert written["changed"] == ["/memory/notes"]
    start = written["version"]
    stored = ok_json(await session.call_tool("write", {"path": "/lib/add", "value": ADD_SCRIPT}))
    assert stored["version"] == start + 1
    ran = ok_json(await session.call_tool("exec", {"path": "/lib/add", "input": {"a": 2, "b": 40}}))
    assert ran == {"changed": ["/memory/total"], "messages": [], "output": 42, "version": start + 2}
    inline = ok_json(await session.call_tool("exec", {
        "source": '(define (main input) (count (map-get (read "/memory/notes") "items")))',
    }))
    assert inline["output"] == 2 and inline["changed"] == [] and inline["version"] == start + 3  # every exec is one commit
    assert await read_value(session, "/memory/total") == (42, start + 3)
    script, _ = await read_value(session, "/lib/add")
    assert script == ADD_SCRIPT
    return start + 3


def expected_failure_text(address: str) -> str:
    """What our own loop tells a model when BAD_SCRIPT fails (same script, same path)."""
    process = Process.builder(address).build()
    process.write("/lib/bad", BAD_SCRIPT)
    text, ok = run_tool(process, ToolCall("call", "exec", {"path": "/lib/bad"}))
    assert not ok
    return text


async def check_failed_exec(session: McpSession, address: str) -> None:
    """A script that writes then fails is a tool error with the loop's text and changes nothing."""
    ok_json(await session.call_tool("write", {"path": "/lib/bad", "value": BAD_SCRIPT}))
    before = await read_value(session, "/memory/total")
    failed = await session.call_tool("exec", {"path": "/lib/bad"})
    assert failed.is_error
    assert text_of(failed) == expected_failure_text(address)
    assert text_of(failed).startswith("error: script_failed: ") and "refused on purpose" in text_of(failed)
    assert await read_value(session, "/memory/total") == before
    inline = await session.call_tool("exec", {"source": '(define (main input) (do (write "/memory/total" 7) (panic "no")))'})
    assert inline.is_error and text_of(inline).startswith("error: script_failed: ")
    assert await read_value(session, "/memory/total") == before


async def check_resources(session: McpSession, address: str) -> None:
    """The catalogue, /memory values and /lib scripts are listed and read as committed JSON."""
    listed = (await session.list_resources()).resources
    uris = [resource.uri for resource in listed]
    assert uris[0] == catalogue_uri(address)
    for path in ("/memory/notes", "/memory/total", "/lib/add"):
        assert resource_uri(address, path) in uris
    notes = (await session.read_resource(resource_uri(address, "/memory/notes"))).contents[0]
    assert isinstance(notes, types.TextResourceContents)
    assert notes.mime_type == "application/json" and json.loads(notes.text) == {"items": ["a", "b"]}
    script = (await session.read_resource(resource_uri(address, "/lib/add"))).contents[0]
    assert isinstance(script, types.TextResourceContents) and json.loads(script.text) == ADD_SCRIPT
    catalogue = (await session.read_resource(catalogue_uri(address))).contents[0]
    assert isinstance(catalogue, types.TextResourceContents)
    assert json.loads(catalogue.text) == runtime_catalogue()
