"""The console over a process store (embedded RocksDB or PostgreSQL), read directly.

Browsing reads through a durable handle that is replaced by a fresh one whenever the
stored head moves (another thread, host or process committed), so the tree always shows
committed state. Changed paths come from the store's transaction records. Sending and
running need a writer: by default the same handle; a store opened read-only is given a
``writer`` that opens one on demand and says clearly when another process holds it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ..errors import InvalidPath
from ..store import DurableProcess, ProcessStore, Transaction
from ..store.events import StoreEventLog
from ..thread import Message
from .source import Commit, Difference, Note, TreeView, Unavailable, item_key, item_text

__all__ = ["CONVERSATION_ITEMS", "StoreSource"]

#: Inbox items, outbox intents and runtime events the conversation panel reads at most.
CONVERSATION_ITEMS = 50


class StoreSource:
    """A :class:`~svit.console.source.ConsoleSource` over ``store``'s process ``address``."""

    def __init__(self, store: ProcessStore, address: str, *,
                 writer: Callable[[], AbstractContextManager[DurableProcess]] | None = None,
                 handle: DurableProcess | None = None) -> None:
        """``handle``: start from this handle (one with mount providers attached, so
        mounts browse like memory; a fresh handle keeps them) instead of resuming one."""
        self._store = store
        self._handle = handle if handle is not None else store.resume(address)
        self._writer = writer
        self._thread_seen = 0
        self._session: str | None = None
        self._items_read_at = -1
        missing: dict[str, str] = {}
        if store.read_only and writer is None:
            missing["send"] = missing["run"] = "the store is open read-only"
        self._unavailable = missing

    @property
    def address(self) -> str:
        return self._handle.address

    @property
    def unavailable(self) -> Mapping[str, str]:
        return self._unavailable

    @property
    def handle(self) -> DurableProcess:
        """The current reading handle (fresh after another writer's commit)."""
        return self._handle

    def _follow(self) -> DurableProcess:
        self._store.follow()  # a read-only store catches up with its writer now
        if self._handle.behind():
            self._handle = self._handle.resumed()
        return self._handle

    def head(self) -> int:
        return self._follow().version

    def view(self, version: int | None = None) -> TreeView:
        handle = self._follow()
        if version is None or version == handle.version:
            return handle
        return handle.at(version)

    def commits_after(self, version: int, limit: int = 200) -> list[Commit]:
        handle = self._follow()
        if handle.version <= version:
            return []
        found = handle.query(version_from=version + 1, limit=limit)
        return [_commit(t) for t in found]

    def history(self, limit: int = 200) -> list[Commit]:
        handle = self._follow()
        found = handle.query(version_from=max(1, handle.version - limit + 1), limit=limit)
        return [_commit(t) for t in reversed(found)]

    def diff(self, before: int, after: int) -> list[Difference]:
        found = self._follow().diff(before, after)
        return [Difference(d.path, d.kind, d.before, d.after) for d in found]

    def conversation(self) -> list[Note]:
        handle = self._follow()
        notes: list[Note] = []
        if handle.version != self._items_read_at:  # inbox and outbox change only with a commit
            self._items_read_at = handle.version
            for kind, path in (("inbox", "/inbox"), ("outbox", "/system/outbox")):
                items = handle.read(path)
                for item in (items if isinstance(items, list) else [])[-CONVERSATION_ITEMS:]:
                    notes.append(Note(item_key(kind, item), kind, item_text(item)))
        session = _optional(handle, "/thread/session_id")
        if isinstance(session, str):
            if session != self._session:
                self._session, self._thread_seen = session, 0
            log = StoreEventLog(self._store)
            for event in log.events(self.address, session, self._thread_seen, CONVERSATION_ITEMS):
                self._thread_seen = event.sequence
                notes.append(Note(f"event:{session}:{event.sequence}", "event",
                                  f"{event.type} {json.dumps(event.data, ensure_ascii=False, sort_keys=True)[:160]}"))
        return notes

    def mail(self) -> dict[str, list[Any]]:
        handle = self._follow()
        outbox = handle.read("/system/outbox")
        outbox = outbox if isinstance(outbox, list) else []
        set_aside = _optional(handle, "/thread/turns/set_aside")
        inbox = handle.read("/inbox")
        return {
            "inbox (not yet handled)": inbox if isinstance(inbox, list) else [],
            "set aside by the loop": set_aside if isinstance(set_aside, list) else [],
            "outbox (pending delivery)": [i for i in outbox if not (isinstance(i, dict) and i.get("undeliverable"))],
            "undeliverable": self._store.mailbox.undeliverable(self.address),
            "waiting for delivery here": self._store.mailbox.pending(self.address),
        }

    def _writing(self) -> AbstractContextManager[DurableProcess]:
        if "send" in self._unavailable:
            raise Unavailable(self._unavailable["send"])
        if self._writer is not None:
            return self._writer()
        return nullcontext(self._follow())

    def send(self, text: str) -> int:
        with self._writing() as writer:
            return writer.enqueue_inbox(Message.user(text).to_json()).version

    def run(self, script: str, input: Any) -> str:
        path = script if script.startswith("/lib/") else f"/lib/{script}"
        with self._writing() as writer:
            activation = writer.exec(path, input)
        return f"{path} -> {json.dumps(activation.output, ensure_ascii=False)[:200]} (version {activation.version})"

    def close(self) -> None:
        self._handle.close()


def _commit(t: Transaction) -> Commit:
    return Commit(t.process_version_after, t.source, tuple(t.touched_paths), t.committed_at, t.script, t.output_summary)


def _optional(handle: DurableProcess, path: str) -> Any:
    """The value at ``path``, or None where a parent is not a container (``/thread`` is
    null until a loop runs)."""
    try:
        return handle.read(path)
    except InvalidPath:
        return None
