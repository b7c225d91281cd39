"""``Svit``: one process plus one reason/act loop over a durable inbox.

The loop is a single worker thread (:mod:`svit.loop.attempts` holds the turn contract);
this module is the façade a host uses: the :class:`svit.ProcessLike` operations, the
inbox and the observers, the conversation history. The conversation itself is kept in
an :class:`~svit.loop.events.EventLog`, outside the process tree (reference §10.8, §11.3).

Durable Svits: ``Svit.builder(addr)...store(store).build()`` creates the process in the
store, and any Svit opened over a durable handle keeps its conversation in that store's
:class:`~svit.store.events.StoreEventLog` (unless ``.event_log(...)`` says otherwise).
A host resumes one, conversation and pending inbox included, with::

    store = ProcessStore.open(path)
    agent = Svit.resume(store.resume(address)).reasoner(reasoner).build()
    agent.start()

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

import uuid
import warnings
from typing import Any, Protocol, Self, runtime_checkable

from .._ports import Ports
from ..activation import Activation
from ..errors import ChildUnavailable, InvalidValue, ResourceLimitExceeded, ThreadHistoryUncompacted
from ..limits import Limits
from ..mounts import Mount
from ..process import Change, CommitReceipt, Process
from ..protocol import HostedProcess
from .attempts import TURNS_KEY
from .builders import LoopOptions, SvitBuilder, SvitResumeBuilder
from .errors import InvalidThread
from .events import (
    MAX_WINDOW,
    Checkpoint,
    Event,
    EventLog,
    MemoryEventLog,
    SvitEvent,
    check_window,
    checkpoint_messages,
    project_messages,
    read_all,
)
from .hosting import HostPort, SvitPortContext
from .messages import Message
from .observers import Observer
from .prompt import SYSTEM_PROMPT, compose_system_prompt
from .worker import TurnWorker

__all__ = ["SYSTEM_PROMPT", "THREAD_FORMAT", "Inbox", "Svit", "SvitBuilder", "SvitPortContext", "SvitResumeBuilder",
           "compose_system_prompt"]

THREAD_FORMAT = "svit-thread@8"


@runtime_checkable
class SpawningPort(Protocol):
    """A port that keeps the child processes it started (the spawn port)."""

    def child_ids(self) -> list[str]: ...

    def child_snapshot(self, child_id: str) -> bytes: ...


class Inbox:
    """The sending side of a Svit's durable inbox."""

    def __init__(self, svit: Svit) -> None:
        self._svit = svit

    def send(self, message: Message | str) -> Change:
        """Commit ``message`` to ``/inbox``, then wake the loop; :class:`InboxClosed` once sealed."""
        return self._svit.worker.send(Message.user(message) if isinstance(message, str) else message)


