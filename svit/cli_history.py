"""The history commands of ``svit``: ``log``, ``diff``, and ``--at`` for the readers.

Everything here reads the store without resuming the process (no replay): a retained
version comes from its stored records and chunks (:meth:`svit.store.DurableProcess.at`).
Values are printed compactly and bounded (:data:`VALUE_BYTES` of JSON each, marked when
cut), so a large state never floods a terminal.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .errors import InvalidValue
from .values import Script

if TYPE_CHECKING:
    from .store import ProcessStore

__all__ = ["VALUE_BYTES", "LOG_LIMIT", "compact", "timestamp", "log_entries", "diff_entries", "render_log",
           "render_diff"]

#: How many bytes of compact JSON one printed value may take before it is cut.
VALUE_BYTES = 200
#: How many transactions ``svit log`` prints unless ``--limit`` says otherwise.
LOG_LIMIT = 20
#: How many mutations of one transaction ``svit log`` summarises.
_CHANGES = 8


def _json_default(value: Any) -> Any:
    if isinstance(value, Script):
        return {"documentation": value.documentation, "source": value.source}
    raise TypeError(type(value).__name__)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=_json_default)


def compact(value: Any, limit: int = VALUE_BYTES) -> tuple[Any, bool]:
    """``(value, False)`` when its compact JSON fits in ``limit`` bytes, else
    ``(the first bytes of that JSON followed by "…", True)``."""
    text = _json(value)
    if len(text.encode("utf-8")) <= limit:
        return json.loads(text), False
    cut = text.encode("utf-8")[:limit].decode("utf-8", "ignore")
    return cut + "…", True


def timestamp(millis: int | None) -> str | None:
    """ISO 8601 in UTC with milliseconds (``2026-12-02T03:10:36.123Z``), None for none."""
    if millis is None:
        return None
    moment = datetime.fromtimestamp(millis / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis % 1000:03d}Z"


def _summary(mutation: dict[str, Any]) -> str:
    operation, path = mutation["operation"], mutation["path"]
    if operation == "set":
        shown, _ = compact(mutation["value"], 60)
        return f"set {path} = {shown if isinstance(shown, str) and shown.endswith('…') else _json(shown)}"
    if operation == "append":
        count = len(mutation["values"])
        return f"append {path} ({count} value{'s' if count != 1 else ''})"
    return f"{operation} {path}"


def _bounded_value(entry: dict[str, Any], name: str, value: Any) -> None:
    shown, cut = compact(value)
    entry[name] = shown
    if cut:
        entry[f"{name}_truncated"] = True


def diff_entries(store: ProcessStore, address: str, before: int, after: int) -> list[dict[str, Any]]:
    """``svit diff``: one record per differing path, values bounded."""
    out = []
    for found in store.versions.diff(address, before, after):
        entry: dict[str, Any] = {"kind": found.kind, "path": found.path}
        if found.kind != "added":
            _bounded_value(entry, "before", found.before)
        if found.kind != "removed":
            _bounded_value(entry, "after", found.after)
        out.append(entry)
    return out


def log_entries(store: ProcessStore, address: str, limit: int, path: str | None, values: bool) -> list[dict[str, Any]]:
    """``svit log``: the newest ``limit`` transactions, newest first: version, time,
    source (and for an activation its script and output summary), touched paths, a
    summary of each change, and with ``values`` the before and after of each path."""
    out = []
    for t in store.versions.recent(address, limit, path):
        summary = [_summary(m) for m in t.mutations[:_CHANGES]]
        if len(t.mutations) > _CHANGES:
            summary.append(f"… {len(t.mutations) - _CHANGES} more")
        entry: dict[str, Any] = {
            "changes": summary,
            "committed_at": timestamp(t.committed_at),
            "hash": t.hash,
            "output": t.output_summary,
            "position": t.position,
            "script": t.script,
            "source": t.source,
            "touched_paths": t.touched_paths,
            "version": t.process_version_after,
        }
        if values:
            entry["diff"] = diff_entries(store, address, t.process_version_before, t.process_version_after)
        out.append(entry)
    return out


def _cell(entry: dict[str, Any], name: str) -> str:
    if name not in entry:
        return "-"
    value = entry[name]
    return value if entry.get(f"{name}_truncated") else _json(value)


def render_diff(entries: list[dict[str, Any]]) -> str:
    """A readable table: one line per path, ``kind path: before -> after``."""
    if not entries:
        return "(no differences)"
    lines = []
    for entry in entries:
        sign = {"added": "+", "removed": "-", "changed": "~"}[entry["kind"]]
        if entry["kind"] == "added":
            lines.append(f"{sign} {entry['path']}: {_cell(entry, 'after')}")
        elif entry["kind"] == "removed":
            lines.append(f"{sign} {entry['path']}: {_cell(entry, 'before')}")
        else:
            lines.append(f"{sign} {entry['path']}: {_cell(entry, 'before')} -> {_cell(entry, 'after')}")
    return "\n".join(lines)


def render_log(entries: list[dict[str, Any]]) -> str:
    """A readable listing: a header line per transaction, then its changes (or values)."""
    if not entries:
        return "(no transactions)"
    blocks = []
    for entry in entries:
        source = entry["source"] if entry["script"] is None else f"{entry['source']} {entry['script']}"
        lines = [f"version {entry['version']}  {entry['committed_at'] or '-'}  {source}"]
        if entry["output"] is not None:
            lines.append(f"    => {entry['output']}")
        if "diff" in entry:
            lines.extend("    " + line for line in render_diff(entry["diff"]).splitlines())
        else:
            lines.extend(f"    {change}" for change in entry["changes"])
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


# ---------------------------------------------------------------------------- commands


def cmd_diff(args: argparse.Namespace, store: ProcessStore) -> int:
    entries = diff_entries(store, args.address, args.before, args.after)
    if args.table:
        sys.stdout.write(render_diff(entries) + "\n")
    else:
        for entry in entries:
            sys.stdout.write(_json(entry) + "\n")
    return 0


def cmd_log(args: argparse.Namespace, store: ProcessStore) -> int:
    entries = log_entries(store, args.address, args.limit, args.path, args.values)
    if args.table:
        sys.stdout.write(render_log(entries) + "\n")
    else:
        text = json.dumps(entries, ensure_ascii=False, sort_keys=True, indent=2 if args.pretty else None)
        sys.stdout.write(text + "\n")
    return 0


def observed(args: argparse.Namespace, store: ProcessStore) -> Any:
    """What ``read``, ``discover`` and ``stat`` look at: the version ``--at`` names
    (read from the store, no replay), else the resumed process."""
    if args.at is None:
        return store.resume(args.address)
    if type(args.at) is not int:  # pragma: no cover - argparse converts it
        raise InvalidValue("--at must be an integer version")
    return store.versions.at(args.address, args.at)
