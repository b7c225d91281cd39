"""Where the console's data comes from: one small protocol, plain records.

The app only calls :class:`ConsoleSource`; :class:`~svit.console.store_source.StoreSource`
reads a durable store directly and :class:`~svit.console.http_source.HttpSource` goes
through a running ``svit serve``. A source names what it cannot show in
``unavailable`` (feature -> reason) and the app draws that panel as unavailable.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import SvitError
from ..values import Script

__all__ = ["FEATURES", "Commit", "ConsoleSource", "CutScript", "CutText", "Difference", "Listing", "Note", "Refused", "TreeView",
           "Unavailable", "item_key", "item_text", "left_out", "listed_total"]

#: The features a source may lack: the tree and preview, reading as of an older version,
#: diffs, the mail lists, sending to the inbox, running a /lib script.
FEATURES = ("tree", "history", "at", "diff", "mail", "send", "run")


class Unavailable(SvitError):
    """What this source cannot do (a panel over HTTP, a write on a read-only store)."""

    code, prefix = "unavailable", "not available here"


class Refused(SvitError):
    """A refusal reported by the other side (a server's answer), with its own code."""

    prefix = "refused"

    def __init__(self, code: str, detail: str) -> None:
        self.code = code
        super().__init__(detail)


@dataclass(frozen=True)
class Commit:
    """One committed transaction as the console shows it."""

    version: int
    source: str
    changed: tuple[str, ...]
    #: Milliseconds since the Unix epoch (UTC) when the store committed it; 0 when unknown.
    committed_at: int = 0
    #: The script an activation ran (``/lib/NAME`` or ``inline``) and a short summary of its output.
    script: str | None = None
    output: str | None = None


@dataclass(frozen=True)
class Difference:
    """A path that differs between two versions (``kind``: added, removed, changed; a
    source that carried only the first differences ends with one ``more`` entry whose
    ``path`` says so and whose ``before`` counts the rest)."""

    path: str
    kind: str
    before: Any
    after: Any


@dataclass(frozen=True)
class Note:
    """A line of the conversation panel; ``key`` is stable so a line is shown once."""

    key: str
    kind: str
    text: str


class Listing(list[str]):
    """Child names a source carried only in part: the first ones, and how many there are."""

    def __init__(self, names: Iterable[str], total: int) -> None:
        super().__init__(names)
        self.total = total


def listed_total(names: list[str]) -> int:
    """How many names a listing has in all (more than it holds when it is a :class:`Listing`)."""
    return max(len(names), names.total) if isinstance(names, Listing) else len(names)


class CutText(str):
    """Text a source cut before sending it: ``left_out`` bytes were not carried."""

    left_out: int

    def __new__(cls, text: str, left_out: int) -> CutText:
        made = super().__new__(cls, text)
        made.left_out = left_out
        return made


@dataclass(frozen=True)
class CutScript(Script):
    """A script whose source a source cut: ``left_out`` bytes were not carried."""

    left_out: int = 0


def left_out(value: Any) -> int:
    """Bytes of ``value`` its source did not carry (0 for a whole value)."""
    return value.left_out if isinstance(value, (CutText, CutScript)) else 0


class TreeView(Protocol):
    """The reading half of a process at one version."""

    def read(self, path: str) -> Any: ...

    def discover(self, path: str) -> list[str]: ...

    def stat(self, path: str) -> dict[str, Any] | None: ...


class ConsoleSource(Protocol):
    """What the console needs of a process (all calls may block briefly)."""

    @property
    def address(self) -> str: ...

    @property
    def unavailable(self) -> Mapping[str, str]: ...

    def head(self) -> int:
        """The committed version now."""
        ...

    def view(self, version: int | None = None) -> TreeView:
        """The tree at ``version`` (None: the head, following new commits)."""
        ...

    def commits_after(self, version: int, limit: int = 200) -> list[Commit]:
        """Commits producing a version above ``version``, oldest first."""
        ...

    def history(self, limit: int = 200) -> list[Commit]:
        """The newest ``limit`` retained commits, newest first."""
        ...

    def diff(self, before: int, after: int) -> list[Difference]: ...

    def conversation(self) -> list[Note]:
        """Inbox, outbox and runtime events now (bounded); the panel shows each key once."""
        ...

    def mail(self) -> dict[str, list[Any]]:
        """Pending and undeliverable messages by list name."""
        ...

    def send(self, text: str) -> int:
        """Put a user message in ``/inbox``; the version committed."""
        ...

    def run(self, script: str, input: Any) -> str:
        """Run ``/lib/<script>`` with ``input`` as one activation; a one-line result."""
        ...

    def close(self) -> None: ...


def item_text(item: Any, width: int = 160) -> str:
    """One line for an inbox item, an outbox intent or a message body."""
    if isinstance(item, dict):
        content = item.get("content")
        if isinstance(content, list):  # a conversation message
            texts = [part.get("text", "") for part in content if isinstance(part, dict)]
            return _cut(f"{item.get('role', '?')}: {' '.join(t for t in texts if isinstance(t, str))}", width)
        if "body" in item:  # a delivered message or an intent
            outgoing = "to" in item and ("reason" in item or "from" not in item)  # an intent, refused or not
            who = f"to {item['to']}" if outgoing else f"from {item.get('from', '?')}"
            reason = f" [undeliverable: {item['reason'] if 'reason' in item else item.get('undeliverable')}]" \
                if "reason" in item or item.get("undeliverable") else ""
            return _cut(f"{who}: {_json(item['body'])}{reason}", width)
    return _cut(_json(item), width)


def item_key(kind: str, item: Any) -> str:
    """A stable key for an item: its message id when it has one, else its JSON text."""
    if isinstance(item, dict):
        for field in ("message_id", "id"):
            if isinstance(item.get(field), str):
                return f"{kind}:{item[field]}"
    return f"{kind}:{_json(item)}"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
