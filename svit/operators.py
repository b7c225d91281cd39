"""What an operator looks at: the processes of a store, one process's health, its events.

The data behind ``svit ls``, ``svit status`` and ``svit events``, read from a store
(normally one opened with ``read_only=True``, so it works while a host, a server or an
agent holds the store). Nothing here writes.

* :func:`list_processes`: each address with its version, root hash, last commit time
  (when the store records commit times) and inbox depth, at most ``limit``.
* :func:`process_status`: version, root hash, the inbox depth and its oldest item (id,
  attempts, the version it arrived at and its age when known), set-aside and
  undeliverable counts, mail waiting to be delivered, the last failure, and a turn that
  started but neither finished nor failed.
* :class:`EventCursor`: the process's commits and the thread events of its current
  session, in order, one plain record each, page by page (``svit events --follow``
  polls it).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .loop.attempts import inbox_item_id, read_turn_state
from .loop.events import INPUT_MESSAGE, OUTPUT_MESSAGE, TOOL_COMPLETED, TOOL_STARTED, TURN_FAILED
from .store.events import StoreEventLog

if TYPE_CHECKING:
    from .store import DurableProcess, ProcessStore, Transaction
    from .thread import Event

__all__ = ["COMMIT_PAGE", "EventCursor", "MAX_LIST", "THREAD_PAGE", "commit_record", "list_processes",
           "process_status", "thread_record", "unfinished_turn"]

#: ``svit ls`` lists at most this many processes (``--limit`` between 1 and it).
MAX_LIST = 4096
#: Transactions and thread events read per step of an :class:`EventCursor`.
COMMIT_PAGE = 256
THREAD_PAGE = 16
#: How many of the newest ``/inbox`` transactions are searched for the one that brought
#: the oldest item (beyond it, the item's arrival is not reported).
_ARRIVAL_SEARCH = 1024


def _commit_millis(transaction: Transaction) -> int | None:
    """The commit's wall-clock time in ms, when the store records one (0: not recorded)."""
    value = getattr(transaction, "committed_at", None)
    return value if type(value) is int and value > 0 else None


def _inbox(handle: DurableProcess) -> list[Any]:
    items = handle.read("/inbox")
    return items if isinstance(items, list) else []


def _last_transaction(handle: DurableProcess) -> Transaction | None:
    position = handle.head.position
    if position is None:
        return None
    found = handle.query(after_position=position - 1 if position > 0 else None, through_position=position, limit=1)
    return found[-1] if found else None


def list_processes(store: ProcessStore, limit: int = 100) -> dict[str, Any]:
    """``{"processes": [...], "more": bool}``: the first ``limit`` addresses in key order,
    each ``{address, version, root_hash, last_commit_at (ms or None), inbox}``."""
    if type(limit) is not int or not 1 <= limit <= MAX_LIST:
        raise ValueError(f"limit must be 1-{MAX_LIST}")
    addresses = store.addresses()
    processes = []
    for address in addresses[:limit]:
        handle = store.resume(address)
        last = _last_transaction(handle)
        processes.append({
            "address": address,
            "inbox": len(_inbox(handle)),
            "last_commit_at": None if last is None else _commit_millis(last),
            "root_hash": handle.root_hash,
            "version": handle.version,
        })
    return {"more": len(addresses) > limit, "processes": processes}


def _arrival(handle: DurableProcess, item: Any) -> Transaction | None:
    """The newest retained transaction that appended ``item`` to ``/inbox`` (searching
    the last :data:`_ARRIVAL_SEARCH` transactions touching it), or None."""
    position = handle.head.position
    if position is None:
        return None
    start = position - _ARRIVAL_SEARCH * 4
    found = None
    after = start if start >= 0 else None
    while True:
        page = handle.query(after_position=after, path_prefix="/inbox", limit=_ARRIVAL_SEARCH)
        for transaction in page:
            for mutation in transaction.mutations:
                if mutation.get("operation") == "append" and mutation.get("path") == "/inbox" \
                        and item in mutation.get("values", []):
                    found = transaction
        if len(page) < _ARRIVAL_SEARCH:
            return found
        after = page[-1].position


def _session(handle: DurableProcess) -> str | None:
    thread = handle.read("/thread")
    session = thread.get("session_id") if isinstance(thread, dict) else None
    return session if isinstance(session, str) and session else None


