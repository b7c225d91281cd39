"""``Svit``: one process plus one reason/act loop over a durable inbox.

The loop is a single worker thread. A message sent to the inbox is committed to
``/inbox`` first, then the loop is woken; items are handled strictly in order, and the
head is acknowledged only after its turn produced a final answer, so a crash or a failed
turn leaves the item committed for recovery. The conversation itself is kept in an
:class:`~svit.loop.events.EventLog`, outside the process tree (reference §10.8, §11.3).

Durable Svits: ``Svit.builder(addr)...store(store).build()`` creates the process in the
store, and any Svit opened over a durable handle keeps its conversation in that store's
:class:`~svit.store.events.StoreEventLog` (unless ``.event_log(...)`` says otherwise).
A host resumes one, conversation and pending inbox included, with::

    store = ProcessStore.open(path)
    agent = Svit.persisted(store.resume(address)).reasoner(reasoner).build()
    agent.start()

A turn left unfinished by a host that went away (its input recorded, neither a final
answer nor a failure) is recorded as failed when the loop next runs, and its inbox item
is retried.

Compaction (reference §10.8). A long-running agent keeps its context bounded with a
compaction checkpoint and a cut::

    checkpoint = agent.compact("what the conversation established so far")
    agent.cut_history()          # drops events 1..checkpoint.through from the store

What the reasoner is shown on each step (:meth:`Svit.conversation`) is:

1. the latest checkpoint's summary, as messages (:func:`~svit.loop.events.checkpoint_messages`):
   ``{"messages": [...]}`` verbatim, or for text one user message
   ``"Summary of the conversation so far (events 1-<through>, compacted):\n\n<text>"``
   with id ``checkpoint-<through>``;
2. then the messages projected from the events after ``through`` (failed turns left out).

Without a checkpoint it is every retained message, as before. The view depends on the
checkpoint only, never on the cut: cutting the summarised prefix (or resuming a process
whose log was cut) shows the model exactly what it saw before, so a host can compact,
cut and resume without the agent losing its context. :meth:`Svit.messages` and the
recent windows report what is retained, so after a cut they start at ``retained_from``.
"""

from __future__ import annotations

import inspect
import threading
import uuid
import weakref
from typing import Any, Callable

from .. import tree
from .._ports import PortContext, PortDescriptor, Ports
from ..errors import (
    ChildUnavailable,
    InvalidValue,
    PortContextUnavailable,
    ResourceLimitExceeded,
    SvitError,
    ThreadHistoryUncompacted,
    sanitize,
)
from ..limits import Limits
from ..mounts import Mount
from ..process import Change, Process
from ..redact import redact
from .aio import run_on_host_loop
from .errors import InboxClosed, InvalidThread, MissingOutboxMessage, MissingReasoner, TurnFailed
from .events import (
    INPUT_MESSAGE,
    MAX_WINDOW,
    OUTPUT_MESSAGE,
    TOOL_COMPLETED,
    TOOL_STARTED,
    TURN_FAILED,
    CanonicalEvent,
    Checkpoint,
    Committed,
    Event,
    EventLog,
    Failed,
    MemoryEventLog,
    MessageEvent,
    SvitEvent,
    check_window,
    checkpoint_messages,
    message_of,
    project_messages,
    read_all,
)
from .messages import Message, Reply
from .observers import Broadcast, Observer
from .prompt import SYSTEM_PROMPT, compose_system_prompt  # noqa: F401 - re-exported from here as before
from .tools import TOOL_SPECS, run_tool

THREAD_FORMAT = "svit-thread@8"
DEFAULT_MAX_ITERATIONS = 16
MAX_ITERATIONS_TEXT = "maximum reason/act iterations reached before a final answer"
INTERRUPTED_TEXT = "the turn was interrupted before it completed"


# ---------------------------------------------------------------------- ports with a host context


