"""One reason/act turn for the committed inbox head, and what happens when it fails.

:func:`next_turn` is the whole turn contract without a thread (the public entry point is
:func:`svit.loop.turns.run_next_turn`): it handles the head of ``/inbox`` with one turn
and returns a :class:`TurnOutcome`, never sleeping. The Svit worker thread is a loop over
it (sleeping until ``retry_at`` itself); a host with many processes calls it from a pool.

A failed turn does not block the inbox forever. The item stays at the head and is tried
again after an exponential backoff (``base * 2**(attempts - 1)`` seconds, capped); the
attempt count, the next retry time and the last error are committed to the process's
``/thread/turns``, so a restart continues the count. A failure that cannot succeed on a
retry (a bad request, rejected credentials, a missing model, an item that is not a
message), or the last allowed attempt, moves the item to the process's set-aside list in
the same commit that removes it from the inbox, with its error, and the next item is next.
Operators list, retry and drop set-aside items (:mod:`svit.loop.set_aside`,
``svit inbox``).

``/thread/turns`` (absent until a turn fails)::

    {"failing": {"id", "attempts", "retry_at", "error"} | null,
     "set_aside": [{"id", "item", "attempts", "error", "set_aside_at"}, ...]}

An error record is ``{"code", "message", "retryable"}`` plus what is known: the HTTP
``status``, the provider's ``error_type`` and ``provider_message``, the ``usage`` of a
reply cut off for length, and the chained ``cause`` (``{"type", "message"}``), every text
redacted of credentials.
"""

from __future__ import annotations

import inspect
import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import telemetry, tree
from ..errors import InboxConflict, InvalidValue, ResourceLimitExceeded, SvitError, sanitize
from ..redact import redact
from .aio import run_on_host_loop
from .errors import InvalidInboxItem, InvalidThread, MissingOutboxMessage, ReasonerFailed, ReplyTruncated, TurnFailed
from .events import INPUT_MESSAGE, MAX_WINDOW, OUTPUT_MESSAGE, TOOL_COMPLETED, TOOL_STARTED, TURN_FAILED, message_of
from .messages import Message, Reply
from .tools import TOOL_SPECS, run_tool

if TYPE_CHECKING:
    from ..protocol import HostedProcess
    from .svit import Svit

__all__ = [
    "INTERRUPTED_TEXT",
    "MAX_ITERATIONS_TEXT",
    "MAX_SET_ASIDE",
    "TURNS_KEY",
    "TurnOutcome",
    "backoff_delay",
    "failure_record",
    "inbox_item_id",
    "inbox_message",
    "next_turn",
    "read_turn_state",
    "thread_with_turn_state",
    "turn_failure_text",
]

_log = logging.getLogger("svit.loop")

MAX_ITERATIONS_TEXT = "maximum reason/act iterations reached before a final answer"
INTERRUPTED_TEXT = "the turn was interrupted before it completed"

#: The key of ``/thread`` that holds the failing head and the set-aside list.
TURNS_KEY = "turns"
#: At most this many set-aside items per process; a failing item beyond it stays at the
#: inbox head (retried at the backoff cap) rather than being dropped.
MAX_SET_ASIDE = 1000

# Commit sources (what ``svit log`` shows for each bookkeeping commit).
SOURCE_RETRY_SCHEDULED = "loop.retry_scheduled"
SOURCE_SET_ASIDE = "loop.set_aside"
SOURCE_ACKNOWLEDGE = "loop.acknowledge"


@dataclass(frozen=True)
class TurnOutcome:
    """What one call of :func:`run_next_turn` did.

    ``kind``: ``"empty"`` (no inbox item), ``"done"`` (the head was answered and
    acknowledged; ``reply`` is the answer), ``"retry"`` (the head failed, or is not due
    yet: call again at ``retry_at``, seconds since the epoch), ``"set_aside"`` (the head
    moved to the set-aside list; the next item is next). ``error`` is the failure's
    record for ``"retry"`` and ``"set_aside"``.
    """

    kind: str
    item_id: str | None = None
    retry_at: float | None = None
    error: dict[str, Any] | None = None
    reply: Message | None = None