def unfinished_turn(store: ProcessStore, address: str, session: str | None) -> dict[str, Any] | None:
    """The turn the newest events of ``session`` belong to, when it neither finished (a
    final answer) nor failed: ``{turn_id, last_event, sequence}``; None otherwise."""
    if session is None:
        return None
    events = StoreEventLog(store).recent(address, session, THREAD_PAGE)
    for event in reversed(events):
        if event.type == TURN_FAILED:
            return None
        message = event.data.get("message")
        if event.type == OUTPUT_MESSAGE and isinstance(message, dict) and not message.get("tool_calls"):
            return None
        turn_id = event.data.get("turn_id")
        if type(turn_id) is str and event.type in (INPUT_MESSAGE, OUTPUT_MESSAGE, TOOL_STARTED, TOOL_COMPLETED):
            return {"last_event": event.type, "sequence": event.sequence, "turn_id": turn_id}
    return None


def process_status(store: ProcessStore, address: str, *, now: float | None = None) -> dict[str, Any]:
    """One process's health, from its committed state, the mailbox and the thread log."""
    handle = store.resume(address)
    state = read_turn_state(handle.read("/thread"))
    failing = state["failing"]
    items = _inbox(handle)
    oldest: dict[str, Any] | None = None
    if items:
        item_id = inbox_item_id(items[0])
        arrived = _arrival(handle, items[0])
        at = None if arrived is None else _commit_millis(arrived)
        clock = time.time() if now is None else now
        oldest = {
            "age_seconds": None if at is None else max(0.0, round(clock - at / 1000, 3)),
            "arrived_at_version": None if arrived is None else arrived.process_version_after,
            "attempts": failing["attempts"] if failing is not None and failing["id"] == item_id else 0,
            "id": item_id,
            "retry_at": failing.get("retry_at") if failing is not None and failing["id"] == item_id else None,
        }
    last_failure = None
    if failing is not None:
        last_failure = {"error": failing.get("error"), "id": failing["id"], "where": "inbox head"}
    elif state["set_aside"]:
        newest = state["set_aside"][-1]
        last_failure = {"error": newest.get("error"), "id": newest["id"], "where": "set aside"}
    return {
        "address": address,
        "inbox": {"depth": len(items), "oldest": oldest},
        "last_failure": last_failure,
        "mail_waiting": len(store.mailbox.pending(address, 100)),
        "root_hash": handle.root_hash,
        "set_aside": len(state["set_aside"]),
        "undeliverable": len(store.mailbox.undeliverable(address)),
        "unfinished_turn": unfinished_turn(store, address, _session(handle)),
        "version": handle.version,
    }


def commit_record(transaction: Transaction) -> dict[str, Any]:
    """One commit as ``svit events`` prints it."""
    return {
        "address": transaction.address,
        "changed": list(transaction.touched_paths),
        "committed_at": _commit_millis(transaction),
        "kind": "commit",
        "root_hash": transaction.resulting_root_hash,
        "source": transaction.source,
        "version": transaction.process_version_after,
    }


def thread_record(address: str, event: Event) -> dict[str, Any]:
    """One thread event as ``svit events`` prints it (``at``: when the loop recorded it, ms)."""
    at = event.data.get("at")
    return {
        "address": address,
        "at": at if type(at) is int else None,
        "data": event.data,
        "kind": "thread",
        "sequence": event.sequence,
        "session_id": event.session_id,
        "type": event.type,
    }


class EventCursor:
    """Where an event listing of one address stands: the last commit position printed
    and, for the current session, the last thread event sequence.

    :meth:`poll` returns what was committed since the previous call: the commits first,
    then the session's thread events (a session that starts or changes is read from its
    beginning). Each call reads at most one page of each.
    """

    def __init__(self, store: ProcessStore, address: str, *, after_version: int = 0) -> None:
        self.store = store
        self.address = address
        self.after_version = after_version
        self.position: int | None = None
        self.session: str | None = None
        self.thread_after = 0
        self._session_read = False

    def poll(self) -> list[dict[str, Any]]:
        store = self.store
        store.follow()
        found = store.history.query(self.address, self.position, None, None, None, None, None, None, COMMIT_PAGE)
        out: list[dict[str, Any]] = []
        for transaction in found:
            self.position = transaction.position
            if transaction.process_version_after > self.after_version:
                self.after_version = transaction.process_version_after
                out.append(commit_record(transaction))
        if self.store.stored_head(self.address) is None:
            return out
        session = self.session
        if found or not self._session_read:  # only a commit can start or change the session
            session = _session(store.resume(self.address))
            self._session_read = True
        if session != self.session:
            self.session, self.thread_after = session, 0
        if self.session is not None:
            for event in StoreEventLog(store).events(self.address, self.session, self.thread_after, THREAD_PAGE):
                self.thread_after = event.sequence
                out.append(thread_record(self.address, event))
        return out
