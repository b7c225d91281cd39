"""The durable handle: a process whose every commit is appended to its store first.

:class:`DurableProcess` implements :class:`svit.ProcessLike` over an inner
:class:`~svit.process.Process` built with a commit sink that hands each transition to
the store (one synced batch, compare-and-swap on the head) before it is published.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ContextManager, Self, cast

from .. import tree
from ..errors import InvalidPersistence, PersistenceNotFound, SvitError
from ..limits import Limits
from ..mounts import Mount
from ..process import CommitReceipt, Process, Transition
from ..tree import Node
from .events import StoreEventLog
from .records import Head, StoreSnapshot, Transaction

if TYPE_CHECKING:
    from .diff import Difference
    from .versions import VersionView

if TYPE_CHECKING:
    from .._ports import Ports
    from ..activation import Activation
    from ..process import Change
    from ..thread import Checkpoint, Event, EventLog, Message
    from .store import ProcessStore

__all__ = ["DurableProcess"]


class _HandleSink:
    """The commit sink of one durable handle: each transition is appended to the store
    (one synced batch) before the handle's process publishes it."""

    __slots__ = ("_handle", "_store")

    def __init__(self, store: ProcessStore, handle: DurableProcess) -> None:
        self._store = store
        self._handle = handle

    def commit(self, transition: Transition) -> None:
        self._store.commit(self._handle, transition)

    def effects_guard(self) -> ContextManager[None]:
        return self._store.effects_guard(self._handle)


