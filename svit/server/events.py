"""Commit event streams: the store's durable transaction log, read forward from a version.

A stream reads one page of transactions at a time (in a worker thread), sends them, and
then waits: commits made through this server wake it at once (:class:`CommitFeed`); any
other writer (another OS process, a second machine on the same PostgreSQL database) is
seen at the next poll. The stream holds one page at most and sends the next only when
the client has taken the last one (the transport applies back-pressure), so a slow
client costs a bounded amount of memory; one that stops reading for ``send_timeout`` is
dropped.

Each commit becomes ``id: <version>``, ``event: commit``, ``data:
{"address", "version", "root_hash", "changed", "source", "committed_at", "script",
"output"}`` (``changed``: the paths the transaction touched; ``committed_at``: when the
store committed it, ms since the Unix epoch, null when not recorded; ``script`` and
``output``: the script an activation ran and a bounded summary of its output, else null). Resuming from version V yields every retained commit with a
version above V, in order.

With ``threads`` on, the stream also carries the reasoning events of the process's
current session (the store's durable thread log, ``/thread/session_id`` names the
session) as ``event: thread``, ``data: {"session_id", "sequence", "type", "data"}``,
without an ``id`` line, so ``Last-Event-ID`` keeps naming the last commit; a client
resumes them with their own sequence (``thread_from``). They are read a few at a time
(one event may be large) and, being written by the loop rather than this server, are
seen at the next poll.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncGenerator, Callable
from typing import Any

import anyio
import anyio.to_thread
from sse_starlette import ServerSentEvent

from ..errors import PersistenceNotFound
from ..store import ProcessStore, Transaction
from ..store.events import StoreEventLog
from ..thread import Event

__all__ = ["THREAD_PAGE", "CommitFeed", "SessionOf", "commit_event", "commit_stream", "commits_after", "head_version",
           "thread_event", "thread_events_after"]

#: Thread events read per step (an event may be up to 16 MiB, so few at a time).
THREAD_PAGE = 4

#: The current session id of an address (blocking), or None when it has no thread.
SessionOf = Callable[[str], "str | None"]


class CommitFeed:
    """Wakes the streams of an address when this server commits to it (event loop only).

    Take a :meth:`ticket` before reading the store and :meth:`wait` on it after, so a
    commit made between the read and the wait is not missed."""

    def __init__(self) -> None:
        self._waiting: weakref.WeakValueDictionary[str, asyncio.Event] = weakref.WeakValueDictionary()
        #: Set when the server stops: every stream ends at its next step.
        self.closed = False

    def close(self) -> None:
        """End every stream (the server is stopping); wakes the waiting ones."""
        self.closed = True
        for event in list(self._waiting.values()):
            event.set()
        self._waiting.clear()

    def ticket(self, address: str) -> asyncio.Event:
        if self.closed:
            done = asyncio.Event()
            done.set()
            return done
        event = self._waiting.get(address)
        if event is None:
            event = asyncio.Event()
            self._waiting[address] = event
        return event

    def notify(self, address: str) -> None:
        event = self._waiting.pop(address, None)
        if event is not None:
            event.set()

    @staticmethod
    async def wait(ticket: asyncio.Event, timeout: float) -> None:
        with anyio.move_on_after(timeout):
            await ticket.wait()


def head_version(store: ProcessStore, address: str) -> int:
    """The stored version of ``address`` (``PersistenceNotFound`` when absent)."""
    head = store.stored_head(address)
    if head is None:
        raise PersistenceNotFound(address)
    return int(head["process_version"])


def commits_after(store: ProcessStore, address: str, version: int, after_position: int | None, limit: int) -> list[Transaction]:
    """Retained transactions of ``address`` producing a version above ``version``, in order.

    ``after_position`` is where the previous page ended; on the first page it is found
    from the head (each transaction adds at least one version, so the transaction that
    produced ``version`` sits at or after ``head position - (head version - version)``).
    """
    head = store.stored_head(address)
    if head is None:
        raise PersistenceNotFound(address)
    if head["process_version"] <= version or head["position"] is None:
        return []
    if after_position is None:
        estimate = head["position"] - (head["process_version"] - version)
        after_position = estimate if estimate >= 0 else None
    return store.history.query(address, after_position, None, None, None, version + 1, None, None, limit)


def commit_event(transaction: Transaction) -> ServerSentEvent:
    data = {
        "address": transaction.address,
        "version": transaction.process_version_after,
        "root_hash": transaction.resulting_root_hash,
        "changed": list(transaction.touched_paths),
        "source": transaction.source,
        "committed_at": transaction.committed_at or None,
        "script": transaction.script,
        "output": transaction.output_summary,
    }
    return ServerSentEvent(json.dumps(data, ensure_ascii=False, separators=(",", ":")), event="commit",
                           id=str(transaction.process_version_after))


def thread_events_after(store: ProcessStore, address: str, session_id: str, after: int) -> list[Event]:
    return StoreEventLog(store).events(address, session_id, after, THREAD_PAGE)


def thread_event(event: Event) -> ServerSentEvent:
    data = {"session_id": event.session_id, "sequence": event.sequence, "type": event.type, "data": event.data}
    return ServerSentEvent(json.dumps(data, ensure_ascii=False, separators=(",", ":")), event="thread")


def _moves_session(transaction: Transaction) -> bool:
    return any(path in ("/", "/thread", "/thread/session_id") for path in transaction.touched_paths)


class _ThreadCursor:
    """Where a stream stands in the current session's thread log."""

    def __init__(self, session_of: SessionOf, after: int | None) -> None:
        self.session_of = session_of
        self.session: str | None = None
        self.after = after
        self.started = False
        self.stale = True

    def refresh(self, store: ProcessStore, address: str) -> None:
        """Re-read the session id. The first session a stream sees starts after
        ``thread_from`` (default: its last event); a session that appears or replaces
        another later starts from its beginning."""
        session = self.session_of(address)
        if session != self.session or not self.started:
            if not self.started and session is not None:
                if self.after is None:
                    self.after = StoreEventLog(store).last_sequence(address, session)
            else:
                self.after = 0
            self.session = session
        self.started = True
        self.stale = False

    def read(self, store: ProcessStore, address: str) -> list[Event]:
        """The next few events; when the session moved, the old one's rest comes first."""
        if self.stale:
            if self.started and self.session is not None and self.session_of(address) != self.session:
                rest = thread_events_after(store, address, self.session, self.after or 0)
                if rest:
                    return rest  # still stale: the switch happens once the old session is drained
            self.refresh(store, address)
        if self.session is None:
            return []
        return thread_events_after(store, address, self.session, self.after or 0)


