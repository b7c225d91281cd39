"""The turn loop of a Svit: one worker thread over the durable inbox.

A message sent to the inbox is committed to ``/inbox`` first, then the worker is woken;
items are handled strictly in order, and the head is acknowledged only after its turn
produced a final answer, so a crash or a failed turn leaves the item committed for
recovery. A turn left unfinished by a host that went away (its input recorded, neither a
final answer nor a failure) is recorded as failed when the loop next runs, and its inbox
item is retried.
"""

from __future__ import annotations

import inspect
import threading
import uuid
from typing import TYPE_CHECKING, Any, Callable

from .. import tree
from ..errors import InvalidValue, SvitError, sanitize
from ..redact import redact
from .aio import run_on_host_loop
from .errors import InboxClosed, MissingOutboxMessage, TurnFailed
from .events import (
    INPUT_MESSAGE,
    MAX_WINDOW,
    OUTPUT_MESSAGE,
    TOOL_COMPLETED,
    TOOL_STARTED,
    TURN_FAILED,
    CanonicalEvent,
    Committed,
    Event,
    Failed,
    MessageEvent,
    SvitEvent,
    message_of,
)
from .messages import Message, Reply
from .observers import Broadcast
from .tools import TOOL_SPECS, run_tool

if TYPE_CHECKING:
    from ..process import Change
    from .svit import Svit

__all__ = ["INTERRUPTED_TEXT", "MAX_ITERATIONS_TEXT", "TurnWorker", "turn_failure_text"]

MAX_ITERATIONS_TEXT = "maximum reason/act iterations reached before a final answer"
INTERRUPTED_TEXT = "the turn was interrupted before it completed"


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


