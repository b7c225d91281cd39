"""The model's tools: the process host API, as JSON in and JSON text out.

Every tool result, success or failure, goes back to the model as text. A failure is
``error: <code>: <message>`` so the model can correct itself; a tool never raises into
the loop.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from .._ports import failure_text
from ..errors import InvalidPath, SvitError
from ..redact import redact
from ..values import Script
from .messages import ToolCall

_log = logging.getLogger("svit.loop")


@dataclass(frozen=True)
class ToolSpec:
    """A tool as shown to a model: name, description and JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"description": self.description, "name": self.name, "parameters": self.parameters}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


_PATH = {"type": "string", "description": "An absolute process path such as /memory/notes or /lib/name."}
_VALUE = {
    "description": "Any JSON value. For a /lib/<name> script, the record {\"source\": \"(define (main input) ...)\", "
    "\"documentation\": \"what it does\"}."
}

TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "discover",
        'List the child names of a map or array, e.g. {"path": "/memory"} or {"path": "/lib"}.',
        _object({"path": _PATH}, ["path"]),
    ),
    ToolSpec(
        "read",
        'Read the committed value at a path (null when absent) and the process version, e.g. {"path": "/memory/notes"}.',
        _object({"path": _PATH}, ["path"]),
    ),
    ToolSpec(
        "stat",
        'Describe the node at a path (kind, size, hash, access) without its value, e.g. {"path": "/mounts/docs"}.',
        _object({"path": _PATH}, ["path"]),
    ),
    ToolSpec(
        "write",
        'Write a JSON value under /memory, e.g. {"path": "/memory/count", "value": 0}, or store a script: '
        '{"path": "/lib/name", "value": {"source": "(define (main input) ...)", "documentation": "..."}}. '
        "The source is checked before it is stored; commits one version.",
        _object({"path": _PATH, "value": _VALUE}, ["path", "value"]),
    ),
    ToolSpec(
        "remove",
        'Remove a path under /memory or /lib, e.g. {"path": "/memory/draft"}; commits one version.',
        _object({"path": _PATH}, ["path"]),
    ),
    ToolSpec(
        "exec",
        'Run Svit Lisp once: {"source": "(define (main input) ...)", "input": {...}} runs inline source (never stored); '
        '{"path": "/lib/name", "input": ...} runs a stored script. main receives input (null when omitted); the result '
        "has its output, the changed paths, its messages and the new version. Commits the script's writes and messages "
        'together, or nothing on any error. Add "dry_run": true to test a script: it runs and reports the same result, '
        "then nothing is committed (port calls are refused in a dry run). Port calls inside are immediate external effects.",
        {
            "type": "object",
            "properties": {
                "source": {"type": "string", "description": "Inline Svit Lisp source defining (main input); run once, never stored."},
                "path": {"type": "string", "description": "A /lib/<name> script path."},
                "input": {"description": "The JSON input passed to main."},
                "dry_run": {
                    "type": "boolean",
                    "description": "Run, report output, changed paths and messages, and commit nothing (default false).",
                },
            },
            "additionalProperties": False,
        },
    ),
)


class ToolTarget(Protocol):
    """What the tools operate on (a ``Svit`` or anything with the same host API)."""

    def read_versioned(self, path: str) -> tuple[Any, int]: ...
    def discover(self, path: str) -> list[str]: ...
    def stat(self, path: str) -> Any: ...
    def write(self, path: str, value: Any) -> Any: ...
    def remove(self, path: str) -> Any: ...
    def exec(self, path: str, input: Any = None, *, dry_run: bool = False) -> Any: ...
    def exec_inline(self, source: str, input: Any = None, *, dry_run: bool = False) -> Any: ...


class UnknownTool(SvitError):
    code, prefix = "unknown_tool", "unknown tool"


class InvalidToolArguments(SvitError):
    code, prefix = "invalid_tool_arguments", "invalid tool arguments"