# ---------------------------------------------------------------------- failures


def turn_failure_text(exc: BaseException) -> str:
    """The diagnostic of a failed turn, for the host (``turn.failed`` and ``block``): one
    line, capped, credentials redacted, never a traceback.

    Unlike :func:`svit.failure_text` (what a script sees of a port failure: only an
    exception's kind), the host is shown the exception's own text.
    """
    if isinstance(exc, TurnFailed):
        text = exc.detail
    elif isinstance(exc, SvitError):
        text = exc.message
    else:
        text = str(exc) or type(exc).__name__
    return sanitize(redact(" ".join(text.split())))


def failure_record(exc: BaseException) -> dict[str, Any]:
    """A failed turn's error as data: code, message, whether a retry may help, the
    provider's facts, and the chained cause; credentials redacted."""
    retryable = getattr(exc, "retryable", True)
    record: dict[str, Any] = {
        "code": exc.code if isinstance(exc, SvitError) else "internal",
        "message": turn_failure_text(exc),
        "retryable": retryable if type(retryable) is bool else True,
    }
    if isinstance(exc, ReasonerFailed):
        record.update(exc.facts())
    if isinstance(exc, ReplyTruncated) and exc.usage:
        record["usage"] = dict(exc.usage)
        record["finish_reason"] = "length"
    cause = exc.__cause__
    if cause is not None:
        record["cause"] = {
            "type": sanitize(type(cause).__name__, 128),
            "message": sanitize(redact(" ".join((str(cause) or type(cause).__name__).split())), 300),
        }
    return record


def backoff_delay(attempts: int, base: float, cap: float) -> float:
    """Seconds to wait after the ``attempts``-th failure: ``base * 2**(attempts - 1)``, capped."""
    exponent = min(max(attempts - 1, 0), 62)
    return float(min(cap, base * (2**exponent)))


# ---------------------------------------------------------------------- inbox items


def inbox_item_id(item: Any) -> str:
    """The id an inbox item is known by: a message's ``id``, a delivered message's
    ``message_id``, otherwise ``item-`` and the start of its content hash."""
    if isinstance(item, dict):
        for key in ("message_id", "id"):
            value = item.get(key)
            if type(value) is str and value:
                return sanitize(value, 256)
    return "item-" + tree.from_value(item, scripts_allowed=False).hash[:24]


def inbox_message(item: Any) -> Message:
    """What the model is shown for an inbox item: a :class:`Message` as sent, or a
    delivered message (``{"kind": "message", "message_id", "from", "body"}``) as a user
    message from its sender."""
    if isinstance(item, dict) and item.get("kind") == "message":
        sender, body, message_id = item.get("from"), item.get("body"), item.get("message_id")
        if type(sender) is not str or type(message_id) is not str or not message_id:
            raise InvalidInboxItem("a delivered message needs text from and message_id")
        text = body if type(body) is str else _json_text(body)
        return Message.user(f"Message from {sender}:\n{text}", id=message_id)
    try:
        return Message.from_json(item)
    except (InvalidValue, TypeError, ValueError) as exc:
        detail = exc.detail if isinstance(exc, SvitError) else str(exc)
        raise InvalidInboxItem(detail) from None


def _json_text(value: Any) -> str:
    import json  # noqa: PLC0415 - only delivered non-text bodies need it

    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


# ---------------------------------------------------------------------- /thread/turns


