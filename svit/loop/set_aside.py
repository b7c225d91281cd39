"""What an operator does with a process's inbox: list what is pending and what was set
aside, put a set-aside item back, or drop it (``svit inbox``).

Each change is one commit of the process, named in its history (``inbox.retry``,
``inbox.drop``), so what an operator did is as visible as what the loop did. The
set-aside list is ``/thread/turns/set_aside`` (see :mod:`svit.loop.attempts`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .attempts import inbox_item_id, read_turn_state, thread_with_turn_state
from .errors import SetAsideNotFound

if TYPE_CHECKING:
    from ..process import Change
    from ..protocol import HostedProcess

__all__ = ["MAX_LISTED", "SOURCE_DROP", "SOURCE_RETRY", "drop_set_aside", "inbox_report", "retry_set_aside"]

#: At most this many pending items are listed (the report says how many there are).
MAX_LISTED = 100

SOURCE_RETRY = "inbox.retry"
SOURCE_DROP = "inbox.drop"


def inbox_report(process: HostedProcess, *, limit: int = MAX_LISTED) -> dict[str, Any]:
    """The pending inbox items in order (the head with its attempts, next retry time and
    last error when it has failed) and every set-aside item with its error."""
    state = read_turn_state(process.read("/thread"))
    failing = state["failing"]
    items = process.read("/inbox")
    items = items if isinstance(items, list) else []
    pending = []
    for position, item in enumerate(items[:limit]):
        item_id = inbox_item_id(item)
        entry: dict[str, Any] = {"attempts": 0, "id": item_id, "item": item, "last_error": None, "retry_at": None}
        if position == 0 and failing is not None and failing["id"] == item_id:
            entry.update(attempts=failing["attempts"], last_error=failing.get("error"), retry_at=failing.get("retry_at"))
        pending.append(entry)
    return {
        "address": process.address,
        "pending": pending,
        "pending_count": len(items),
        "set_aside": state["set_aside"],
        "version": process.version,
    }


def _take(process: HostedProcess, item_id: str) -> tuple[Any, dict[str, Any], dict[str, Any] | None, list[dict[str, Any]]]:
    thread = process.read("/thread")
    state = read_turn_state(thread)
    remaining = [entry for entry in state["set_aside"] if entry["id"] != item_id]
    if len(remaining) == len(state["set_aside"]):
        raise SetAsideNotFound(f"{item_id} (svit inbox ADDR lists the set-aside items)")
    taken = next(entry for entry in state["set_aside"] if entry["id"] == item_id)
    return thread, taken, state["failing"], remaining


def retry_set_aside(process: HostedProcess, item_id: str) -> Change:
    """Put the set-aside item ``item_id`` back at the end of the inbox, its attempts reset
    (one commit: the item leaves the list and joins the inbox together)."""
    thread, taken, failing, remaining = _take(process, item_id)
    updated = thread_with_turn_state(thread, failing, remaining)
    return process.in_memory().update_inbox_and_thread(updated, SOURCE_RETRY, append=[taken.get("item")])


def drop_set_aside(process: HostedProcess, item_id: str) -> Change:
    """Remove the set-aside item ``item_id`` for good (one commit; the history keeps it)."""
    thread, _taken, failing, remaining = _take(process, item_id)
    return process.in_memory().update_inbox_and_thread(thread_with_turn_state(thread, failing, remaining), SOURCE_DROP)
