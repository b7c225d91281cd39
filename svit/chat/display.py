"""What ``svit chat`` prints besides the model's text: compact tool lines, failures, the
earlier conversation, the inbox and the commit log. Pure functions of values, so each
is tested without a terminal."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import sanitize
from ..loop.messages import Message
from ..redact import redact

__all__ = [
    "MAX_RESULT_LINES",
    "WIDTH",
    "Arrows",
    "clip",
    "exchanges",
    "excerpt",
    "failure_line",
    "inbox_lines",
    "log_lines",
    "tool_call_line",
    "tool_result_lines",
]

#: Characters per printed tool line.
WIDTH = 100
#: Lines a tool result may take.
MAX_RESULT_LINES = 3


class Arrows:
    """The markers of tool lines: arrows on a UTF-8 terminal, ASCII elsewhere."""

    def __init__(self, encoding: str | None) -> None:
        utf8 = (encoding or "").lower().replace("-", "") in ("utf8", "utf8mb4")
        self.call = "→" if utf8 else "->"
        self.result = "←" if utf8 else "<-"
        self.more = "…" if utf8 else "..."


def clip(text: str, width: int = WIDTH, more: str = "…") -> str:
    """``text`` on one line, at most ``width`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: max(width - len(more), 0)] + more


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=False)


def tool_call_line(name: str, arguments: Any, arrows: Arrows) -> str:
    """``→ exec {"source": "(+ 1 2)"...}``: the call on one line."""
    if isinstance(arguments, dict):  # what a call is about first: its path or its script
        first = {key: arguments[key] for key in ("path", "source") if key in arguments}
        arguments = {**first, **{key: value for key, value in arguments.items() if key not in first}}
    shown = arguments if isinstance(arguments, str) else _json(arguments)
    return clip(f"{arrows.call} {sanitize(name, 64)} {redact(shown)}", WIDTH, arrows.more)


def tool_result_lines(text: str, ok: bool, arrows: Arrows) -> list[str]:
    """``← {"output": 3, ...}`` in at most :data:`MAX_RESULT_LINES` lines; a failed tool's
    ``error: <code>: <message>`` is shown as the error it is."""
    flat = " ".join(redact(text).split())
    if not ok and not flat.startswith("error:"):
        flat = "error: " + flat
    prefix = f"{arrows.result} "
    room = WIDTH - len(prefix)
    lines: list[str] = []
    rest = flat
    while rest and len(lines) < MAX_RESULT_LINES:
        lines.append(rest[:room])
        rest = rest[room:]
    if rest:
        last = lines[-1]
        lines[-1] = last[: max(room - len(arrows.more), 0)] + arrows.more
    if not lines:
        lines = [""]
    return [prefix + lines[0]] + ["  " + line for line in lines[1:]]


def _strip_prefix(message: str, prefix: str) -> str:
    return message[len(prefix):] if message.startswith(prefix) else message


def failure_line(record: dict[str, Any] | None, timeout: float) -> str:
    """One line for a turn that failed: a model request's status, timeout or lost
    connection as ``model request failed: ...``, anything else by its own text."""
    record = record or {}
    code = record.get("code")
    message = str(record.get("message") or "the turn failed")
    if code == "reasoner_failed":
        status = record.get("status")
        if type(status) is int:
            detail = record.get("provider_message")
            return f"model request failed: HTTP {status}" + (f": {clip(str(detail), 200)}" if detail else "")
        if record.get("error_type") == "timeout":
            return f"model request failed: timed out after {timeout:g}s"
        detail = _strip_prefix(message, "reasoner request failed: ")
        return "model request failed: " + clip(_strip_prefix(detail, "model request failed: "), 200)
    if code == "reasoner_unavailable":
        return "model unavailable: " + clip(_strip_prefix(message, "reasoner unavailable: "), 200)
    if code == "reply_cancelled":
        return "reply cancelled"
    if code == "reply_truncated":
        return "the model's reply was cut off at its length limit"
    return "the turn failed: " + clip(message, 200)


def excerpt(text: str, more: str = "…", *, lines: int = 12, chars: int = 1200) -> str:
    """The start of a long text, its line breaks kept: at most ``lines`` lines and
    ``chars`` characters, ``more`` marking a cut."""
    kept = text.splitlines()[:lines]
    shown = "\n".join(kept)[:chars]
    return shown if shown == text.rstrip("\n") else shown.rstrip() + more


def exchanges(messages: Sequence[Message], count: int) -> list[tuple[str, str]]:
    """The last ``count`` exchanges of a conversation as ``(who, text)`` pairs: what the
    person wrote and the agent's answers, tool traffic left out."""
    shown: list[tuple[str, str]] = []
    for message in messages:
        if message.role == "user":
            shown.append(("you", message.text))
        elif message.role == "agent" and not message.tool_calls and message.text:
            shown.append(("agent", message.text))
    starts = [index for index, (who, _) in enumerate(shown) if who == "you"]
    if len(starts) > count:
        shown = shown[starts[-count]:]
    return shown


def _when(seconds: Any) -> str:
    import datetime  # noqa: PLC0415 - only the inbox listing shows times

    if type(seconds) not in (int, float):
        return "-"
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _item_text(item: Any) -> str:
    if isinstance(item, dict):
        content = item.get("content")
        if isinstance(content, list):
            texts = [part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)]
            return " ".join(texts)
        body = item.get("body")
        if body is not None:
            return f"from {item.get('from', '?')}: {body if isinstance(body, str) else _json(body)}"
    return _json(item)


def inbox_lines(report: dict[str, Any], timeout: float) -> list[str]:
    """The inbox report (:func:`svit.loop.set_aside.inbox_report`) for a person."""
    lines = [f"pending ({report['pending_count']}):"]
    for entry in report["pending"]:
        line = f"  {entry['id']}  {clip(_item_text(entry['item']), 60)}"
        if entry["attempts"]:
            line += f"  (failed {entry['attempts']}x, retry at {_when(entry['retry_at'])})"
        lines.append(line)
    if report["pending_count"] > len(report["pending"]):
        lines.append(f"  ... and {report['pending_count'] - len(report['pending'])} more")
    lines.append(f"set aside ({len(report['set_aside'])}):")
    for entry in report["set_aside"][-20:]:
        lines.append(f"  {entry['id']}  {clip(_item_text(entry.get('item')), 60)}")
        lines.append(f"      {failure_line(entry.get('error'), timeout)} ({_when(entry.get('set_aside_at'))})")
    if len(report["set_aside"]) > 20:
        lines.append(f"  (the {len(report['set_aside']) - 20} older ones: svit inbox ADDR)")
    return lines


def log_lines(transactions: Sequence[Any]) -> list[str]:
    """Commits, newest last: version, what made them, the paths they touched."""
    lines = []
    for transaction in transactions:
        paths = ", ".join(transaction.touched_paths[:4])
        if len(transaction.touched_paths) > 4:
            paths += f", +{len(transaction.touched_paths) - 4}"
        lines.append("  " + clip(f"v{transaction.process_version_after}  {transaction.source or '-'}  {paths}", WIDTH - 2))
    return lines or ["  (no commits retained)"]