async def commit_stream(store: ProcessStore, address: str, after_version: int, feed: CommitFeed, *,
                        page: int, poll_seconds: float, session_of: SessionOf | None = None,
                        thread_from: int | None = None) -> AsyncGenerator[Any, None]:
    """Every commit of ``address`` above ``after_version``, then each new one, until the
    client leaves, the server stops or the address is removed; with ``session_of``, the
    current session's thread events too (after sequence ``thread_from``; default: new ones)."""
    version = after_version
    position: int | None = None
    cursor = _ThreadCursor(session_of, thread_from) if session_of is not None else None
    while not feed.closed:
        ticket = feed.ticket(address)
        try:
            found = await anyio.to_thread.run_sync(commits_after, store, address, version, position, page)
        except PersistenceNotFound:
            return
        for transaction in found:
            position = transaction.position
            if transaction.process_version_after > version:
                version = transaction.process_version_after
                yield commit_event(transaction)
            if cursor is not None and _moves_session(transaction):
                cursor.stale = True
        more = len(found) >= page
        if cursor is not None:
            try:
                events = await anyio.to_thread.run_sync(cursor.read, store, address)
            except PersistenceNotFound:
                return
            for event in events:
                cursor.after = event.sequence
                yield thread_event(event)
            more = more or len(events) >= THREAD_PAGE
        if not more:
            await feed.wait(ticket, poll_seconds)