class Svit:
    """A process with a reasoning loop; see the module docstring for the turn contract.

    Implements :class:`svit.ProcessLike` over the process it runs on (a
    :class:`~svit.process.Process` or a durable handle). Build one with
    :meth:`builder` (a new process) or :meth:`resume` (an existing one).
    """

    @staticmethod
    def builder(address: str) -> SvitBuilder:
        return SvitBuilder(address, Svit)

    @staticmethod
    def resume(process: HostedProcess) -> SvitResumeBuilder:
        """The loop around an existing process: restored, forked, or a durable handle
        (``store.resume(address)``), whose conversation continues from its store."""
        return SvitResumeBuilder(process, Svit)

    @staticmethod
    def persisted(handle: HostedProcess) -> SvitResumeBuilder:
        """Deprecated: the same as :meth:`resume`."""
        warnings.warn("Svit.persisted is deprecated; use Svit.resume", DeprecationWarning, stacklevel=2)
        return SvitResumeBuilder(handle, Svit)

    # ------------------------------------------------------------------ opening
    def __init__(self, process: HostedProcess, options: LoopOptions) -> None:
        """Open the loop over ``process`` (use :meth:`builder` or :meth:`resume`): the
        attached ports and ``/thread`` are committed before it returns."""
        options.require_reasoner()
        self._process = process
        self._options = options
        self._log: EventLog = options.log if options.log is not None else (process.thread_log() or MemoryEventLog())
        self._ports = options.port_registry if options.port_registry is not None else Ports()
        self._worker = TurnWorker(self)

        address = process.address
        thread = process.read("/thread")
        session_id, inherited = self._thread_identity(thread, address, self._log)  # refuse before committing

        # A restored snapshot's stale /ports grants nothing: project the attached registry.
        hosted = Ports()
        for name in self._ports.names():
            hosted.port(name, HostPort(self._ports.get(name), self))
        process.replace_ports(hosted)

        instructions = options.instructions_text if options.instructions_set else inherited
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
        else:
            # The failing head and the set-aside items (/thread/turns) outlive a reopen.
            kept = {key: value for key, value in thread.items() if key == TURNS_KEY}
            if {key: value for key, value in thread.items() if key != TURNS_KEY} != metadata:
                process.replace_thread_state({**metadata, **kept})

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
    def process(self) -> HostedProcess:
        """The underlying process (or durable handle)."""
        return self._process

    @property
    def options(self) -> LoopOptions:
        """The loop options this Svit was opened with."""
        return self._options

    @property
    def worker(self) -> TurnWorker:
        """The loop's worker thread and its state."""
        return self._worker

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

    # ------------------------------------------------------------------ host API (ProcessLike)
    def node_hash(self, path: str) -> str | None:
        return self._process.node_hash(path)

    def read(self, path: str) -> Any:
        return self._process.read(path)

    def read_versioned(self, path: str) -> tuple[Any, int]:
        return self._process.read_versioned(path)

    def discover(self, path: str) -> list[str]:
        return self._process.discover(path)

    def stat(self, path: str) -> dict[str, Any] | None:
        return self._process.stat(path)

    def write(self, path: str, value: Any) -> Change:
        change = self._process.write(path, value)
        self._worker.committed(change)
        return change

    def remove(self, path: str) -> Change:
        change = self._process.remove(path)
        self._worker.committed(change)
        return change

    def exec(self, path: str, input: Any = None, *, dry_run: bool = False,
             receipt: CommitReceipt | None = None) -> Activation:
        """Run ``/lib/<name>`` with the attached ports (``dry_run``: run, report, commit nothing;
        ``receipt``: written with the commit by a durable process)."""
        return self._activated(self._process.exec(path, input, dry_run=dry_run, receipt=receipt))

    def exec_inline(self, source: str, input: Any = None, *, dry_run: bool = False) -> Activation:
        """Run one-off source with the attached ports; the source is never stored."""
        return self._activated(self._process.exec_inline(source, input, dry_run=dry_run))

    def evaluate(self, source: str, input: Any = None) -> Activation:
        """Run one-off source read-only (a port call is refused: it is an effect)."""
        return self._process.evaluate(source, input)

    def attach_mount(self, name: str, mount: Mount) -> Change | None:
        change = self._process.attach_mount(name, mount)
        self._worker.committed(change)
        return change

    def detach_mount(self, name: str) -> None:
        self._process.detach_mount(name)

    def message_intents(self) -> list[dict[str, Any]]:
        return self._process.message_intents()

    def snapshot(self) -> bytes:
        return self._process.snapshot()

    def fork(self, child_address: str) -> Self:
        """A Svit over a fork of this one's process, opened with the same options (not
        started). Over a durable handle the fork is durable and continues this
        conversation's session; an in-memory fork starts a session of its own."""
        return type(self)(self._process.fork(child_address), self._options)

    def close(self) -> None:
        """Release the process's mount providers (the loop is not stopped: see :meth:`block`)."""
        self._process.close()

    def fork_process(self, child_address: str) -> Process:
        """A process-only fork; its ports are the registry the host gave (no Svit context).

        Over a durable handle this forks the committed in-memory process, not the store:
        a durable fork would share (and pin) this Svit's reasoning session, while a
        process-only fork starts a session of its own.
        """
        child = self._process.in_memory().fork(child_address)
        child.replace_ports(self._ports)
        return child

    def child_ids(self) -> list[str]:
        """Children retained by this Svit's spawn-style ports."""
        ids: set[str] = set()
        for port in self._spawners():
            ids.update(port.child_ids())
        return sorted(ids)

    def child_snapshot(self, child_id: str) -> bytes:
        for port in self._spawners():
            if child_id in port.child_ids():
                return port.child_snapshot(child_id)
        raise ChildUnavailable(child_id)

    def _spawners(self) -> list[SpawningPort]:
        """The attached ports that keep child processes (the spawn port)."""
        found: list[SpawningPort] = []
        for name in self._ports.names():
            port = self._ports.get(name)
            if isinstance(port, SpawningPort):
                found.append(port)
        return found

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
            recent: list[Message] = window(self.address, self._session_id, n)
            return recent
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
        recorded: Checkpoint = record(self.address, self._session_id, through, payload)
        return recorded

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
        retained: int = cut(self.address, self._session_id, through)
        return retained

    # ------------------------------------------------------------------ observers
    def inbox(self) -> Inbox:
        return Inbox(self)

    def outbox(self) -> Observer[Message]:
        """A new observer of completed replies from now on; replies published while no
        outbox observer existed are handed to the next one created."""
        return self._worker.replies.subscribe()

    def events(self) -> Observer[SvitEvent]:
        """A new observer of runtime signals: Committed, CanonicalEvent, MessageEvent, Failed."""
        return self._worker.signals.subscribe()

    # ------------------------------------------------------------------ loop control
    def start(self) -> None:
        """Start the loop thread; committed inbox items are processed first. A running loop
        is left alone; a stopped one (after :meth:`block`) starts again, inbox reopened."""
        self._worker.start()

    def block(self, timeout: float | None = None) -> None:
        """Seal the inbox, drain what is committed (failed turns are retried after their
        backoff or set aside), and join; raises :class:`TurnFailed` if an item was set aside."""
        self._worker.block(timeout)

    @property
    def failure(self) -> str | None:
        """The sanitized diagnostic of the latest set-aside item's last failure (or of the
        failure that stopped the loop) since the loop started, if any."""
        return self._worker.failure

    # ------------------------------------------------------------------ publication
    def _activated(self, activation: Activation) -> Activation:
        if not activation.committed:
            return activation
        paths = list(activation.changed)
        hashes: dict[str, str | None] = {}
        if self._process.version == activation.version:
            for path in paths:
                if not path.startswith("/mounts/"):
                    hashes[path] = self._process.node_hash(path)
        self._worker.committed(Change(activation.version, paths, hashes))
        return activation


def _recent_window(n: int, name: str) -> int:
    if type(n) is int and n > MAX_WINDOW:
        raise ResourceLimitExceeded(name)
    return check_window(n)