class DurableProcess:
    """A process whose every committed transition is durable before it is published.

    It implements :class:`svit.ProcessLike` (and :class:`svit.protocol.HostedProcess`)
    over an inner :class:`~svit.process.Process` built with this handle's commit sink,
    plus the store operations: ``store_snapshot``, ``cut``, ``query`` and ``head``, and
    thread-history retention over the store's reasoning event log
    (:class:`~svit.loop.events.ThreadHistoryRetention`: ``retained_from``,
    ``compacted_through``, ``cut_thread_events``; checkpoints and recent windows).
    """

    def __init__(self, store: ProcessStore, state: Process, head: Head) -> None:
        """Wrap a copy of ``state`` (address, tree, version, limits, hooks, mount providers
        and ports) whose commits go to ``store`` from ``head`` on."""
        self._store = store
        self._head = head
        #: ``(key space, key, expected value or None)`` staged as expectations in every
        #: commit of this handle (a host's lease fence): a commit after the fence moved
        #: is refused with ``PersistenceConflict``.
        self.fences: list[tuple[str, bytes, bytes | None]] = []
        self._process = Process(
            state.address, state.root, state.version, state.limits,
            hooks=state.hooks, mounts=state.mounts, ports=state.ports, sink=_HandleSink(store, self),
        )

    # --------------------------------------------------------------- identity and observation
    @property
    def store(self) -> ProcessStore:
        return self._store

    @property
    def process(self) -> Process:
        """The inner process (its transitions are durable too)."""
        return self._process

    @property
    def address(self) -> str:
        return self._process.address

    @property
    def head(self) -> Head:
        return self._head

    def behind(self) -> bool:
        """True when the stored head is not this handle's: another writer (a host, the
        command line, another server on a shared store) committed or cut meanwhile.
        ``PersistenceNotFound`` when the address is gone."""
        stored = self._store.stored_head(self.address)
        if stored is None:
            raise PersistenceNotFound(self.address)
        return bool(stored["position"] != self._head.position or stored["hash"] != self._head.hash)

    def resumed(self) -> DurableProcess:
        """A fresh handle of this address at its stored head (:meth:`ProcessStore.resume`)
        with this handle's hooks, mount providers, ports and fences; this one is left as it was."""
        fresh = self._store.resume(self.address)
        inner = fresh.process
        inner.hooks[:] = self._process.hooks
        for name, mount in self._process.mounts.items():
            inner.attach_mount(name, mount)
        inner.replace_ports(self._process.ports)
        fresh.fences[:] = self.fences
        return fresh

    def set_head(self, head: Head) -> None:
        """Called by the store once it has durably moved this address's head (a commit or
        a cut); a host never needs it."""
        self._head = head

    @property
    def version(self) -> int:
        return self._process.version

    @property
    def root(self) -> Node:
        return self._process.root

    @property
    def root_hash(self) -> str:
        return self._process.root_hash

    @property
    def limits(self) -> Limits:
        return self._process.limits

    @property
    def hooks(self) -> list[Any]:
        return self._process.hooks

    @property
    def mounts(self) -> dict[str, Mount]:
        return self._process.mounts

    @property
    def ports(self) -> Ports | None:
        return self._process.ports

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

    def message_intents(self) -> list[dict[str, Any]]:
        return self._process.message_intents()

    # --------------------------------------------------------------- time travel
    def at(self, version: int) -> VersionView:
        """A read-only view of a retained ``version`` (``version``, ``root_hash``,
        ``committed_at``, ``read``, ``discover``, ``stat``, ``node_hash``), rebuilt from
        stored records and chunks in time independent of the history's length.

        A version after the stored head, a negative one, or one before the retained
        history (a cut, an imported base) is ``PersistenceNotFound`` naming the retained
        range; a fork child's versions before its fork are its parent's.
        """
        return self._store.versions.at(self.address, version, self.limits)

    def diff(self, before: int, after: int) -> list[Difference]:
        """What differs from version ``before`` to version ``after`` (either may be the
        greater), in path order: one :class:`~svit.store.Difference` per added, removed
        or changed path (a container added or removed whole is one entry)."""
        return self._store.versions.diff(self.address, before, after)

    def outbox(self) -> list[dict[str, Any]]:
        """The committed message intents (the same as :meth:`message_intents`)."""
        return self._process.message_intents()

    def inbox_front(self) -> Any:
        return self._process.inbox_front()

    def in_memory(self) -> Process:
        return self._process

    # --------------------------------------------------------------- transitions (durable)
    def write(self, path: str, value: Any) -> Change:
        return self._process.write(path, value)

    def remove(self, path: str) -> Change:
        return self._process.remove(path)

    def exec(self, path: str, input: Any = None, *, dry_run: bool = False,
             receipt: CommitReceipt | None = None) -> Activation:
        """As :meth:`Process.exec`; a ``receipt`` is written in the commit's own batch.
        On a read-only store only a ``dry_run`` runs (a commit is refused before the
        script runs, so no port is called for it)."""
        if not dry_run:
            self._store.require_writable()
        return self._process.exec(path, input, dry_run=dry_run, receipt=receipt)

    def exec_inbox_item(self, path: str, item: Any) -> Activation:
        self._store.require_writable()
        return self._process.exec_inbox_item(path, item)

    def exec_inline(self, source: str, input: Any = None, *, dry_run: bool = False) -> Activation:
        if not dry_run:
            self._store.require_writable()
        return self._process.exec_inline(source, input, dry_run=dry_run)

    def evaluate(self, source: str, input: Any = None) -> Activation:
        """As :meth:`Process.evaluate`: read-only, so nothing reaches the store."""
        return self._process.evaluate(source, input)

    def enqueue_inbox(self, value: Any) -> Change:
        return self._process.enqueue_inbox(value)

    def acknowledge_inbox(self, expected: Any) -> Change:
        return self._process.acknowledge_inbox(expected)

    def replace_thread_state(self, value: Any) -> Change:
        return self._process.replace_thread_state(value)

    def initialize_thread_state(self, value: Any) -> Change:
        return self._process.initialize_thread_state(value)

    def replace_ports(self, ports: Ports | None) -> Change | None:
        return self._process.replace_ports(ports)

    def attach_mount(self, name: str, mount: Mount) -> Change | None:
        """Attach a provider; a persisted descriptor that differs is refused."""
        persisted = tree.get(self._process.root, ("mounts", name)) if isinstance(name, str) else None
        if persisted is not None:
            try:
                wanted = tree.from_value(mount.descriptor(), scripts_allowed=False)
            except SvitError as exc:
                raise InvalidPersistence(f"mount {name}: {exc.message}") from None
            if wanted.digest != persisted.digest:
                raise InvalidPersistence(f"mount {name} differs from its persisted descriptor")
        return self._process.attach_mount(name, mount)

    def detach_mount(self, name: str) -> None:
        self._process.detach_mount(name)

    def close(self) -> None:
        """Release every attached mount provider (the store and its history are untouched)."""
        self._process.close()

    # --------------------------------------------------------------- snapshots and forks
    def snapshot(self) -> bytes:
        """The process snapshot's bytes at the current version; writes nothing."""
        return self._process.snapshot()

    def store_snapshot(self) -> StoreSnapshot:
        """Store a snapshot at the current head (head must be unchanged); history untouched."""
        return self._store.record_snapshot(self)

    def cut(self) -> StoreSnapshot:
        """Replace retained history with a snapshot base; refused while a fork references it."""
        return self._store.cut_history(self)

    def fork(self, child_address: str) -> Self:
        """A durable fork of this address's stored head, sharing this handle's hooks,
        mount providers and ports as :meth:`Process.fork` does."""
        child = self._store.fork(self.address, child_address)
        inner = child.process
        inner.hooks[:] = self._process.hooks
        for name, mount in self._process.mounts.items():
            inner.attach_mount(name, mount)
        inner.replace_ports(self._process.ports)
        return cast(Self, child)

    # --------------------------------------------------------------- reasoning history (reference §10.8)
    def thread_log(self) -> EventLog | None:
        """The store's reasoning event log, where this process's conversation is kept."""
        return self._event_log()

    def _event_log(self) -> StoreEventLog:
        return StoreEventLog(self._store)

    def retained_from(self, session: str) -> int:
        """First retained sequence of ``session`` (1 when nothing was cut)."""
        return self._event_log().retained_from(self.address, session)

    def compacted_through(self, session: str) -> int:
        """Highest compaction-checkpoint boundary of ``session`` (0 when none)."""
        return self._event_log().compacted_through(self.address, session)

    def cut_thread_events(self, session: str, through: int) -> int:
        """Delete events ``1..through`` of ``session`` in one synced batch; returns ``retained_from``.

        Refuses with ``ThreadHistoryBoundary``, ``ThreadHistoryUncompacted`` or
        ``ThreadHistoryPinned`` and then changes nothing; an already cut boundary is a no-op.
        """
        return self._event_log().cut_thread_events(self.address, session, through)

    def record_checkpoint(self, session: str, through: int, summary: Any) -> Checkpoint:
        """Record a compaction checkpoint: events ``1..through`` are summarised by ``summary``."""
        return self._event_log().record_checkpoint(self.address, session, through, summary)

    def latest_checkpoint(self, session: str) -> Checkpoint | None:
        """The latest compaction checkpoint of ``session`` (verified), or None."""
        return self._event_log().checkpoint(self.address, session)

    def recent_thread_events(self, session: str, limit: int) -> list[Event]:
        """The newest ``limit`` (1-4096) retained events of ``session``."""
        return self._event_log().recent_thread_events(self.address, session, limit)

    def recent_thread_messages(self, session: str, limit: int) -> list[Message]:
        """The newest ``limit`` (1-4096) messages projected from retained events of ``session``."""
        return self._event_log().recent_thread_messages(self.address, session, limit)

    def query(
        self,
        after_position: int | None = None,
        through_position: int | None = None,
        path_prefix: str | None = None,
        source: str | None = None,
        version_from: int | None = None,
        version_through: int | None = None,
        transaction_hash: str | None = None,
        limit: int = 1024,
    ) -> list[Transaction]:
        """Retained transactions matching every given filter, in position order, re-validated."""
        return self._store.query_transactions(self, after_position, through_position, path_prefix, source, version_from,
                                  version_through, transaction_hash, limit)

    def __repr__(self) -> str:
        return f"DurableProcess({self.address!r}, version={self.version}, head={self._head})"