def to_json_value(value: Any) -> Any:
    """Process values as JSON: scripts become ``{source, documentation}``."""
    if isinstance(value, Script):
        return value.to_json()
    if isinstance(value, dict):
        return {key: to_json_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [to_json_value(item) for item in value]
    return value


def _text(arguments: dict[str, Any], key: str) -> str:
    value = arguments.get(key)
    if type(value) is not str:
        raise InvalidToolArguments(f"`{key}` must be a string")
    return value


def _discover(target: ToolTarget, args: dict[str, Any]) -> Any:
    path = _text(args, "path")
    return {"entries": target.discover(path), "path": path}


def _read(target: ToolTarget, args: dict[str, Any]) -> Any:
    path = _text(args, "path")
    value, version = target.read_versioned(path)
    return {"path": path, "value": to_json_value(value), "version": version}


def _stat(target: ToolTarget, args: dict[str, Any]) -> Any:
    path = _text(args, "path")
    return {"path": path, "value": to_json_value(target.stat(path))}


def _write(target: ToolTarget, args: dict[str, Any]) -> Any:
    path = _text(args, "path")
    if "value" not in args:
        raise InvalidToolArguments("`value` is required")
    change = target.write(path, args["value"])
    return {"changed": list(change.paths), "path": path, "version": change.version}


def _remove(target: ToolTarget, args: dict[str, Any]) -> Any:
    path = _text(args, "path")
    change = target.remove(path)
    return {"changed": list(change.paths), "path": path, "version": change.version}


def _exec(target: ToolTarget, args: dict[str, Any]) -> Any:
    source, path, input = args.get("source"), args.get("path"), args.get("input")
    dry_run = args.get("dry_run", False)
    if type(dry_run) is not bool:
        raise InvalidToolArguments("`dry_run` must be true or false")
    if type(source) is str:
        activation = target.exec_inline(source, input, dry_run=dry_run)
    elif type(path) is str and path.startswith("/lib/"):
        activation = target.exec(path, input, dry_run=dry_run)
    else:
        raise InvalidPath("exec requires source or a /lib path")
    result = {
        "changed": list(activation.changed),
        "messages": [{"body": m["body"], "id": m["message_id"], "to": m["to"]} for m in activation.messages],
        "output": to_json_value(activation.output),
        "version": activation.version,
    }
    if dry_run:
        result["dry_run"] = True  # nothing was committed; version is the unchanged one
    return result


TOOLS: dict[str, Callable[[ToolTarget, dict[str, Any]], Any]] = {
    "discover": _discover,
    "read": _read,
    "stat": _stat,
    "write": _write,
    "remove": _remove,
    "exec": _exec,
}


def error_text(exc: BaseException) -> str:
    """``error: <code>: <message>`` for the model; never a traceback or a credential.

    Of an exception from outside Svit (a mount provider's ``OSError``, say) the model is
    told only its kind, as a script is (:func:`svit._ports.failure_text`): its text may
    name host paths or other host facts, and the model's input goes to its provider. The
    whole failure goes to the host's log instead."""
    if isinstance(exc, SvitError):
        return f"error: {exc.code}: {redact(exc.message)}"
    _log.warning("a tool failed: %s", type(exc).__name__, exc_info=exc)
    return f"error: internal: {failure_text(exc)}"


def run_tool(target: ToolTarget, call: ToolCall) -> tuple[str, bool]:
    """Run one tool call; returns the result text and whether it succeeded."""
    try:
        tool = TOOLS.get(call.name)
        if tool is None:
            raise UnknownTool(call.name)
        if not isinstance(call.arguments, dict):
            raise InvalidToolArguments("arguments must be a JSON object")
        result = tool(target, call.arguments)
        return json.dumps(result, ensure_ascii=False, sort_keys=True, separators=(",", ":")), True
    except Exception as exc:  # every tool failure is reported to the model, never raised
        return error_text(exc), False


__all__ = ["TOOL_SPECS", "ToolSpec", "ToolTarget", "run_tool", "error_text", "to_json_value"]
