"""The turn loop of a Svit: one worker thread over the durable inbox.

A message sent to the inbox is committed to ``/inbox`` first, then the worker is woken.
The worker is a loop over :func:`svit.loop.attempts.next_turn` (the turn contract, also
used by hosts without a thread per process): items are handled strictly in order, the
head is acknowledged only after its turn produced a final answer, and a failed turn is
retried after its backoff (the worker sleeps until ``retry_at``, woken early by nothing
but a new send) or set aside, after which the next item is next. A set-aside item is
reported as :class:`~svit.loop.events.Failed` and makes :meth:`TurnWorker.block` raise
:class:`TurnFailed` once the inbox is drained; only a failure outside a turn (the store
refusing a commit, say) stops the loop.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from ..errors import InvalidValue
from .attempts import INTERRUPTED_TEXT, MAX_ITERATIONS_TEXT, next_turn, turn_failure_text
from .errors import InboxClosed, TurnFailed
from .events import CanonicalEvent, Committed, Event, Failed, MessageEvent, Retrying, SvitEvent, message_of
from .messages import Message
from .observers import Broadcast

if TYPE_CHECKING:
    from ..process import Change
    from .svit import Svit

__all__ = ["INTERRUPTED_TEXT", "MAX_ITERATIONS_TEXT", "TurnWorker", "turn_failure_text"]


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
        """Start the worker thread; committed inbox items are processed first. While it runs
        this does nothing; after the loop stopped (:meth:`block` drained it, or a failure
        outside a turn stopped it) it starts again with the inbox open and new observers
        (the old ones were closed), its failure cleared."""
        with self._cond:
            if self._started and self._state != "stopped":
                return
            if self._started:
                assert self._thread is not None
                self._thread.join()  # it has published "stopped": only its exit is left
                self._sealed = self._stopped = False
                self._failure = None
                self.replies = Broadcast(retain_unobserved=True)
                self.signals = Broadcast()
                self._state = "new"
            self._launch()

    def ensure_started(self) -> None:
        """Start the worker thread if it never ran (never restarts a stopped loop)."""
        with self._cond:
            if not self._started:
                self._launch()

    def _launch(self) -> None:
        self._started = True
        self._thread = threading.Thread(target=self._run, name=f"svit-loop {self._agent.address}", daemon=True)
        self._thread.start()

    def block(self, timeout: float | None = None) -> None:
        """Seal the inbox, drain what is committed, and join; raises :class:`TurnFailed` if
        an item was set aside (or the loop stopped on a failure) since it started."""
        self.seal()
        self.ensure_started()
        assert self._thread is not None
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the Svit loop is still draining its inbox")
        if self._failure is not None:
            raise TurnFailed(self._failure)

    def claim_tail_check(self) -> bool:
        """True the first time it is asked: the first turn of this loop looks for a turn its
        predecessor left unfinished."""
        with self._watch_lock:
            if self._tail_checked:
                return False
            self._tail_checked = True
            return True

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
        """Append one event to the thread log, stamped with when it was recorded
        (``at``: milliseconds since the epoch, UTC)."""
        agent = self._agent
        stamped = data if "at" in data else {**data, "at": int(time.time() * 1000)}
        event = agent.event_log.append(agent.address, agent.session_id, type, stamped)
        self.signals.publish(CanonicalEvent(event))
        message = message_of(event)
        if message is not None:
            self.signals.publish(MessageEvent(message))
        return event

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        agent = self._agent
        process = agent.process
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
                outcome = next_turn(agent)
                if outcome.kind == "done" and outcome.reply is not None:
                    self.replies.publish(outcome.reply)
                elif outcome.kind == "set_aside":
                    text = _error_text(outcome.error)
                    with self._cond:
                        self._failure = text
                    self.signals.publish(Failed(text, outcome.item_id, outcome.error))
                elif outcome.kind == "retry" and outcome.retry_at is not None:
                    self.signals.publish(Retrying(outcome.item_id, outcome.retry_at, outcome.error))
                    self._sleep_until(outcome.retry_at)
        except BaseException as exc:  # outside a turn (the store refused a commit): the loop stops, never quietly
            text = turn_failure_text(exc)
            with self._cond:
                self._failure = text
            self.signals.publish(Failed(text))
        finally:
            with self._cond:
                self._stopped = True
            self.replies.close()
            self.signals.close()
            with self._cond:
                self._set_state("stopped")

    def _sleep_until(self, when: float) -> None:
        """Wait for an item's retry time (a send wakes the wait, which then goes on)."""
        with self._cond:
            while True:
                remaining = when - time.time()
                if remaining <= 0:
                    return
                self._cond.wait(remaining)


def _error_text(error: dict[str, Any] | None) -> str:
    message = error.get("message") if error is not None else None
    return message if type(message) is str and message else "the turn failed"
