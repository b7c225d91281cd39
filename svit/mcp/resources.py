"""The process as MCP resources: its ``/memory`` values, its ``/lib`` scripts, the catalogue.

A resource URI is the process address, ``#``, and a process path whose segments are
percent-encoded: ``svit://local/me/notes#/memory/todo``. The fragment keeps the address
intact (an address has a path of its own) and names one node of that process. The guest
function catalogue, the value of ``(runtime-builtins)``, is ``<address>#runtime-builtins``.

Listings are pages of at most :data:`PAGE_SIZE` entries; a longer listing says so with a
``nextCursor`` and the last entry of the page tells a reader that more follow. A read
returns the committed value as JSON (a script as its ``{source, documentation}`` record),
refused when its text would exceed the process's ``max_text_bytes`` (a value that large
is read in parts with the read tool or a script).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, unquote

import mcp.types as types
from mcp.shared.exceptions import MCPError

from ..builtins import runtime_catalogue
from ..errors import InvalidPath, SvitError
from ..loop.tools import error_text, to_json_value
from ..protocol import ProcessLike

__all__ = [
    "CATALOGUE_FRAGMENT",
    "JSON_MIME",
    "PAGE_SIZE",
    "RESOURCE_NOT_FOUND",
    "ResourceTooLarge",
    "catalogue_uri",
    "list_resource_templates",
    "list_resources",
    "path_of",
    "read_resource",
    "resource_uri",
]

#: The most resources one listing page holds.
PAGE_SIZE = 200

#: The fragment naming the guest function catalogue.
CATALOGUE_FRAGMENT = "runtime-builtins"

JSON_MIME = "application/json"

#: The JSON-RPC error code MCP uses for a resource that does not exist.
RESOURCE_NOT_FOUND = -32002

#: The sections whose children are listed as resources.
LISTED_SECTIONS = ("memory", "lib")


class ResourceTooLarge(SvitError):
    """A resource whose JSON text would exceed the process's ``max_text_bytes``."""

    code, prefix = "resource_too_large", "resource too large"


def resource_uri(address: str, path: str) -> str:
    """The URI of ``path`` inside the process at ``address``."""
    segments = [segment for segment in path.split("/") if segment]
    return f"{address}#/" + "/".join(quote(segment, safe="") for segment in segments)


def catalogue_uri(address: str) -> str:
    return f"{address}#{CATALOGUE_FRAGMENT}"


def path_of(address: str, uri: str) -> str:
    """The process path a resource URI of this process names (``InvalidPath`` otherwise)."""
    prefix = f"{address}#/"
    if not uri.startswith(prefix):
        raise InvalidPath(f"not a resource of {address}: {uri[:200]}")
    return "/" + "/".join(unquote(segment) for segment in uri[len(prefix):].split("/"))


def _catalogue_resource(address: str) -> types.Resource:
    return types.Resource(
        uri=catalogue_uri(address),
        name="(runtime-builtins)",
        description="Every function a Svit Lisp script can call: name, signature, category and description.",
        mime_type=JSON_MIME,
    )


def _entries(process: ProcessLike) -> list[tuple[str, str]]:
    """``(section, name)`` of every listed child, /memory first, each in discover's order."""
    found: list[tuple[str, str]] = []
    for section in LISTED_SECTIONS:
        found.extend((section, name) for name in process.discover(f"/{section}"))
    return found


def _child_resource(address: str, section: str, name: str, last_of_page: bool, remaining: int) -> types.Resource:
    path = f"/{section}/{name}"
    if section == "lib":
        description = f'A Svit Lisp script; run it with exec {{"path": "{path}"}}.'
    else:
        description = "A committed value of the process memory."
    if last_of_page and remaining:
        description += f" The listing is truncated here: {remaining} more follow on the next page."
    return types.Resource(uri=resource_uri(address, path), name=path, description=description, mime_type=JSON_MIME)


def _offset(cursor: str | None) -> int:
    if cursor is None:
        return 0
    if not cursor.isdigit() or len(cursor) > 12:
        raise MCPError(types.INVALID_PARAMS, "invalid cursor: use the nextCursor of a previous listing")
    return int(cursor)


def list_resources(process: ProcessLike, cursor: str | None) -> types.ListResourcesResult:
    """One page of the catalogue and the ``/memory`` and ``/lib`` children (blocking)."""
    address = process.address
    start = _offset(cursor)
    try:
        entries = _entries(process)
    except SvitError as exc:
        raise MCPError(types.INTERNAL_ERROR, error_text(exc)) from None
    everything: list[tuple[str, str] | None] = [None, *entries]  # None: the catalogue
    page = everything[start:start + PAGE_SIZE]
    remaining = max(0, len(everything) - start - len(page))
    resources = [
        _catalogue_resource(address) if item is None
        else _child_resource(address, item[0], item[1], index == len(page) - 1, remaining)
        for index, item in enumerate(page)
    ]
    return types.ListResourcesResult(resources=resources, next_cursor=str(start + len(page)) if remaining else None)


def list_resource_templates(address: str) -> types.ListResourceTemplatesResult:
    """URI templates for any ``/memory`` value or ``/lib`` script by name."""
    return types.ListResourceTemplatesResult(resource_templates=[
        types.ResourceTemplate(
            uri_template=f"{address}#/memory/{{name}}", name="memory value",
            description="A committed value under /memory (deeper paths: add /-separated, percent-encoded segments).",
            mime_type=JSON_MIME,
        ),
        types.ResourceTemplate(
            uri_template=f"{address}#/lib/{{name}}", name="script",
            description="A /lib script as its {source, documentation} record.", mime_type=JSON_MIME,
        ),
    ])


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def read_resource(process: ProcessLike, uri: str) -> types.ReadResourceResult:
    """The committed value a resource URI names, as JSON text (blocking)."""
    address = process.address
    if uri == catalogue_uri(address):
        text = _json_text(runtime_catalogue())
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type=JSON_MIME, text=text)])
    try:
        path = path_of(address, uri)
        if process.stat(path) is None:
            raise MCPError(RESOURCE_NOT_FOUND, f"resource not found: nothing at {path}")
        value, version = process.read_versioned(path)
        text = _json_text(to_json_value(value))
        limit = process.limits.max_text_bytes
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise ResourceTooLarge(
                f"the value at {path} is {size} bytes of JSON, more than max_text_bytes ({limit}); "
                "read its parts with the read tool or a script"
            )
    except SvitError as exc:
        raise MCPError(types.INVALID_PARAMS, error_text(exc)) from None
    contents = types.TextResourceContents(uri=uri, mime_type=JSON_MIME, text=text, _meta={"svit/version": version})
    return types.ReadResourceResult(contents=[contents])
