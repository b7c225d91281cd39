"""The console over a running ``svit serve`` (through :mod:`svit.client`).

Every panel works over HTTP: the tree and previews (``/v1/discover``, ``/v1/stat`` and
``/v1/read``, live or as of a retained version), diffs (``/v1/diff``), the history
(``/v1/log``, with commit times, scripts and output summaries), the mail lists
(``/v1/mail``), sending to ``/inbox`` (``/v1/inbox``, a write token), running ``/lib``
scripts (``svit-control@1``) and the live conversation (commits and the session's
reasoning events from ``/v1/events?threads=1``).

What HTTP carries in part, it says: a listing holds its first 200 names and the total
(the tree's "… N more" row), a preview holds a leaf's first 64 KiB (the preview counts
the bytes left out, as it does for a local store), a diff its first 2,000 paths, each
side cut at 64 KiB. Mounts browse as a store with no provider attached does: the server
holds no providers, so a mount's rows say ``not attached``.
"""

from __future__ import annotations

import json
import queue
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import httpx

from ..client import Client, ClientError
from ..control import Committed, Conflict
from ..values import Script
from .rendering import PREVIEW_BYTES
from .source import Commit, CutScript, CutText, Difference, Listing, Note, Refused, TreeView

__all__ = ["HTTP_UNAVAILABLE", "HttpSource", "HttpView"]

#: Nothing is unavailable over HTTP any more (kept for callers that read it).
HTTP_UNAVAILABLE: dict[str, str] = {}

#: The mail lists as the console names them, from the keys of ``/v1/mail``.
MAIL_LISTS = (
    ("inbox", "inbox (not yet handled)"),
    ("set_aside", "set aside by the loop"),
    ("outbox", "outbox (pending delivery)"),
    ("undeliverable", "undeliverable"),
    ("waiting", "waiting for delivery here"),
)

T = TypeVar("T")


def _asking(call: Callable[[], T]) -> T:
    """``call()``, a server's refusal or a lost connection raised as :class:`Refused`."""
    try:
        return call()
    except ClientError as exc:
        raise Refused(exc.code, exc.message) from None
    except httpx.HTTPError as exc:
        raise Refused("unavailable", f"svit serve does not answer: {type(exc).__name__}") from None


def _commit(data: dict[str, Any]) -> Commit:
    at = data.get("committed_at")
    script, output = data.get("script"), data.get("output")
    return Commit(int(data["version"]), str(data.get("source", "")), tuple(str(p) for p in data.get("changed", ())),
                  at if type(at) is int else 0, script if isinstance(script, str) else None,
                  output if isinstance(output, str) else None)


def _carried(value: Any, cut: int) -> Any:
    """A value as the console shows it, marked with the bytes the server left out."""
    if not cut:
        return value
    if isinstance(value, str):
        return CutText(value, cut)
    if isinstance(value, Script):
        return CutScript(value.source, value.documentation, cut)
    return f"<{cut} bytes, not carried over HTTP>"


class HttpView:
    """The tree of one process over HTTP, at ``version`` (None: the head, whatever it is now)."""

    def __init__(self, client: Client, address: str, version: int | None) -> None:
        self._client = client
        self._address = address
        self.version = version

    def read(self, path: str) -> Any:
        """The value at ``path``; text or a script's source beyond 64 KiB is cut (a preview)."""
        value, cut = _asking(lambda: self._client.preview(self._address, path, PREVIEW_BYTES, at=self.version))
        return _carried(value, cut)

    def discover(self, path: str) -> list[str]:
        answer = _asking(lambda: self._client.discover(self._address, path, at=self.version))
        return Listing(answer["names"], int(answer["total"]))

    def stat(self, path: str) -> dict[str, Any] | None:
        return _asking(lambda: self._client.stat(self._address, path, at=self.version))