class SvitPortContext(PortContext):
    """The read-only port context, plus :meth:`fork` for ports that start child processes."""

    def __init__(self, base: PortContext, svit: Svit) -> None:
        super().__init__(base.read, base.stat, base.discover, base.address)
        self._svit = weakref.ref(svit)

    def fork(self, child_address: str) -> Any:
        """A process-only fork of the committed parent (never the activation's working copy)."""
        svit = self._svit()
        if svit is None:
            raise PortContextUnavailable("the Svit host is gone")
        return svit.fork_process(child_address)


class _HostPort:
    """Wraps a registered port so it receives a :class:`SvitPortContext`."""

    def __init__(self, inner: Any, svit: Svit) -> None:
        self.inner = inner
        self._svit = weakref.ref(svit)

    def descriptor(self) -> PortDescriptor:
        return self.inner.descriptor()

    def execute(self, context: PortContext, input: Any) -> Any:
        svit = self._svit()
        return self.inner.execute(SvitPortContext(context, svit) if svit is not None else context, input)


# ---------------------------------------------------------------------- builders


class _LoopOptions:
    """Options shared by a new build and a resume: reasoner, instructions, ports, iterations."""

    def __init__(self) -> None:
        self._instructions: str | None = None
        self._instructions_set = False
        self._reasoner: Any = None
        self._max_iterations = DEFAULT_MAX_ITERATIONS
        self._ports: Ports | None = None
        self._event_log: EventLog | None = None

    def instructions(self, text: str | None) -> Any:
        if text is not None and type(text) is not str:
            raise InvalidValue("instructions must be text")
        self._instructions, self._instructions_set = text, True
        return self

    def reasoner(self, reasoner: Any) -> Any:
        self._reasoner = reasoner
        return self

    def max_iterations(self, n: int) -> Any:
        if type(n) is not int or n < 1:
            raise InvalidValue("max_iterations must be a positive integer")
        self._max_iterations = n
        return self

    def ports(self, ports: Ports) -> Any:
        self._ports = ports
        return self

    def event_log(self, log: EventLog) -> Any:
        """Where canonical reasoning events go (default: the store's log for a durable
        process, else a fresh in-memory log)."""
        self._event_log = log
        return self

    def _require_reasoner(self) -> None:
        if self._reasoner is None:
            raise MissingReasoner("call .reasoner(...) before .build()")
        if not callable(getattr(self._reasoner, "complete", None)):
            raise MissingReasoner("the reasoner must have a complete(system_prompt, messages, tools) method")


class SvitBuilder(_LoopOptions):
    """Builds a new process (version-zero state) and the loop around it."""

    def __init__(self, address: str) -> None:
        super().__init__()
        self._process = Process.builder(address)
        self._store: Any = None

    def memory(self, name: str, value: Any) -> SvitBuilder:
        self._process.memory(name, value)
        return self

    def library(self, name: str, source: Any, documentation: str = "") -> SvitBuilder:
        self._process.library(name, source, documentation)
        return self

    def mount(self, name: str, mount: Mount) -> SvitBuilder:
        self._process.mount(name, mount)
        return self

    def limits(self, limits: Limits) -> SvitBuilder:
        self._process.limits(limits)
        return self

    def hook(self, hook: Any) -> SvitBuilder:
        self._process.hook(hook)
        return self

    def store(self, store: Any) -> SvitBuilder:
        """Make the process durable: ``store.create(process)`` supplies the handle used, and
        the conversation is kept in the store's event log."""
        if not callable(getattr(store, "create", None)):
            raise InvalidValue("a store must provide create(process)")
        self._store = store
        return self

    def build(self) -> Svit:
        self._require_reasoner()
        # The catalog is part of version zero, so the later refresh commits nothing.
        self._process.ports(self._ports if self._ports is not None else Ports())
        process: Any = self._process.build()
        if self._store is not None:
            process = self._store.create(process)
        return Svit._open(process, self)