class TurnWorker:
    """The worker thread of one Svit and the state it shares with senders and waiters.

    ``state`` goes ``"new"`` -> ``"busy"`` | ``"idle"`` -> ``"stopped"``; it is written under
    the condition and may be read without it. ``"idle"`` means the worker found the inbox
    empty and nothing was sent since.
    """

    def __init__(self, agent: Svit) -> None:
        self._agent = agent
        self.replies: Broadcast[Message] = Broadcast(retain_unobserved=True)
        self.signals: Broadcast[SvitEvent] = Broadcast()
        self._cond = threading.Condition()
        self._sealed = self._stopped = self._started = False
        self._sending = 0  # sends committing to /inbox right now (outside _cond)
        self._thread: threading.Thread | None = None
        self._failure: str | None = None
        self._tail_checked = False
        self._state = "new"
        self._watchers: tuple[Callable[[], None], ...] = ()
        self._watch_lock = threading.Lock()
        self._host_loop: Any = None  # the event loop async reasoners run on (see aio.py)

    # ------------------------------------------------------------------ what waiters read
    @property
    def state(self) -> str:
        return self._state

    @property
    def started(self) -> bool:
        return self._started

    @property
    def failure(self) -> str | None:
        return self._failure

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    @property
    def sending(self) -> int:
        """How many sends are committing to ``/inbox`` right now."""
        return self._sending

    @property
    def watchers(self) -> tuple[Callable[[], None], ...]:
        return self._watchers

    @property
    def host_loop(self) -> Any:
        return self._host_loop

    def bind_host_loop(self, loop: Any) -> None:
        """Serve async reasoners on ``loop``; refused while another open loop serves them."""
        with self._watch_lock:
            current = self._host_loop
            if current is not None and current is not loop and not current.is_closed():
                raise RuntimeError("this Svit is already served by another open event loop")
            self._host_loop = loop

    # Waiters that cannot block on the condition (an event loop) register a callback that
    # is run, without blocking and under the condition, whenever the worker goes idle or
    # stops; they then read ``state`` again, never needing the process lock to decide.
    def watch(self, callback: Callable[[], None]) -> None:
        with self._watch_lock:
            self._watchers += (callback,)

    def unwatch(self, callback: Callable[[], None]) -> None:
        with self._watch_lock:
            self._watchers = tuple(w for w in self._watchers if w is not callback)

    def _set_state(self, state: str) -> None:
        self._state = state
        if state in ("idle", "stopped"):
            for watcher in self._watchers:
                watcher()

    # ------------------------------------------------------------------ control
    def start(self) -> None:
        """Start the worker thread (once); committed inbox items are processed first."""
        with self._cond:
            if self._started:
                return
            self._started = True
            self._thread = threading.Thread(target=self._run, name=f"svit-loop {self._agent.address}", daemon=True)
            self._thread.start()

    def block(self, timeout: float | None = None) -> None:
        """Seal the inbox, drain what is committed, and join; raises if a turn failed."""
        self.seal()
        self.start()
        assert self._thread is not None
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the Svit loop is still draining its inbox")
        if self._failure is not None:
            raise TurnFailed(self._failure)

    def seal(self) -> None:
        with self._cond:
            self._sealed = True
            self._cond.notify_all()

    def send(self, message: Message) -> Change:
        """Commit ``message`` to ``/inbox``, then wake the worker; :class:`InboxClosed` once sealed."""
        if not isinstance(message, Message):
            raise InvalidValue("inbox messages must be Message values")
        with self._cond:
            if self._sealed or self._stopped:
                raise InboxClosed()
            self._sending += 1
        # The commit waits for the process lock (held while a tool runs) and perhaps a
        # store write: not under the condition, so sealing, starting and idle checks never
        # wait behind a tool. The worker does not finish a sealed inbox while a send is in flight.
        try:
            change = self._agent.process.enqueue_inbox(message.to_json())
        finally:
            with self._cond:
                self._sending -= 1
                if self._state == "idle":
                    self._set_state("busy")
                self._cond.notify_all()
        self.committed(change)
        return change

    # ------------------------------------------------------------------ publication
    def committed(self, change: Change | None) -> None:
        if change is not None:
            self.signals.publish(Committed(change))

    def record(self, type: str, data: dict[str, Any]) -> Event:
        agent = self._agent
        event = agent.event_log.append(agent.address, agent.session_id, type, data)
        self.signals.publish(CanonicalEvent(event))
        message = message_of(event)
        if message is not None:
            self.signals.publish(MessageEvent(message))
        return event

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        process = self._agent.process
        try:
            while True:
                with self._cond:
                    while True:
                        head = process.inbox_front()
                        if head is not None:
                            self._set_state("busy")
                            break
                        if self._sealed and not self._sending:
                            return
                        self._set_state("idle")
                        self._cond.wait()
                try:
                    self._turn(head)
                except BaseException as exc:  # any failure stops the loop; the item stays committed
                    text = turn_failure_text(exc)
                    with self._cond:
                        self._failure = text
                        self._stopped = True
                    self.signals.publish(Failed(text))
                    return
        except BaseException as exc:  # outside a turn (reading the inbox): still a failure, never a quiet stop
            text = turn_failure_text(exc)
            with self._cond:
                if self._failure is None:
                    self._failure = text
            self.signals.publish(Failed(text))
        finally:
            with self._cond:
                self._stopped = True
            self.replies.close()
            self.signals.close()
            with self._cond:
                self._set_state("stopped")

    def _turn(self, item: Any) -> None:
        if not self._tail_checked:
            self._close_interrupted_turn()
            self._tail_checked = True
        turn_id = uuid.uuid4().hex
        try:
            message = Message.from_json(item)
            self.record(INPUT_MESSAGE, {"message": message.to_json(), "turn_id": turn_id})
            final = self._reason(turn_id)
            # Only a successful turn removes its item, and only if it is still the head.
            self.committed(self._agent.process.acknowledge_inbox(item))
        except BaseException as exc:
            self.record(TURN_FAILED, {"error": turn_failure_text(exc), "turn_id": turn_id})
            raise
        self.replies.publish(final)

    def _close_interrupted_turn(self) -> None:
        """Mark the session's last turn failed if it neither finished nor failed (its host
        went away mid-turn), so the retry does not show the model its partial steps.

        The turn is named by its newest step, not found by its input: a checkpoint and a
        cut may already have removed the input, and what the model sees must not depend
        on the cut."""
        agent = self._agent
        for event in reversed(agent.event_log.recent(agent.address, agent.session_id, MAX_WINDOW)):
            if event.type == TURN_FAILED:
                return
            if event.type == OUTPUT_MESSAGE:
                message = message_of(event)
                if message is not None and not message.tool_calls:
                    return
            turn_id = event.data.get("turn_id")
            if turn_id is not None and event.type in (INPUT_MESSAGE, OUTPUT_MESSAGE, TOOL_STARTED, TOOL_COMPLETED):
                self.record(TURN_FAILED, {"error": INTERRUPTED_TEXT, "turn_id": turn_id})
                return

    def _reason(self, turn_id: str) -> Message:
        agent = self._agent
        options = agent.options
        for _ in range(options.iterations):
            conversation = agent.conversation()
            reply = options.reasoner_object.complete(agent.system_prompt, conversation, list(TOOL_SPECS))
            if inspect.isawaitable(reply):  # an AsyncReasoner: its coroutine runs on the host's event loop
                reply = run_on_host_loop(self._host_loop, reply)
            if not isinstance(reply, Reply):
                raise TurnFailed("the reasoner did not return a Reply")
            if reply.is_final and reply.text is None:
                raise MissingOutboxMessage("the reasoner returned neither tool calls nor text")
            answer = Message.agent(reply.text or "", reply.tool_calls)
            payload = answer.to_json()
            # Model output that exceeds value limits fails closed.
            tree.validate_value(tree.from_value(payload, scripts_allowed=False), agent.limits, scripts_allowed=False)
            self.record(OUTPUT_MESSAGE, {"message": payload, "turn_id": turn_id})
            if reply.is_final:
                return answer
            for call in reply.tool_calls:
                self.record(TOOL_STARTED, {"tool_call": call.to_json(), "turn_id": turn_id})
                text, ok = run_tool(agent, call)
                result = Message.tool_result(call, text)
                self.record(TOOL_COMPLETED, {"ok": ok, "result": result.to_json(), "turn_id": turn_id})
        raise TurnFailed(MAX_ITERATIONS_TEXT)