def read_turn_state(thread: Any) -> dict[str, Any]:
    """``/thread/turns`` as ``{"failing": dict | None, "set_aside": list}`` (empty when absent)."""
    state = thread.get(TURNS_KEY) if isinstance(thread, dict) else None
    if state is None:
        return {"failing": None, "set_aside": []}
    if not isinstance(state, dict):
        raise InvalidThread("/thread/turns must be a map")
    failing = state.get("failing")
    set_aside = state.get("set_aside", [])
    if failing is not None and not (isinstance(failing, dict) and type(failing.get("id")) is str
                                    and type(failing.get("attempts")) is int):
        raise InvalidThread("/thread/turns/failing must be null or a map with id and attempts")
    if not isinstance(set_aside, list) or not all(isinstance(e, dict) and type(e.get("id")) is str for e in set_aside):
        raise InvalidThread("/thread/turns/set_aside must be a list of maps with an id")
    return {"failing": failing, "set_aside": list(set_aside)}


def thread_with_turn_state(thread: Any, failing: dict[str, Any] | None, set_aside: list[dict[str, Any]]) -> dict[str, Any]:
    """``thread`` with ``/thread/turns`` replaced (the key left out when there is nothing to keep)."""
    if not isinstance(thread, dict):
        raise InvalidThread("/thread must be a map")
    updated = {key: value for key, value in thread.items() if key != TURNS_KEY}
    if failing is not None or set_aside:
        updated[TURNS_KEY] = {"failing": failing, "set_aside": set_aside}
    return updated


# ---------------------------------------------------------------------- the turn


def next_turn(agent: Svit, *, reasoner: Any = None, now: float | None = None) -> TurnOutcome:
    """:func:`svit.loop.turns.run_next_turn` over an open Svit (its worker thread calls
    this); ``reasoner`` defaults to the Svit's own.

    Observed: a ``svit.turn`` span (the ``otel`` extra, :mod:`svit.telemetry`) and
    ``svit.loop`` log records for a turn started, finished, failed or set aside, naming
    the address, the item id and the error's code and redacted message, never the
    conversation."""
    with telemetry.span("svit.turn", **{"svit.address": agent.address}) as span:
        outcome = _next_turn(agent, reasoner, now)
        span.set("svit.turn.outcome", outcome.kind)
        span.set("svit.inbox.item_id", outcome.item_id)
        if outcome.error is not None:
            span.set("svit.error.code", str(outcome.error.get("code")))
    if outcome.kind == "done":
        _log.info("turn finished: %s item %s", agent.address, outcome.item_id)
    elif outcome.kind == "set_aside":
        _log.warning("turn failed, item set aside: %s item %s: %s", agent.address, outcome.item_id,
                     _error_summary(outcome.error))
    elif outcome.kind == "retry" and outcome.error is not None:
        _log.warning("turn failed, retry at %s: %s item %s: %s", _utc(outcome.retry_at), agent.address, outcome.item_id,
                     _error_summary(outcome.error))
    return outcome


def _error_summary(record: dict[str, Any] | None) -> str:
    if not isinstance(record, dict):
        return "unknown failure"
    return f"{record.get('code', 'unknown')}: {redact(str(record.get('message', '')))}"