class HttpSource:
    """A :class:`~svit.console.source.ConsoleSource` over ``svit serve`` at ``base_url``."""

    #: Differences one diff asks for (the server's bound; the rest are counted).
    diff_limit = 2000

    def __init__(self, base_url: str, token: str, address: str, *, client: Client | None = None) -> None:
        self._client = client or Client(base_url, token)
        self._address = address
        self._version = int(self._client.process(address)["version"])
        self._commits: queue.Queue[Commit] = queue.Queue()
        self._notes: queue.Queue[Note] = queue.Queue()
        self._stopped = threading.Event()
        self._client_id = "svit-console-" + uuid.uuid4().hex[:12]
        self._listener = threading.Thread(target=self._listen, name="svit-console-events", daemon=True)
        self._listener.start()

    @property
    def address(self) -> str:
        return self._address

    @property
    def unavailable(self) -> Mapping[str, str]:
        return HTTP_UNAVAILABLE

    def _listen(self) -> None:
        try:
            for kind, data in self._client.stream(self._address, self._version, threads=True, thread_from=0):
                if self._stopped.is_set():
                    return
                if kind == "commit":
                    self._commits.put(_commit(data))
                else:
                    text = f"{data.get('type')} {json.dumps(data.get('data'), ensure_ascii=False, sort_keys=True)[:160]}"
                    self._notes.put(Note(f"event:{data.get('session_id')}:{data.get('sequence')}", "event", text))
        except (ClientError, httpx.HTTPError, ValueError) as exc:
            if not self._stopped.is_set():
                # A refusal in its own words; anything else by kind alone (an HTTP error's
                # text carries the URL, which may hold credentials).
                reason = f"{exc.code}: {exc.message}" if isinstance(exc, ClientError) else type(exc).__name__
                self._notes.put(Note(f"error:{uuid.uuid4().hex}", "error", f"event stream ended: {reason}"))

    def head(self) -> int:
        return self._version

    def view(self, version: int | None = None) -> TreeView:
        """The tree at ``version`` (None: the head); a version the store does not retain
        is refused here, as a local store's ``at`` refuses it, not row by row later."""
        if version is not None:
            _asking(lambda: self._client.stat(self._address, "/", at=version))
        return HttpView(self._client, self._address, version)

    def commits_after(self, version: int, limit: int = 200) -> list[Commit]:
        found: list[Commit] = []
        while len(found) < limit:
            try:
                commit = self._commits.get_nowait()
            except queue.Empty:
                break
            if commit.version > version:
                found.append(commit)
        if found:
            self._version = max(self._version, found[-1].version)
        return found

    def history(self, limit: int = 200) -> list[Commit]:
        """The newest ``limit`` retained commits, newest first (``/v1/log``)."""
        found = _asking(lambda: self._client.log(self._address, limit))
        return [_commit(data) for data in found]

    def diff(self, before: int, after: int) -> list[Difference]:
        answer = _asking(lambda: self._client.diff(self._address, before, after, limit=self.diff_limit))
        out = []
        for entry in answer["differences"]:
            sides = [_carried(entry.get(side), int(entry.get(f"{side}_cut", 0))) for side in ("before", "after")]
            out.append(Difference(str(entry["path"]), str(entry["kind"]), sides[0], sides[1]))
        rest = int(answer["total"]) - len(out)
        if rest > 0:
            out.append(Difference(f"… {rest} more path(s), not carried over HTTP", "more", rest, None))
        return out

    def conversation(self) -> list[Note]:
        notes: list[Note] = []
        while True:
            try:
                notes.append(self._notes.get_nowait())
            except queue.Empty:
                return notes

    def mail(self) -> dict[str, list[Any]]:
        answer = _asking(lambda: self._client.mail(self._address))
        lists: dict[str, list[Any]] = {}
        for key, name in MAIL_LISTS:
            part = answer.get(key) or {}
            items = list(part.get("items") or [])
            rest = int(part.get("total", len(items))) - len(items)
            lists[name] = items + ([f"… {rest} more, not carried over HTTP"] if rest > 0 else [])
        return lists

    def send(self, text: str) -> int:
        """A user message into ``/inbox`` (``/v1/inbox``, one commit); the version committed."""
        return int(_asking(lambda: self._client.send(self._address, text))["version"])

    def run(self, script: str, input: Any) -> str:
        """One svit-control@1 activation at the current head (a conflict is reported, not retried)."""
        name = script.removeprefix("/lib/")
        head = int(_asking(lambda: self._client.process(self._address))["version"])
        answer = _asking(lambda: self._client.activate(self._address, name, input, expected_version=head,
                                                       client_id=self._client_id))
        outcome = answer.outcome
        if isinstance(outcome, Committed):
            output = json.dumps(outcome.activation["output"], ensure_ascii=False)[:200]
            return f"/lib/{name} -> {output} (version {outcome.activation['version']})"
        if isinstance(outcome, Conflict):
            raise Refused("conflict", f"the process moved to version {outcome.actual_version}; run it again")
        raise Refused(outcome.failure.code, outcome.failure.message)

    def close(self) -> None:
        self._stopped.set()
        self._client.close()
