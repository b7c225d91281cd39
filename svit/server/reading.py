"""What the tree, history, mail and inbox routes of ``svit serve`` answer, as bounded JSON.

Blocking (the routes run these in a worker thread). Every answer names the address and
the version it was read at. Values of the tree cross in the tagged wire form of
``svit-control@1`` (``{"type", "value"}``, reference §3.4), so ``1`` and ``1.0`` and a
``/lib`` script come back exactly as the Python API returns them; mail lists are plain
JSON (no script can be below ``/inbox`` or ``/system/outbox``).

Bounds: a listing carries at most :data:`MAX_NAMES` names (``total`` and ``truncated``
say how many there are); a diff at most :data:`MAX_DIFFERENCES` entries; a log at most
:data:`MAX_LOG` transactions; each mail list at most :data:`MAX_MAIL_ITEMS` items.
A diff value, a mail item, or a read asked with ``cap`` that is larger than its cap is
cut (text and script sources keep their first bytes and say how many were left out) or,
for a container, left out with its size; a whole read is refused beyond
``max_answer_bytes``. Nothing here writes, except :func:`send`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..errors import InvalidPath, PersistenceConflict, ResourceLimitExceeded
from ..store import DurableProcess, ProcessStore, Transaction
from ..thread import Message
from ..values import Script, to_json, to_tagged

__all__ = ["CARRIED_BYTES", "MAX_DIFFERENCES", "MAX_LOG", "MAX_MAIL_ITEMS", "MAX_NAMES", "SEND_ATTEMPTS", "carried",
           "diff", "discover", "log", "mail", "read", "send", "stat"]

#: Names one listing carries at most (the console shows as many).
MAX_NAMES = 200
#: Differences one diff answer carries at most.
MAX_DIFFERENCES = 2000
#: Transactions one log answer carries at most.
MAX_LOG = 500
#: Items each mail list carries at most.
MAX_MAIL_ITEMS = 200
#: Mail waiting for delivery is read this far (as the console's store source does).
MAIL_WAITING_READ = 100
#: A diff value or a mail item larger than this (encoded) is cut or left out (the
#: console's previews are capped at 64 KiB too).
CARRIED_BYTES = 64 * 1024
#: A send that meets another writer's commit is tried again this often on the new head.
SEND_ATTEMPTS = 3

View = Any  # a DurableProcess or a VersionView: read, discover, stat, version


def _encoded_size(data: Any) -> int:
    return len(json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _cut_text(text: str, cap: int) -> tuple[str, int]:
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= cap:
        return text, 0
    kept = raw[:cap].decode("utf-8", errors="ignore")
    return kept, len(raw) - len(kept.encode("utf-8", "surrogatepass"))


def carried(value: Any, cap: int) -> tuple[dict[str, Any] | None, int]:
    """``(tagged value, bytes left out)``: the whole value when its encoding fits ``cap``;
    text, or a script's source and documentation, cut to ``cap`` bytes each on a
    character boundary; else None (a container too large) and its encoded size. Null,
    booleans and numbers always cross whole."""
    tagged = to_tagged(value)
    if type(value) not in (str, Script, list, dict):
        return tagged, 0  # null, a boolean or a number: a few bytes, always whole
    size = _encoded_size(tagged)
    if size <= cap:
        return tagged, 0
    if type(value) is str:
        text, cut = _cut_text(value, cap)
        return to_tagged(text), cut
    if type(value) is Script:
        source, cut = _cut_text(value.source, cap)
        documentation, cut_documentation = _cut_text(value.documentation, cap)
        return to_tagged(Script(source, documentation)), cut + cut_documentation
    return None, size


def _view(handle: DurableProcess, at: int | None) -> View:
    if at is None or at == handle.version:
        return handle
    return handle.at(at)


def _answer(handle: DurableProcess, view: View, **fields: Any) -> dict[str, Any]:
    return {"address": handle.address, "version": view.version, **fields}


def read(handle: DurableProcess, path: str, at: int | None, cap: int | None, max_answer_bytes: int) -> dict[str, Any]:
    """``{"address", "version", "path", "value"}`` (``"cut": N`` when ``cap`` cut it)."""
    view = _view(handle, at)
    value = view.read(path)
    if cap is not None:
        tagged, cut = carried(value, cap)
        if tagged is None:
            raise ResourceLimitExceeded(f"answer bytes: the value at {path} is {cut} bytes encoded, over cap {cap}; "
                                        "read below it or discover its names")
        answer = _answer(handle, view, path=path, value=tagged)
        if cut:
            answer["cut"] = cut
        return answer
    tagged = to_tagged(value)
    size = _encoded_size(tagged)
    if size > max_answer_bytes:
        raise ResourceLimitExceeded(f"answer bytes: the value at {path} is {size} bytes encoded, over the server's "
                                    f"{max_answer_bytes}; read below it, or pass cap for a preview")
    return _answer(handle, view, path=path, value=tagged)


def discover(handle: DurableProcess, path: str, at: int | None, offset: int, limit: int) -> dict[str, Any]:
    """``{"address", "version", "path", "names", "offset", "total", "truncated"}``: at most
    ``limit`` names from ``offset`` (``truncated``: names after them were left out)."""
    view = _view(handle, at)
    names = view.discover(path)
    shown = names[offset:offset + limit]
    return _answer(handle, view, path=path, names=shown, offset=offset, total=len(names),
                   truncated=offset + len(shown) < len(names))


def stat(handle: DurableProcess, path: str, at: int | None) -> dict[str, Any]:
    """``{"address", "version", "path", "stat"}`` (``stat`` is null for an absent path)."""
    view = _view(handle, at)
    return _answer(handle, view, path=path, stat=view.stat(path))


def diff(handle: DurableProcess, before: int, after: int, limit: int) -> dict[str, Any]:
    """``{"address", "from", "to", "differences", "total", "truncated"}``; each difference
    ``{"path", "kind", "before", "after"}`` (tagged; ``before_cut`` / ``after_cut`` when
    a side was cut, with ``before``/``after`` null when a container was left out)."""
    found = handle.diff(before, after)
    entries = []
    for difference in found[:limit]:
        entry: dict[str, Any] = {"path": difference.path, "kind": difference.kind}
        for side, value in (("before", difference.before), ("after", difference.after)):
            tagged, cut = carried(value, CARRIED_BYTES)
            entry[side] = tagged
            if cut:
                entry[f"{side}_cut"] = cut
        entries.append(entry)
    return {"address": handle.address, "from": before, "to": after, "differences": entries, "total": len(found),
            "truncated": len(found) > limit}


def transaction_record(transaction: Transaction) -> dict[str, Any]:
    """One transaction as the log route and the commit events carry it."""
    return {
        "version": transaction.process_version_after,
        "committed_at": transaction.committed_at or None,
        "source": transaction.source,
        "script": transaction.script,
        "output": transaction.output_summary,
        "changed": list(transaction.touched_paths),
        "root_hash": transaction.resulting_root_hash,
    }


def log(store: ProcessStore, handle: DurableProcess, limit: int, path: str | None) -> dict[str, Any]:
    """``{"address", "version", "transactions"}``: the newest ``limit`` retained
    transactions, newest first (only those touching ``path`` or below when given)."""
    found = store.versions.recent(handle.address, limit, path)
    return {"address": handle.address, "version": handle.version, "transactions": [transaction_record(t) for t in found]}


def _mail_item(item: Any) -> Any:
    data = to_json(item)
    size = _encoded_size(data)
    if size <= CARRIED_BYTES:
        return data
    kept = {key: data[key] for key in ("message_id", "id", "from", "to", "kind", "role", "reason")
            if isinstance(data, dict) and type(data.get(key)) is str}
    return {**kept, "omitted_bytes": size}


def _mail_list(items: Any) -> dict[str, Any]:
    found = items if isinstance(items, list) else []
    return {"items": [_mail_item(i) for i in found[:MAX_MAIL_ITEMS]], "total": len(found)}


def _optional(handle: DurableProcess, path: str) -> Any:
    try:
        return handle.read(path)
    except InvalidPath:  # /thread is null until a loop runs
        return None


def mail(store: ProcessStore, handle: DurableProcess) -> dict[str, Any]:
    """``{"address", "version", "inbox", "set_aside", "outbox", "undeliverable",
    "waiting"}``, each ``{"items", "total"}``: items not yet handled, items the loop set
    aside, outbox intents pending delivery, intents refused with their reason, and mail
    waiting to be delivered here (the first :data:`MAIL_WAITING_READ`)."""
    outbox = handle.read("/system/outbox")
    pending = [i for i in (outbox if isinstance(outbox, list) else []) if not (isinstance(i, dict) and i.get("undeliverable"))]
    return {
        "address": handle.address,
        "version": handle.version,
        "inbox": _mail_list(handle.read("/inbox")),
        "set_aside": _mail_list(_optional(handle, "/thread/turns/set_aside")),
        "outbox": _mail_list(pending),
        "undeliverable": _mail_list(store.mailbox.undeliverable(handle.address)),
        "waiting": _mail_list(store.mailbox.pending(handle.address, MAIL_WAITING_READ)),
    }


def send(reopen: Callable[[], DurableProcess], text: str) -> dict[str, Any]:
    """Put a user message (as ``svit chat`` and the console send it) at the end of
    ``/inbox`` in one commit: ``{"address", "version", "message_id"}``. A commit that
    meets another writer's is tried again on the new head (appending is safe to retry:
    the refused commit left nothing), at most :data:`SEND_ATTEMPTS` times."""
    message = Message.user(text)
    attempt = 1
    while True:
        handle = reopen()
        try:
            change = handle.enqueue_inbox(message.to_json())
        except PersistenceConflict:
            if attempt >= SEND_ATTEMPTS:
                raise
            attempt += 1
            continue
        return {"address": handle.address, "version": change.version, "message_id": message.id}
