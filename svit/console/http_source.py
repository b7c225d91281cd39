"""The console over a running ``svit serve`` (through :mod:`svit.client`).

The HTTP API carries heads, the commit stream (with each commit's changed paths), the
reasoning events of the current session and svit-control@1 activations, so over HTTP
the console shows the conversation and events live, the history of commits, and runs
``/lib`` scripts. It has no route to read, list or diff a process's tree, nor to reach
the inbox or the mailbox, so those panels say they are unavailable.
"""

from __future__ import annotations

import json
import queue
import threading
import uuid
from collections.abc import Mapping
from typing import Any

import httpx

from ..client import Client, ClientError
from ..control import Committed, Conflict
from .source import Commit, Difference, Note, Refused, TreeView, Unavailable

__all__ = ["HTTP_UNAVAILABLE", "HttpSource"]

_NO_ROUTE = "svit serve has no route to read a process tree"
HTTP_UNAVAILABLE: dict[str, str] = {
    "tree": f"{_NO_ROUTE} (open the store directly: svit console ADDR --store ...)",
    "at": f"{_NO_ROUTE} as of a version",
    "diff": "svit serve has no route to compare versions",
    "mail": "svit serve has no route to the inbox or the mailbox",
    "send": "svit serve has no route to the inbox (run a /lib script that sends instead)",
}


def _commit(data: dict[str, Any]) -> Commit:
    return Commit(int(data["version"]), str(data.get("source", "")), tuple(str(p) for p in data.get("changed", ())))


class HttpSource:
    """A :class:`~svit.console.source.ConsoleSource` over ``svit serve`` at ``base_url``."""

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
                self._notes.put(Note(f"error:{uuid.uuid4().hex}", "error", f"event stream ended: {exc}"))

    def head(self) -> int:
        return self._version

    def view(self, version: int | None = None) -> TreeView:
        raise Unavailable(HTTP_UNAVAILABLE["tree"])

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
        """The newest commits, read from the event stream from ``head - limit`` to the head."""
        head = int(self._client.process(self._address)["version"])
        found: list[Commit] = []
        if head == 0:
            return found
        for data in self._client.events(self._address, max(0, head - limit)):
            found.append(_commit(data))
            if found[-1].version >= head:
                break
        return list(reversed(found[-limit:]))

    def diff(self, before: int, after: int) -> list[Difference]:
        raise Unavailable(HTTP_UNAVAILABLE["diff"])

    def conversation(self) -> list[Note]:
        notes: list[Note] = []
        while True:
            try:
                notes.append(self._notes.get_nowait())
            except queue.Empty:
                return notes

    def mail(self) -> dict[str, list[Any]]:
        raise Unavailable(HTTP_UNAVAILABLE["mail"])

    def send(self, text: str) -> int:
        raise Unavailable(HTTP_UNAVAILABLE["send"])

    def run(self, script: str, input: Any) -> str:
        """One svit-control@1 activation at the current head (a conflict is reported, not retried)."""
        name = script.removeprefix("/lib/")
        head = int(self._client.process(self._address)["version"])
        try:
            answer = self._client.activate(self._address, name, input, expected_version=head, client_id=self._client_id)
        except ClientError as exc:
            raise Refused(exc.code, exc.message) from None
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
