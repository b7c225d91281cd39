"""Commit event streams: the store's durable transaction log, read forward from a version.

A stream reads one page of transactions at a time (in a worker thread), sends them, and
then waits: commits made through this server wake it at once (:class:`CommitFeed`); any
other writer (another OS process, a second machine on the same PostgreSQL database) is
seen at the next poll. The stream holds one page at most and sends the next only when
the client has taken the last one (the transport applies back-pressure), so a slow
client costs a bounded amount of memory; one that stops reading for ``send_timeout`` is
dropped.

Each commit becomes ``id: <version>``, ``event: commit``, ``data:
{"address", "version", "root_hash", "changed", "source"}`` (``changed``: the paths the
transaction touched). Resuming from version V yields every retained commit with a
version above V, in order.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import anyio.to_thread
from sse_starlette import ServerSentEvent

from ..errors import PersistenceNotFound
from ..store import ProcessStore, Transaction

__all__ = ["CommitFeed", "commit_event", "commit_stream", "commits_after", "head_version"]


class CommitFeed:
    """Wakes the streams of an address when this server commits to it (event loop only).

    Take a :meth:`ticket` before reading the store and :meth:`wait` on it after, so a
    commit made between the read and the wait is not missed."""

    def __init__(self) -> None:
        self._waiting: weakref.WeakValueDictionary[str, asyncio.Event] = weakref.WeakValueDictionary()

    def ticket(self, address: str) -> asyncio.Event:
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
    }
    return ServerSentEvent(json.dumps(data, ensure_ascii=False, separators=(",", ":")), event="commit",
                           id=str(transaction.process_version_after))


async def commit_stream(store: ProcessStore, address: str, after_version: int, feed: CommitFeed, *,
                        page: int, poll_seconds: float) -> AsyncGenerator[Any, None]:
    """Every commit of ``address`` above ``after_version``, then each new one, until the
    client leaves, the server stops or the address is removed."""
    version = after_version
    position: int | None = None
    while True:
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
        if len(found) < page:
            await feed.wait(ticket, poll_seconds)