def _utc(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _next_turn(agent: Svit, reasoner: Any, now: float | None) -> TurnOutcome:
    process = agent.process
    head = process.inbox_front()
    if head is None:
        return TurnOutcome("empty")
    clock = time.time() if now is None else now
    item_id = inbox_item_id(head)
    failing = _failing_for(process.read("/thread"), item_id)
    if agent.worker.claim_tail_check():
        interrupted = _close_interrupted_turn(agent)
        if interrupted is not None:
            outcome = _failed(agent, head, item_id, interrupted, clock)
            if outcome.kind != "retry":
                return outcome
            failing = _failing_for(process.read("/thread"), item_id)
    if failing is not None:
        retry_at = failing.get("retry_at")
        if isinstance(retry_at, (int, float)) and retry_at > clock:
            return TurnOutcome("retry", item_id, float(retry_at), failing.get("error"))

    turn_id = uuid.uuid4().hex
    _log.debug("turn started: %s item %s", agent.address, item_id)
    try:
        message = inbox_message(head)
        agent.worker.record(INPUT_MESSAGE, {"message": message.to_json(), "turn_id": turn_id})
        final = _reason(agent, turn_id, reasoner if reasoner is not None else agent.options.reasoner_object)
    except Exception as exc:
        record = failure_record(exc)
        _record_failed(agent, turn_id, record)
        # The backoff counts from the failure, not from the start of a turn that took a while.
        return _failed(agent, head, item_id, record, time.time() if now is None else now)
    except BaseException as exc:  # an interrupt: recorded, never swallowed
        _record_failed(agent, turn_id, failure_record(exc))
        raise
    try:
        agent.worker.committed(_acknowledge(process, head))
    except InboxConflict as exc:
        # Someone else changed the inbox while the turn ran: this answer is not published
        # and whatever is at the head now is next.
        record = failure_record(exc)
        _record_failed(agent, turn_id, record)
        return TurnOutcome("retry", item_id, clock, record)
    return TurnOutcome("done", item_id, reply=final)


def _failing_for(thread: Any, item_id: str) -> dict[str, Any] | None:
    failing = read_turn_state(thread)["failing"]
    return failing if failing is not None and failing["id"] == item_id else None


def _record_failed(agent: Svit, turn_id: str, record: dict[str, Any]) -> None:
    agent.worker.record(TURN_FAILED, {"error": record["message"], "failure": record, "turn_id": turn_id})


def _acknowledge(process: HostedProcess, head: Any) -> Any:
    """Remove the answered head; a failing record left by its earlier attempts goes in the
    same commit."""
    thread = process.read("/thread")
    state = read_turn_state(thread)
    if state["failing"] is None:
        return process.acknowledge_inbox(head)
    updated = thread_with_turn_state(thread, None, state["set_aside"])
    return process.in_memory().update_inbox_and_thread(updated, SOURCE_ACKNOWLEDGE, remove=True, remove_head=head)


def _failed(agent: Svit, head: Any, item_id: str, record: dict[str, Any], now: float) -> TurnOutcome:
    """Count a failed attempt of the head: schedule its retry, or set it aside."""
    process = agent.process
    options = agent.options
    thread = process.read("/thread")
    state = read_turn_state(thread)
    previous = state["failing"] if state["failing"] is not None and state["failing"]["id"] == item_id else None
    attempts = (previous["attempts"] if previous is not None else 0) + 1
    set_aside: list[dict[str, Any]] = state["set_aside"]
    give_up = not record["retryable"] or attempts >= options.attempts
    try:
        refused = f"the set-aside list already holds {MAX_SET_ASIDE} items"
        if give_up and len(set_aside) < MAX_SET_ASIDE:
            entry = {
                "attempts": attempts,
                "error": record,
                "id": _unique_id(item_id, set_aside),
                "item": head,
                "set_aside_at": now,
            }
            updated = thread_with_turn_state(thread, None, set_aside + [entry])
            try:
                change = process.in_memory().update_inbox_and_thread(updated, SOURCE_SET_ASIDE, remove=True, remove_head=head)
            except (InvalidValue, ResourceLimitExceeded) as exc:  # /thread would outgrow its limits
                refused = exc.message
            else:
                agent.worker.committed(change)
                return TurnOutcome("set_aside", entry["id"], None, record)
        if give_up:  # the item cannot be set aside: it waits at the head, never dropped
            record = dict(record, set_aside_refused=refused)
            retry_at = now + options.backoff_cap
        else:
            retry_at = now + backoff_delay(attempts, options.backoff_base, options.backoff_cap)
        failing = {"attempts": attempts, "error": record, "id": item_id, "retry_at": retry_at}
        change = process.in_memory().update_inbox_and_thread(
            thread_with_turn_state(thread, failing, set_aside), SOURCE_RETRY_SCHEDULED
        )
        agent.worker.committed(change)
        return TurnOutcome("retry", item_id, retry_at, record)
    except InboxConflict:  # the head changed under the turn: it is no longer this item's to count
        return TurnOutcome("retry", item_id, now, record)


def _unique_id(item_id: str, set_aside: list[dict[str, Any]]) -> str:
    taken = {entry["id"] for entry in set_aside}
    if item_id not in taken:
        return item_id
    n = 2
    while f"{item_id}#{n}" in taken:
        n += 1
    return f"{item_id}#{n}"


def _close_interrupted_turn(agent: Svit) -> dict[str, Any] | None:
    """Mark the session's last turn failed if it neither finished nor failed (its host went
    away mid-turn), so the retry does not show the model its partial steps; returns the
    failure record (an attempt of the head) or None.

    The turn is named by its newest step, not found by its input: a checkpoint and a cut
    may already have removed the input, and what the model sees must not depend on the
    cut. The newest few events decide almost always; the full window only otherwise."""
    for window in (16, MAX_WINDOW):
        events = agent.event_log.recent(agent.address, agent.session_id, window)
        for event in reversed(events):
            if event.type == TURN_FAILED:
                return None
            if event.type == OUTPUT_MESSAGE:
                message = message_of(event)
                if message is not None and not message.tool_calls:
                    return None
            turn_id = event.data.get("turn_id")
            if turn_id is not None and event.type in (INPUT_MESSAGE, OUTPUT_MESSAGE, TOOL_STARTED, TOOL_COMPLETED):
                record = {"code": "turn_interrupted", "message": INTERRUPTED_TEXT, "retryable": True}
                _record_failed(agent, turn_id, record)
                return record
        if len(events) < window:
            return None
    return None


def _reason(agent: Svit, turn_id: str, reasoner: Any) -> Message:
    options = agent.options
    for _ in range(options.iterations):
        conversation = agent.conversation()
        with telemetry.span("svit.model_call", **{"svit.address": agent.address}) as call_span:
            reply = reasoner.complete(agent.system_prompt, conversation, list(TOOL_SPECS))
            if inspect.isawaitable(reply):  # an AsyncReasoner: its coroutine runs on the host's event loop
                reply = run_on_host_loop(agent.worker.host_loop, reply)
            if isinstance(reply, Reply):
                call_span.set("svit.model.finish_reason", reply.finish_reason)
                call_span.set("svit.model.tool_calls", len(reply.tool_calls))
        if not isinstance(reply, Reply):
            raise TurnFailed("the reasoner did not return a Reply")
        if reply.finish_reason == "length":
            raise ReplyTruncated(usage=reply.usage)
        if reply.is_final and reply.text is None:
            raise MissingOutboxMessage("the reasoner returned neither tool calls nor text")
        answer = Message.agent(reply.text or "", reply.tool_calls)
        payload = answer.to_json()
        # Model output that exceeds value limits fails closed.
        tree.validate_value(tree.from_value(payload, scripts_allowed=False), agent.limits, scripts_allowed=False)
        data: dict[str, Any] = {"message": payload, "turn_id": turn_id}
        if reply.finish_reason is not None:
            data["finish_reason"] = reply.finish_reason
        if reply.usage:
            data["usage"] = dict(reply.usage)
        agent.worker.record(OUTPUT_MESSAGE, data)
        if reply.is_final:
            return answer
        for call in reply.tool_calls:
            agent.worker.record(TOOL_STARTED, {"tool_call": call.to_json(), "turn_id": turn_id})
            with telemetry.span("svit.tool_call", **{"svit.address": agent.address, "svit.tool": str(call.name)[:64]}) as tool_span:
                text, ok = run_tool(agent, call)
                tool_span.set("svit.tool.ok", ok)
            result = Message.tool_result(call, text)
            agent.worker.record(TOOL_COMPLETED, {"ok": ok, "result": result.to_json(), "turn_id": turn_id})
    raise TurnFailed(MAX_ITERATIONS_TEXT)