class SvitResumeBuilder(_LoopOptions):
    """Wraps an existing process (restored, forked or durable) with the same loop options."""

    def __init__(self, process: Any) -> None:
        super().__init__()
        self._target = process
        self._mounts: dict[str, Mount] = {}

    def mount(self, name: str, mount: Mount) -> SvitResumeBuilder:
        """Attach a provider for a mount whose descriptor the process already records."""
        self._mounts[name] = mount
        return self

    def build(self) -> Svit:
        self._require_reasoner()
        for name, mount in self._mounts.items():
            self._target.attach_mount(name, mount)
        return Svit._open(self._target, self)


# ---------------------------------------------------------------------- the loop


class Inbox:
    """The sending side of a Svit's durable inbox."""

    def __init__(self, svit: Svit) -> None:
        self._svit = svit

    def send(self, message: Message | str) -> Change:
        """Commit ``message`` to ``/inbox``, then wake the loop; :class:`InboxClosed` once sealed."""
        return self._svit._send(Message.user(message) if isinstance(message, str) else message)


class Svit:
    """A process with a reasoning loop; see the module docstring for the turn contract."""

    def __init__(self) -> None:  # use Svit.builder / Svit.resume
        raise TypeError("use Svit.builder(address) or Svit.resume(process)")

    @staticmethod
    def builder(address: str) -> SvitBuilder:
        return SvitBuilder(address)

    @staticmethod
    def resume(process: Any) -> SvitResumeBuilder:
        return SvitResumeBuilder(process)

    @staticmethod
    def persisted(handle: Any) -> SvitResumeBuilder:
        """Resume a durable handle (``store.resume(address)``): same host API, and the
        conversation continues from the handle's store."""
        return SvitResumeBuilder(handle)

    # ------------------------------------------------------------------ opening
    @classmethod
    def _open(cls, process: Any, options: _LoopOptions) -> Svit:
        self = object.__new__(cls)
        self._process = process
        self._reasoner = options._reasoner
        self._max_iterations = options._max_iterations
        self._log = options._event_log if options._event_log is not None else _default_log(process)
        self._ports = options._ports if options._ports is not None else Ports()
        self._outbox: Broadcast[Message] = Broadcast(retain_unobserved=True)
        self._events: Broadcast[SvitEvent] = Broadcast()
        self._cond = threading.Condition()
        self._sealed = self._stopped = self._started = False
        self._sending = 0  # sends committing to /inbox right now (outside _cond)
        self._thread: threading.Thread | None = None
        self._failure: str | None = None
        self._tail_checked = False
        # "new" -> "busy" | "idle" -> "stopped"; written under _cond, read without it.
        self._state = "new"
        self._watchers: tuple[Callable[[], None], ...] = ()
        self._watch_lock = threading.Lock()
        self._host_loop: Any = None  # the event loop async reasoners run on (see aio.py)

        address = process.address
        thread = process.read("/thread")
        session_id, inherited = self._thread_identity(thread, address, self._log)  # refuse before committing

        # A restored snapshot's stale /ports grants nothing: project the attached registry.
        hosted = Ports()
        for name in self._ports.names():
            hosted.port(name, _HostPort(self._ports.get(name), self))
        process.replace_ports(hosted)

        instructions = options._instructions if options._instructions_set else inherited
        if instructions is not None and not instructions.strip():
            instructions = None
        self._session_id = session_id
        self._system_prompt = compose_system_prompt(address, instructions)
        metadata = {
            "format": THREAD_FORMAT,
            "instructions": instructions,
            "process_id": address,
            "session_id": session_id,
            "system_prompt": self._system_prompt,
        }
        if thread is None:
            process.initialize_thread_state(metadata)
        elif thread != metadata:
            process.replace_thread_state(metadata)
        return self

    @staticmethod
    def _thread_identity(thread: Any, address: str, log: Any) -> tuple[str, str | None]:
        """Keep the session for the same process or a durable fork that continues it (the
        log says so); a process-only fork starts a new one."""
        if thread is None:
            return uuid.uuid4().hex, None
        if not isinstance(thread, dict):
            raise InvalidThread("/thread must be a map")
        if "events" in thread or "messages" in thread:
            raise InvalidThread("bounded /thread metadata contains materialized history")
        if type(thread.get("process_id")) is not str:
            raise InvalidThread("bounded /thread metadata lacks process_id")
        instructions = thread.get("instructions")
        instructions = instructions if type(instructions) is str else None
        session = thread.get("session_id")
        if type(session) is str and session:
            if thread["process_id"] == address:
                return session, instructions
            continues = getattr(log, "continues", None)
            if callable(continues) and continues(address, thread["process_id"], session):
                return session, instructions
        return uuid.uuid4().hex, instructions

    # ------------------------------------------------------------------ identity
    @property
    def process(self) -> Any:
        """The underlying process (or durable handle)."""
        return self._process

    @property
    def address(self) -> str:
        return self._process.address

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def system_prompt(self) -> str:
        return self._system_prompt

    @property
    def version(self) -> int:
        return self._process.version

    @property
    def root_hash(self) -> str:
        return self._process.root_hash

    @property
    def limits(self) -> Limits:
        return self._process.limits

    @property
    def event_log(self) -> EventLog:
        return self._log

    # ------------------------------------------------------------------ host API
    def read(self, path: str) -> Any:
        return self._process.read(path)

    def read_versioned(self, path: str) -> tuple[Any, int]:
        return self._process.read_versioned(path)

    def discover(self, path: str) -> list[str]:
        return self._process.discover(path)

    def stat(self, path: str) -> Any:
        return self._process.stat(path)

    def write(self, path: str, value: Any) -> Change:
        return self._committed(self._process.write(path, value))

    def remove(self, path: str) -> Change:
        return self._committed(self._process.remove(path))

    def exec(self, path: str, input: Any = None, *, dry_run: bool = False) -> Any:
        """Run ``/lib/<name>`` with the attached ports (``dry_run``: run, report, commit nothing)."""
        return self._activated(self._process.exec(path, input, dry_run=dry_run))

    def exec_inline(self, source: str, input: Any = None, *, dry_run: bool = False) -> Any:
        """Run one-off source with the attached ports; the source is never stored."""
        return self._activated(self._process.exec_inline(source, input, dry_run=dry_run))

    def attach_mount(self, name: str, mount: Mount) -> Change | None:
        return self._committed(self._process.attach_mount(name, mount))

    def message_intents(self) -> list[dict[str, Any]]:
        return self._process.outbox()

    def snapshot(self) -> bytes:
        return self._process.snapshot()

    def fork_process(self, child_address: str) -> Any:
        """A process-only fork; its ports are the registry the host gave (no Svit context).

        Over a durable handle this forks the committed in-memory process, not the store:
        a durable fork would share (and pin) this Svit's reasoning session, while a
        process-only fork starts a session of its own.
        """
        child = _in_memory(self._process).fork(child_address)
        child.replace_ports(self._ports)
        return child

    def child_ids(self) -> list[str]:
        """Children retained by this Svit's spawn-style ports."""
        ids: set[str] = set()
        for name in self._ports.names():
            port = self._ports.get(name)
            if callable(getattr(port, "child_ids", None)):
                ids.update(port.child_ids())
        return sorted(ids)

    def child_snapshot(self, child_id: str) -> bytes:
        for name in self._ports.names():
            port = self._ports.get(name)
            if callable(getattr(port, "child_ids", None)) and child_id in port.child_ids():
                return port.child_snapshot(child_id)
        raise ChildUnavailable(child_id)

    # ------------------------------------------------------------------ history
    def _session_events(self) -> list[Event]:
        return read_all(self._log, self.address, self._session_id)

    def messages(self) -> list[Message]:
        """Every retained message of the current session, as recorded (failed turns included)."""
        return project_messages(self._session_events())

    def recent_events(self, n: int) -> list[Event]:
        """The newest ``n`` retained events; more than 4096 is ``ResourceLimitExceeded("recent thread events")``."""
        return self._log.recent(self.address, self._session_id, _recent_window(n, "recent thread events"))

    def recent_messages(self, n: int) -> list[Message]:
        """The newest ``n`` retained messages; more than 4096 is ``ResourceLimitExceeded("recent thread messages")``."""
        _recent_window(n, "recent thread messages")
        window = getattr(self._log, "recent_thread_messages", None)
        if callable(window):
            return window(self.address, self._session_id, n)
        return self.messages()[-n:]

    def checkpoint(self) -> Checkpoint | None:
        """The latest compaction checkpoint of the current session (None when the log keeps none)."""
        latest = getattr(self._log, "checkpoint", None)
        return latest(self.address, self._session_id) if callable(latest) else None

    def conversation(self) -> list[Message]:
        """What the reasoner is shown next: the latest checkpoint's summary, then the
        messages recorded after it, failed turns left out (see the module docstring)."""
        checkpoint = self.checkpoint()
        if checkpoint is None:
            return project_messages(self._session_events(), skip_failed_turns=True)
        after = read_all(self._log, self.address, self._session_id, after=checkpoint.through)
        return checkpoint_messages(checkpoint) + project_messages(after, skip_failed_turns=True)

    def compact(self, summary: str | list[Message] | dict[str, Any], through: int | None = None) -> Checkpoint:
        """Record a compaction checkpoint for the current session, covering events
        ``1..through`` (default: every event so far).

        ``summary`` is text, a list of messages (the compacted conversation) or a map the
        loop can read (``{"text": ...}`` / ``{"messages": [...]}``); a shape the loop could
        not show the model is refused before anything is written.
        """
        record = getattr(self._log, "record_checkpoint", None)
        if not callable(record):
            raise InvalidValue("this event log keeps no compaction checkpoints")
        if isinstance(summary, str):
            payload: Any = {"text": summary}
        elif isinstance(summary, (list, tuple)) and all(isinstance(m, Message) for m in summary):
            payload = {"messages": [m.to_json() for m in summary]}
        else:
            payload = summary
        if through is None:
            newest = self._log.recent(self.address, self._session_id, 1)
            through = newest[0].sequence if newest else 0
        checkpoint_messages(Checkpoint(self.address, self._session_id, 0, payload))
        return record(self.address, self._session_id, through, payload)

    def cut_history(self, through: int | None = None) -> int:
        """Drop events ``1..through`` of the current session (default: through the latest
        checkpoint); returns the first retained sequence. The model's view is unchanged."""
        cut = getattr(self._log, "cut_thread_events", None)
        if not callable(cut):
            raise InvalidValue("this event log cannot cut history")
        if through is None:
            checkpoint = self.checkpoint()
            if checkpoint is None:
                raise ThreadHistoryUncompacted(f"no checkpoint covers any event of session {self._session_id}")
            through = checkpoint.through
        return cut(self.address, self._session_id, through)

    # ------------------------------------------------------------------ observers
    def inbox(self) -> Inbox:
        return Inbox(self)

    def outbox(self) -> Observer[Message]:
        """A new observer of completed replies from now on; replies published while no
        outbox observer existed are handed to the next one created."""
        return self._outbox.subscribe()

    def events(self) -> Observer[SvitEvent]:
        """A new observer of runtime signals: Committed, CanonicalEvent, MessageEvent, Failed."""
        return self._events.subscribe()

    # ------------------------------------------------------------------ loop control
    def start(self) -> None:
        """Start the loop thread (once); committed inbox items are processed first."""
        with self._cond:
            if self._started:
                return
            self._started = True
            self._thread = threading.Thread(target=self._run, name=f"svit-loop {self.address}", daemon=True)
            self._thread.start()

    def block(self, timeout: float | None = None) -> None:
        """Seal the inbox, drain what is committed, and join; raises if a turn failed."""
        self._seal()
        self.start()
        assert self._thread is not None
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the Svit loop is still draining its inbox")
        if self._failure is not None:
            raise TurnFailed(self._failure)

    @property
    def failure(self) -> str | None:
        """The sanitized diagnostic of the turn that stopped the loop, if any."""
        return self._failure

    def _seal(self) -> None:
        with self._cond:
            self._sealed = True
            self._cond.notify_all()

    # Waiters that cannot block on _cond (an event loop) register a callback that is run,
    # without blocking and under _cond, whenever the loop goes idle or stops; they then
    # read _state again. "idle" means the loop found the inbox empty and nothing was sent
    # since, so a waiter never needs the process lock to decide.
    def _watch(self, callback: Callable[[], None]) -> None:
        with self._watch_lock:
            self._watchers += (callback,)

    def _unwatch(self, callback: Callable[[], None]) -> None:
        with self._watch_lock:
            self._watchers = tuple(w for w in self._watchers if w is not callback)

    def _set_state(self, state: str) -> None:
        self._state = state
        if state in ("idle", "stopped"):
            for watcher in self._watchers:
                watcher()

    def _send(self, message: Message) -> Change:
        if not isinstance(message, Message):
            raise InvalidValue("inbox messages must be Message values")
        with self._cond:
            if self._sealed or self._stopped:
                raise InboxClosed()
            self._sending += 1
        # The commit waits for the process lock (held while a tool runs) and perhaps a
        # store write: not under _cond, so sealing, starting and idle checks never wait
        # behind a tool. The loop does not finish a sealed inbox while a send is in flight.
        try:
            change = self._process.enqueue_inbox(message.to_json())
        finally:
            with self._cond:
                self._sending -= 1
                if self._state == "idle":
                    self._set_state("busy")
                self._cond.notify_all()
        self._committed(change)
        return change

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while True:
                        head = self._process.inbox_front()
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
                    text = failure_text(exc)
                    with self._cond:
                        self._failure = text
                        self._stopped = True
                    self._events.publish(Failed(text))
                    return
        except BaseException as exc:  # outside a turn (reading the inbox): still a failure, never a quiet stop
            text = failure_text(exc)
            with self._cond:
                if self._failure is None:
                    self._failure = text
            self._events.publish(Failed(text))
        finally:
            with self._cond:
                self._stopped = True
            self._outbox.close()
            self._events.close()
            with self._cond:
                self._set_state("stopped")

    def _turn(self, item: Any) -> None:
        if not self._tail_checked:
            self._close_interrupted_turn()
            self._tail_checked = True
        turn_id = uuid.uuid4().hex
        try:
            message = Message.from_json(item)
            self._record(INPUT_MESSAGE, {"message": message.to_json(), "turn_id": turn_id})
            final = self._reason(turn_id)
            # Only a successful turn removes its item, and only if it is still the head.
            self._committed(self._process.acknowledge_inbox(item))
        except BaseException as exc:
            self._record(TURN_FAILED, {"error": failure_text(exc), "turn_id": turn_id})
            raise
        self._outbox.publish(final)

    def _close_interrupted_turn(self) -> None:
        """Mark the session's last turn failed if it neither finished nor failed (its host
        went away mid-turn), so the retry does not show the model its partial steps.

        The turn is named by its newest step, not found by its input: a checkpoint and a
        cut may already have removed the input, and what the model sees must not depend
        on the cut."""
        for event in reversed(self._log.recent(self.address, self._session_id, MAX_WINDOW)):
            if event.type == TURN_FAILED:
                return
            if event.type == OUTPUT_MESSAGE:
                message = message_of(event)
                if message is not None and not message.tool_calls:
                    return
            turn_id = event.data.get("turn_id")
            if turn_id is not None and event.type in (INPUT_MESSAGE, OUTPUT_MESSAGE, TOOL_STARTED, TOOL_COMPLETED):
                self._record(TURN_FAILED, {"error": INTERRUPTED_TEXT, "turn_id": turn_id})
                return

    def _reason(self, turn_id: str) -> Message:
        for _ in range(self._max_iterations):
            conversation = self.conversation()
            reply = self._reasoner.complete(self._system_prompt, conversation, list(TOOL_SPECS))
            if inspect.isawaitable(reply):  # an AsyncReasoner: its coroutine runs on the host's event loop
                reply = run_on_host_loop(self._host_loop, reply)
            if not isinstance(reply, Reply):
                raise TurnFailed("the reasoner did not return a Reply")
            if reply.is_final and reply.text is None:
                raise MissingOutboxMessage("the reasoner returned neither tool calls nor text")
            agent = Message.agent(reply.text or "", reply.tool_calls)
            payload = agent.to_json()
            # Model output that exceeds value limits fails closed.
            tree.validate_value(tree.from_value(payload, scripts_allowed=False), self._process.limits, scripts_allowed=False)
            self._record(OUTPUT_MESSAGE, {"message": payload, "turn_id": turn_id})
            if reply.is_final:
                return agent
            for call in reply.tool_calls:
                self._record(TOOL_STARTED, {"tool_call": call.to_json(), "turn_id": turn_id})
                text, ok = run_tool(self, call)
                result = Message.tool_result(call, text)
                self._record(TOOL_COMPLETED, {"ok": ok, "result": result.to_json(), "turn_id": turn_id})
        raise TurnFailed(MAX_ITERATIONS_TEXT)

    # ------------------------------------------------------------------ publication
    def _record(self, type: str, data: dict[str, Any]) -> Event:
        event = self._log.append(self.address, self._session_id, type, data)
        self._events.publish(CanonicalEvent(event))
        message = message_of(event)
        if message is not None:
            self._events.publish(MessageEvent(message))
        return event

    def _committed(self, change: Any) -> Any:
        if change is not None:
            self._events.publish(Committed(change))
        return change

    def _activated(self, activation: Any) -> Any:
        if not activation.committed:
            return activation
        paths = [p for p in activation.changed]
        hashes: dict[str, str | None] = {}
        if self._process.version == activation.version:
            for path in paths:
                if not path.startswith("/mounts/"):
                    hashes[path] = self._process.node_hash(path)
        self._events.publish(Committed(Change(activation.version, paths, hashes)))
        return activation


def _recent_window(n: int, name: str) -> int:
    if type(n) is int and n > MAX_WINDOW:
        raise ResourceLimitExceeded(name)
    return check_window(n)


def _default_log(process: Any) -> EventLog:
    """The store's event log for a durable handle, else a fresh in-memory log."""
    try:
        from ..store.events import StoreEventLog
        from ..store.store import DurableProcess
    except ImportError:  # pragma: no cover - the store is an install-time dependency
        return MemoryEventLog()
    if isinstance(process, DurableProcess):
        return StoreEventLog(process.store)
    return MemoryEventLog()


def _in_memory(process: Any) -> Process:
    """The committed in-memory process behind a durable handle (or the process itself)."""
    from ..store.store import DurableProcess

    return process.process if isinstance(process, DurableProcess) else process


def failure_text(exc: BaseException) -> str:
    """A one-line, capped diagnostic: the error's own text without credentials, never a
    traceback (it is stored in ``turn.failed`` and raised from ``block``)."""
    if isinstance(exc, TurnFailed):
        text = exc.detail
    elif isinstance(exc, SvitError):
        text = exc.message
    else:
        text = str(exc) or type(exc).__name__
    return sanitize(redact(" ".join(text.split())))
