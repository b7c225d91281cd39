"""The durable process store: a hash-chained transaction log per address, over a storage engine.

Contract (reference §10, with DESIGN §5.5/§5.7 and durability.md 1-3):

* A process's history is a **base** (created, imported, fork or snapshot) followed by
  **transactions**; the **head** names the last one. Each transaction records the
  mutations of one committed transition and is chained to its predecessor by hash.
* A durable handle publishes a transition only after ONE engine write batch holding
  the transaction, the new tree nodes, the derived path-index entries and the new head
  has returned from a synced write (RocksDB: written to the WAL, then the WAL fsynced). The batch is guarded by a
  compare-and-swap on the head under the store lock: a stale handle gets
  ``PersistenceConflict`` and keeps its old state. Batches of different addresses
  queued at the same moment are written as one synced write (group commit,
  :mod:`svit.store.group`); the sync happens outside the store lock, and every other
  operation that takes the lock first waits for the queued batches.
* A synced write that raises makes the store terminal: every later operation raises
  ``PersistenceUnavailable`` until the store is reopened (RocksDB recovery runs on
  open). The failed write is never retried or reported as successful.
* Resume rebuilds the base, replays every transaction's mutations without running guest
  code, re-validates the root after each, checks every hash, the head, and the stored
  tree nodes of the head state. Any inconsistency is ``InvalidPersistence``.

The façade over the pieces, each in its own module: the storage engine
(:mod:`svit.store.engine`, RocksDB in :mod:`svit.store.rocksdb`), the record formats
(:mod:`svit.store.records`), the history and its queries (:mod:`svit.store.history`),
the stored tree nodes (:mod:`svit.store.nodes`) and the thread log
(:mod:`svit.store.events`). Key classes and column families are declared in
:mod:`svit.store.keys`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import blake3

from .. import mutation as mutation_module
from ..control import DEFAULT_RECEIPT_LIMIT
from ..errors import (
    InvalidPersistence,
    PersistenceAlreadyExists,
    PersistenceConflict,
    PersistenceNotFound,
    PersistenceReferenced,
    PersistenceUnavailable,
    ResourceLimitExceeded,
    SvitError,
)
from ..limits import Limits
from ..mutation import Mutation
from ..paths import validate_address
from ..process import Process, Transition
from ..tree import Node
from . import codec, keys, records
from .engine import (
    ALL_CLASSES,
    DATABASE_SCHEMES,
    StorageEngine,
    WriteBatch,
    database_location,
    is_database_url,
    read_only_refusal,
)
from .events import stage_fork_share, stage_thread_detach
from .failures import storage_error
from .handle import DurableProcess
from .history import MAX_FORK_DEPTH, MAX_QUERY_LIMIT, History
from .keys import CF_DEFAULT, CF_INDEX, CF_RECORD, COLUMN_FAMILIES, IRREPLACEABLE, REBUILDABLE
from .mailbox import Mailbox
from .nodes import StoredNodes
from .receipts import StoreReceipts, stage_commit_receipt
from .records import MAX_SOURCE_BYTES, Head, State, StoreSnapshot, Transaction
from .rocksdb import OPEN_DEADLINE_SECONDS, RocksDBEngine
from .versions import Versions

if TYPE_CHECKING:
    pass

#: How many addresses' latest states a store object keeps (fork, archive and the
#: commit path reuse them; a miss is resumed from the store). Bounded, so a host that
#: touches many processes over time holds only those it keeps open.
LATEST_STATES = 256
#: How often a resume on a shared engine reads a head that moved again before it gives up.
RESUME_ATTEMPTS = 8
#: How many addresses' key prefixes the commit path keeps made (then it starts over).
ADDRESS_KEYS = 4096

__all__ = [
    "STORE_FORMAT",
    "MAX_TRANSACTION_BYTES",
    "MAX_SOURCE_BYTES",
    "MAX_FORK_DEPTH",
    "MAX_QUERY_LIMIT",
    "ProcessStore",
    "DurableProcess",
    "StoreSnapshot",
    "Transaction",
    "Head",
    "apply_mutations",
    "is_database_url",
    "database_location",
    "DATABASE_SCHEMES",
    "LATEST_STATES",
    "RecentStates",
    "StoreReceipts",
]

_log = logging.getLogger("svit.store")

STORE_FORMAT = b"svit-store@4"
MAX_TRANSACTION_BYTES = 16 * 1024 * 1024
U64_MAX = 2**64 - 1
# The names the commit path and the handle operations use for the record pieces.
_State = State
_readable_snapshot = records.readable_snapshot
_u64_key, _escape, _SEP = keys.u64, keys.escape, keys.SEP


_set_state = OrderedDict.__setitem__


class RecentStates(OrderedDict[str, State]):
    """The latest committed states of the addresses used most recently, at most ``capacity``."""

    def __init__(self, capacity: int = LATEST_STATES) -> None:
        super().__init__()
        self.capacity = capacity

    def __setitem__(self, address: str, state: State) -> None:
        _set_state(self, address, state)
        self.move_to_end(address)
        while len(self) > self.capacity:
            self.popitem(last=False)


def _head_matches(head: dict[str, Any], state: _State) -> bool:
    """True when the stored ``head`` is exactly where the replayed ``state`` ended."""
    return bool(head["base_hash"] == state.base_hash and head["position"] == state.head.position
            and head["hash"] == state.head.hash and head["process_version"] == state.version
            and head["root_hash"] == state.root.hash)


def apply_mutations(root: Node, mutations: Iterable[Mutation], what: str) -> Node:
    """Replay mutations on ``root`` (no guest code runs); any failure is InvalidPersistence.

    The same :func:`svit.mutation.apply` a process used to build each committed root, so a
    log replays to exactly the roots it recorded.
    """
    return mutation_module.apply_all(root, mutations, what)


class ProcessStore:
    """The durable history of many processes, kept in one storage engine."""

    def __init__(self, engine: StorageEngine) -> None:
        self.engine = engine
        self._lock = engine.lock
        #: Head records read back from the engine, by their bytes (a decode cache).
        self._head_cache: dict[str, tuple[bytes, dict[str, Any]]] = {}
        #: The head each address's next commit chains to: written (or queued) by this store.
        self._heads: dict[str, dict[str, Any]] = {}
        #: The exact bytes of a head record in :attr:`_heads`, beside that very record (a
        #: commit on a shared engine expects them instead of sealing the head again).
        self._head_bytes: dict[str, tuple[dict[str, Any], bytes]] = {}
        #: Each address's key prefixes (:meth:`_address_keys`).
        self._keys: dict[str, tuple[bytes, bytes, bytes]] = {}
        #: Latest committed state per address seen by this store object (a cache; fork uses it).
        self._latest = RecentStates()
        #: What restoring a stored snapshot may cost at most (compile-time work of all
        #: its scripts together, see :meth:`Process.restore`); a host may set its own.
        self.restore_limits = Limits()
        self.nodes = StoredNodes(engine)
        self.history = History(engine, apply_mutations, lambda: self.restore_limits)
        #: Retained versions of every address, read from stored records and chunks.
        self.versions = Versions(self)
        #: Message delivery between this store's processes (:mod:`svit.store.mailbox`).
        self.mailbox = Mailbox(self)

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | os.PathLike[str], *, open_deadline: float | None = OPEN_DEADLINE_SECONDS,
             read_only: bool = False, holder: str | None = None, reuse_logs: bool = False) -> ProcessStore:
        """Open (creating if absent) a store; refuses foreign or unknown layouts.

        ``path`` is a RocksDB store directory, or a ``postgresql://`` URL naming a
        database (:mod:`svit.store.postgres`; needs the ``postgresql`` extra). Reading an
        existing RocksDB store's files must end within ``open_deadline`` seconds
        (``InvalidPersistence`` otherwise; None: unbounded), see :mod:`svit.store.rocksdb`.

        ``read_only=True`` opens an existing store to look at it while another process
        writes it (``PersistenceNotFound`` when there is none): on RocksDB a secondary
        instance that takes no lock and follows the writer's commits (each operation
        sees the commits acknowledged before it started, give or take
        :data:`~svit.store.rocksdb.FOLLOW_SECONDS`; :meth:`follow` catches up at once);
        on PostgreSQL read-only connections. Every writing operation is refused with
        ``PersistenceUnavailable`` (reason ``read_only``) before anything is written,
        and the store stays usable. ``holder`` names a writer in the holder record a
        refused writer is shown (:mod:`svit.store.holder`; default: the program's name).
        ``reuse_logs`` (RocksDB writers only): reuse obsolete write-ahead logs, for cheaper
        log syncs in a long-running writer; readers follow such a writer by reopening
        read-only instances, which costs more per follow (see :mod:`svit.store.rocksdb`).
        """
        if is_database_url(path):
            try:
                from .postgres import PostgreSQLEngine  # noqa: PLC0415 - psycopg is an optional extra
            except ImportError as missing:
                raise PersistenceUnavailable(
                    f"a postgresql:// store needs the 'postgresql' extra ({missing.name} is not installed): "
                    "pip install 'svit[postgresql]'", reason="unavailable") from None
            store = cls.over(PostgreSQLEngine.open(str(path), read_only=read_only))
        else:
            store = cls.over(RocksDBEngine.open(path, open_deadline=open_deadline, read_only=read_only, holder=holder,
                                                reuse_logs=reuse_logs))
        _log.info("store opened (%s%s)", store.engine.describe()["engine"], ", read-only" if read_only else "")
        return store

    @classmethod
    def over(cls, engine: StorageEngine) -> ProcessStore:
        """A store over an open engine: writes the format marker of an empty one, refuses
        one written in another format. A refused or failed open closes the engine (leaving
        no lock) and raises a Svit error: a raw engine failure while reading or writing the
        marker becomes a ``PersistenceUnavailable`` naming the problem."""
        try:
            store = cls(engine)
            try:
                marker = engine.get(CF_DEFAULT, keys.FORMAT_KEY)
            except SvitError:
                raise
            except Exception as exc:  # an engine that let a raw failure through
                raise storage_error(exc, "cannot open store") from None
            if marker is None and engine.read_only:
                pass  # a writer is creating the store right now: nothing to read yet
            elif marker is None:
                batch = engine.batch()
                batch.put(CF_DEFAULT, keys.FORMAT_KEY, STORE_FORMAT)
                engine.write(batch)
            elif marker != STORE_FORMAT:
                found = marker[:64].decode("ascii", "replace")
                raise InvalidPersistence(
                    f"store format {found!r} is not supported: this version reads {STORE_FORMAT.decode()} only "
                    "(no migration exists; export with the version that wrote it)")
        except BaseException:
            with contextlib.suppress(Exception):
                engine.close()  # lets go of the lock even when it raises; the open's failure wins
            raise
        return store

    @property
    def cached_states(self) -> int:
        """How many addresses' latest states this store object holds in memory (at most
        :data:`LATEST_STATES`, however many processes it has touched)."""
        return len(self._latest)

    @property
    def path(self) -> str:
        return self.engine.path

    def close(self) -> None:
        """Close the engine; the object refuses every later operation.

        Closed even when it raises: a failure while releasing the database (RocksDB's
        final flush on a full disk) is a ``PersistenceUnavailable`` naming the problem,
        and loses nothing acknowledged (see :meth:`StorageEngine.close`).
        """
        if self.engine.closed:
            return
        try:
            self.engine.close()
        except SvitError as failure:
            _log.error("store closed, with a failure: %s", failure.message)
            raise
        _log.info("store closed%s", " (read-only)" if self.engine.read_only else "")

    def __enter__(self) -> ProcessStore:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, traceback: Any) -> None:
        try:
            self.close()
        except SvitError as failure:
            if exc is None:
                raise
            # The block's own exception is the one to see; the close failure rides along.
            exc.add_note(f"closing the store also failed: {failure}")

    @property
    def terminal(self) -> bool:
        """True after a synced write failed (reopen to recover)."""
        return self.engine.terminal

    @property
    def read_only(self) -> bool:
        """True for a store opened with ``read_only=True``: it refuses every write."""
        return self.engine.read_only

    def follow(self) -> None:
        """On a read-only store, catch up with the writer's commits now (every operation
        catches up by itself at most every few tens of milliseconds); otherwise nothing."""
        follow = getattr(self.engine, "follow", None)
        if follow is not None:
            self._check()
            follow()

    def require_writable(self) -> None:
        """Refuse a writing operation on a read-only store, before it reads or stages anything."""
        if self.engine.read_only:
            raise read_only_refusal()

    @property
    def closed(self) -> bool:
        return self.engine.closed

    def statement(self) -> dict[str, Any]:
        """Where the history lives, how it is protected, and what is derived (durability 2, 14)."""
        real = self.path if is_database_url(self.path) else os.path.realpath(self.path)
        engine = self.engine.describe()
        return {
            "path": real,
            "column_families": {
                name: sorted({kc.durability for kc in keys.KEY_CLASSES if kc.column_family == name})
                for name in COLUMN_FAMILIES
            },
            "key_classes": [
                {"name": kc.name, "column_family": kc.column_family, "prefix": kc.prefix.decode(), "class": kc.durability}
                for kc in keys.KEY_CLASSES
            ],
            "write": engine["write"],
            "wal_recovery_mode": engine["wal_recovery_mode"],
            "shares_device": engine["shares_device"],
            "terminal": self.terminal,
        }

    # ------------------------------------------------------------------ engine (the commit path's names)
    def _check(self) -> None:
        self.engine.check()

    def _batch(self, allowed: tuple[str, ...] = ALL_CLASSES) -> WriteBatch:
        return self.engine.batch(allowed)

    def _write(self, batch: WriteBatch) -> None:
        """The only durable write: synced; any failure makes the store terminal."""
        self.engine.write(batch)

    def _get(self, column_family: str, key: bytes) -> bytes | None:
        return self.engine.get(column_family, key)

    def _scan(self, column_family: str, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        return self.engine.scan(column_family, prefix, start)

    # ------------------------------------------------------------------ records
    def stored_head(self, address: str) -> dict[str, Any] | None:
        """The verified head record of ``address`` (a fresh dict), or None when absent."""
        return self._decode_head(address)

    def _decode_head(self, address: str) -> dict[str, Any] | None:
        read = self._decode_head_bytes(address)
        return None if read is None else read[1]

    def _decode_head_bytes(self, address: str) -> tuple[bytes, dict[str, Any]] | None:
        """``(stored bytes, verified head record as a fresh dict)`` of ``address``, or None."""
        raw = self._get(CF_RECORD, keys.head_key(address))
        if raw is None:
            return None
        cached = self._head_cache.get(address)
        if cached is not None and cached[0] == raw:
            # Byte-identical to a head this store verified or wrote itself.
            return raw, dict(cached[1])
        head = records.decode_head(raw, address)
        self._head_cache[address] = (raw, dict(head))
        return raw, head

    _read_head = stored_head

    _head_record = staticmethod(records.head_record)
    _base_record = staticmethod(records.base_record)

    def _exists(self, address: str) -> bool:
        return (
            self._get(CF_RECORD, keys.head_key(address)) is not None
            or self._get(CF_RECORD, keys.base_key(address)) is not None
        )

    def fork_children(self, address: str) -> list[str]:
        """Fork children of ``address`` (the child index and the fork references)."""
        return self.history.children(address)

    _children = fork_children

    def fork_parent(self, address: str) -> str | None:
        """The address ``address`` was forked from, by its (verified) fork reference."""
        raw = self._get(CF_RECORD, keys.fork_key(address))
        return None if raw is None else records.decode_fork_reference(raw, address)["parent_address"]

    # ------------------------------------------------------------------ nodes
    def _stage_nodes(self, batch: WriteBatch, root: Node, previous: Node | None = None) -> tuple[set[bytes], bool]:
        return self.nodes.stage(batch, root, previous)

    def _remember_nodes(self, staged: tuple[set[bytes], bool]) -> None:
        self.nodes.remember(*staged)

    def _verify_nodes(self, address: str, root_hash: str) -> None:
        self.nodes.verify(address, root_hash)

    # ------------------------------------------------------------------ lifecycle
    def addresses(self) -> list[str]:
        """Every stored address, in key order."""
        with self._lock:
            self._check()
            return [keys.unescape(key[2:]) for key, _ in self._scan(CF_RECORD, b"h/")]

    def create(self, process: Process) -> DurableProcess:
        """Store a version-zero process with a ``created`` base."""
        if not isinstance(process, Process):
            raise InvalidPersistence("create needs a Process")
        if process.version != 0:
            raise InvalidPersistence("create needs a version-zero process (use import_)")
        return self._store_new(process, "created")

    def import_(self, process: Process) -> DurableProcess:
        """Store a process at any version; it claims no prior history."""
        if not isinstance(process, Process):
            raise InvalidPersistence("import needs a Process")
        return self._store_new(process, "imported")

    def _store_new(self, process: Process, kind: str) -> DurableProcess:
        self.require_writable()
        if process.sink is not None:
            raise InvalidPersistence("process is already attached to a durable store")
        with process.lock, self._lock:
            self._check()
            address = process.address
            if self._exists(address):
                raise PersistenceAlreadyExists(address)
            version, root = process.version, process.root
            origin = {"origin": kind, "process_snapshot": _readable_snapshot(process)}
            base_bytes, base_hash = self._base_record(address, None, None, version, root.hash, origin)
            head = Head(None, base_hash)
            batch = self._batch()
            batch.put(CF_RECORD, keys.base_key(address), base_bytes)
            head_bytes = self._head_record(address, base_hash, head, version, root.hash)
            batch.put(CF_RECORD, keys.head_key(address), head_bytes)
            self._stage_head_expectation(batch, address, absent=True)
            pending = self._stage_nodes(batch, root)
            self.mailbox.stage_new(batch, address, root, version)
            try:
                self._write(batch)
            except PersistenceConflict:
                raise PersistenceAlreadyExists(address) from None
            self._accept_head(address, base_hash, head, version, root.hash, head_bytes)
            self._remember_nodes(pending)
            self._latest[address] = _State(version, root, process.limits, head, base_hash)
            return DurableProcess(self, process, head)

    def resume(self, address: str) -> DurableProcess:
        """Rebuild a process from its validated history (never re-runs guest code)."""
        validate_address(address)
        with self._lock:
            self._check()
            head = self._read_head(address)
            if head is None:
                raise PersistenceNotFound(address)
            state = self._rebuild(address, None, 0)
            if self.engine.shared:
                head, state = self._agreeing_read(address, head, state)
            what = f"head of {address}"
            if head["base_hash"] != state.base_hash:
                raise InvalidPersistence(f"{what}: base hash does not match the base")
            if head["position"] != state.head.position or head["hash"] != state.head.hash:
                raise InvalidPersistence(f"{what}: does not match the last transaction")
            if head["process_version"] != state.version or head["root_hash"] != state.root.hash:
                raise InvalidPersistence(f"{what}: version or root hash does not match the replayed state")
            self._verify_nodes(address, state.root.hash)
            self._heads[address] = head
            cached = self._head_cache.get(address)
            if cached is not None and cached[1] == head:  # the record read, so its bytes are those read
                self._head_bytes[address] = (head, cached[0])
            self._latest[address] = state
            return DurableProcess(self, Process(address, state.root, state.version, state.limits), state.head)

    def _agreeing_read(self, address: str, head: dict[str, Any], state: _State) -> tuple[dict[str, Any], _State]:
        """On a shared engine another process may commit between the reading of a head
        and the reading of the history: read the head again and, when it moved, the
        history too, until the two agree. A head that did not move is returned as it is
        (the caller's checks refuse it); one that never stops moving is a conflict."""
        for _attempt in range(RESUME_ATTEMPTS):
            if _head_matches(head, state):
                return head, state
            again = self._read_head(address)
            if again is None:
                raise PersistenceNotFound(address)
            if again == head or _head_matches(again, state):
                return again, state
            head, state = again, self._rebuild(address, None, 0)
        if _head_matches(head, state):
            return head, state
        raise PersistenceConflict(f"{address} kept changing while it was read")

    def fork(self, parent_address: str, child_address: str) -> DurableProcess:
        """A durable child whose base points at the parent's exact head.

        The child shares the parent's current reasoning session (named by its
        ``/thread``) under the same session id: it reads the parent's events up to the
        fork point, then its own (see :mod:`svit.store.events`), so a Svit over the
        child continues the conversation. That shared prefix pins the parent's
        thread-history cuts while the child lives.
        """
        self.require_writable()
        validate_address(parent_address)
        validate_address(child_address)
        with self._lock:
            self._check()
            head = self._read_head(parent_address)
            if head is None:
                raise PersistenceNotFound(parent_address)
            if self._exists(child_address):
                raise PersistenceAlreadyExists(child_address)
            if self._fork_depth(parent_address) + 1 > MAX_FORK_DEPTH:
                raise ResourceLimitExceeded("persistence fork depth")
            state = self._latest.get(parent_address)
            if state is None or state.head.hash != head["hash"] or state.head.position != head["position"]:
                self.resume(parent_address)
                state = self._latest[parent_address]
            parent = Process(parent_address, state.root, state.version, state.limits)
            child = parent.fork(child_address)
            origin = {
                "origin": "fork",
                "parent_address": parent_address,
                "parent_position": state.head.position,
                "parent_head_hash": state.head.hash,
                "parent_process_version": state.version,
                "parent_root_hash": state.root.hash,
            }
            base_bytes, base_hash = self._base_record(child_address, None, None, child.version, child.root_hash, origin)
            ref_values = {
                "fork_format": codec.FORK_FORMAT,
                "child_address": child_address,
                "parent_address": parent_address,
                "parent_position": state.head.position,
                "parent_head_hash": state.head.hash,
                "parent_process_version": state.version,
                "parent_root_hash": state.root.hash,
            }
            ref_bytes = codec.hashed_record(codec.FORK_FIELDS, ref_values, "fork_hash")[0]
            child_head = Head(None, base_hash)
            batch = self._batch()
            batch.put(CF_RECORD, keys.base_key(child_address), base_bytes)
            batch.put(CF_RECORD, keys.fork_key(child_address), ref_bytes)
            child_head_bytes = self._head_record(child_address, base_hash, child_head, child.version, child.root_hash)
            batch.put(CF_RECORD, keys.head_key(child_address), child_head_bytes)
            batch.put(CF_INDEX, keys.child_key(parent_address, child_address), b"")
            self._stage_head_expectation(batch, parent_address)
            self._stage_head_expectation(batch, child_address, absent=True)
            pending = self._stage_nodes(batch, child.root)
            # The child keeps the parent's reasoning session: shared, in this same batch.
            stage_fork_share(self, batch, parent_address, child_address, parent.read("/thread"))
            self.mailbox.stage_new(batch, child_address, child.root, child.version)
            self._write(batch)
            self._accept_head(child_address, base_hash, child_head, child.version, child.root_hash, child_head_bytes)
            self._remember_nodes(pending)
            self._latest[child_address] = _State(child.version, child.root, child.limits, child_head, base_hash)
            return DurableProcess(self, child, child_head)

    def receipts(self, address: str, limit: int = DEFAULT_RECEIPT_LIMIT) -> StoreReceipts:
        """The control-protocol receipts of ``address`` (:mod:`svit.store.receipts`), at
        most ``limit`` (1-4,096) kept: what :meth:`svit.control.ProcessController.durable`
        answers retries from. Removed with the address, not copied by a fork, kept by a cut."""
        return StoreReceipts(self, address, limit)

    def _fork_depth(self, address: str) -> int:
        return self.history.fork_depth(address)

    def remove(self, address: str) -> None:
        """Drop an address, its history, snapshots, reasoning history, control receipts and fork reference (the only destructive gesture).

        Refused with ``PersistenceReferenced`` while a fork child references it: a
        child's resume replays the parent's history, so cut or remove children first.
        Shared tree nodes stay until :meth:`sweep_nodes`.
        """
        self.require_writable()
        validate_address(address)
        with self._lock:
            self._check()
            if not self._exists(address):
                raise PersistenceNotFound(address)
            if self._children(address):
                raise PersistenceReferenced(f"{address} is referenced by fork {self._children(address)[0]}")
            batch = self._batch()
            self._stage_tombstone(batch, address)
            self.mailbox.stage_remove(batch, address)
            self._stage_detach(batch, address)
            batch.delete(CF_RECORD, keys.base_key(address))
            batch.delete(CF_RECORD, keys.head_key(address))
            self._stage_head_expectation(batch, address)
            for prefix, cf in ((keys.transaction_prefix(address), CF_RECORD), (keys.snapshot_prefix(address), CF_RECORD),
                               (keys.thread_events_prefix(address), CF_RECORD),
                               (keys.thread_partitions_prefix(address), CF_RECORD),
                               (keys.thread_checkpoints_prefix(address), CF_RECORD),
                               (keys.receipt_prefix(address), CF_RECORD),
                               (keys.receipt_order_prefix(address), CF_RECORD),
                               (keys.path_prefix_key(address), CF_INDEX)):
                for key, _ in self._scan(cf, prefix):
                    batch.delete(cf, key)
            self._write(batch)
            self._heads.pop(address, None)
            self._head_bytes.pop(address, None)
            self._latest.pop(address, None)

    def _stage_tombstone(self, batch: WriteBatch, address: str) -> None:
        """Record that ``address`` was removed on purpose (the archive's shrink guard reads it)."""
        head = self._read_head(address)
        if head is None:
            return
        record = records.tombstone_record(address, head["process_version"], head["root_hash"], int(time.time()))
        batch.put(CF_DEFAULT, keys.tombstone_key(address), record)

    # ------------------------------------------------------------------ memory archive support
    def store_id(self) -> str:
        """A random id minted once per store directory (archive generations name it)."""
        with self._lock:
            self._check()
            raw = self._get(CF_DEFAULT, keys.STORE_ID_KEY)
            if raw is not None:
                return raw.decode("ascii", "replace")
            value = uuid.uuid4().hex
            batch = self._batch()
            batch.put(CF_DEFAULT, keys.STORE_ID_KEY, value.encode("ascii"))
            self._write(batch)
            return value

    def archive_cut(self) -> dict[str, Any]:
        """A point-in-time export of every address, taken under the store lock.

        Every durable write holds the same lock, so the cut is consistent and carries
        the RocksDB sequence number it was taken at. Each address is validated as
        :meth:`resume` does (or taken from the verified latest-state cache when its
        stored head matches). Read or decode errors raise; they never yield "empty".
        """
        self.require_writable()  # a reader never exports (and its view may move under a cut)
        with self._lock:
            self._check()
            sequence = self.engine.sequence()
            processes = []
            for key, _ in self._scan(CF_RECORD, b"h/"):
                address = keys.unescape(key[2:])
                head = self._read_head(address)
                state = self._latest.get(address)
                if head is None or state is None or state.head.hash != head["hash"] \
                        or state.head.position != head["position"]:
                    self.resume(address)
                    state = self._latest[address]
                data = _readable_snapshot(Process(address, state.root, state.version, state.limits))
                processes.append({"address": address, "version": state.version, "root_hash": state.root.hash,
                                  "process_snapshot": data})
            return {"sequence": sequence, "processes": processes, "tombstones": self.archive_tombstones()}

    def archive_tombstones(self) -> list[dict[str, Any]]:
        """Every address removed from this store: ``{address, version, root_hash, removed_at}``."""
        with self._lock:
            self._check()
            tombstones = []
            for key, raw in self._scan(CF_DEFAULT, b"d/"):
                address = keys.unescape(key[2:])
                record = records.decode_tombstone(raw, address)
                tombstones.append({"address": address, "version": record["process_version"],
                                   "root_hash": record["root_hash"], "removed_at": record["removed_at"]})
            return tombstones

    def archive_heads(self) -> dict[str, tuple[int, str]]:
        """``{address: (process version, root hash)}`` from the stored heads (restore verification)."""
        with self._lock:
            self._check()
            out: dict[str, tuple[int, str]] = {}
            for key, _ in self._scan(CF_RECORD, b"h/"):
                address = keys.unescape(key[2:])
                head = self._read_head(address)
                if head is not None:
                    out[address] = (head["process_version"], head["root_hash"])
            return out

    def read_restore_marker(self) -> bytes | None:
        """The raw restore marker (outside every process), or None."""
        with self._lock:
            self._check()
            return self._get(CF_DEFAULT, keys.RESTORE_MARKER_KEY)

    def write_restore_marker(self, value: bytes) -> None:
        """Write the restore marker with a synced write (a failure makes the store terminal)."""
        self.require_writable()
        with self._lock:
            self._check()
            batch = self._batch()
            batch.put(CF_DEFAULT, keys.RESTORE_MARKER_KEY, value)
            self._write(batch)

    def install_archived(self, process: Process) -> None:
        """Store ``process`` as an imported base, replacing the address if present, in ONE synced batch.

        Used by the memory archive when its join says the archived state wins. A
        present address with fork children is refused (their bases name its history).
        """
        self.require_writable()
        if not isinstance(process, Process) or process.sink is not None:
            raise InvalidPersistence("install_archived needs a detached Process")
        with process.lock, self._lock:
            self._check()
            address = process.address
            batch = self._batch()
            if self._exists(address):
                if self._children(address):
                    raise PersistenceReferenced(f"{address} is referenced by fork {self._children(address)[0]}")
                stage_thread_detach(self, batch, address)
                self._stage_detach(batch, address)
                # The receipts go too: they answer commits of the replaced history, and a
                # retry of one of those must apply again rather than replay a lost answer.
                for prefix, cf in ((keys.transaction_prefix(address), CF_RECORD),
                                   (keys.snapshot_prefix(address), CF_RECORD),
                                   (keys.receipt_prefix(address), CF_RECORD),
                                   (keys.receipt_order_prefix(address), CF_RECORD),
                                   (keys.path_prefix_key(address), CF_INDEX)):
                    for key, _ in self._scan(cf, prefix):
                        batch.delete(cf, key)
            version, root = process.version, process.root
            origin = {"origin": "imported", "process_snapshot": _readable_snapshot(process)}
            base_bytes, base_hash = self._base_record(address, None, None, version, root.hash, origin)
            head = Head(None, base_hash)
            batch.put(CF_RECORD, keys.base_key(address), base_bytes)
            head_bytes = self._head_record(address, base_hash, head, version, root.hash)
            batch.put(CF_RECORD, keys.head_key(address), head_bytes)
            pending = self._stage_nodes(batch, root)
            self.mailbox.stage_new(batch, address, root, version)
            self._write(batch)
            self._accept_head(address, base_hash, head, version, root.hash, head_bytes)
            self._remember_nodes(pending)
            self._head_cache.pop(address, None)
            self._latest[address] = _State(version, root, process.limits, head, base_hash)

    def _stage_detach(self, batch: WriteBatch, address: str) -> None:
        """Delete this address's own fork reference and its parent's child-index entry."""
        parent = self.fork_parent(address)
        if parent is None:
            return
        batch.delete(CF_RECORD, keys.fork_key(address))
        batch.delete(CF_INDEX, keys.child_key(parent, address))

    # ------------------------------------------------------------------ derived state
    def reset_index(self) -> dict[str, int]:
        """Drop and rebuild every derived index from the verified history.

        The batch it writes accepts only rebuildable key classes, so it cannot change
        a byte of any process's base, head, transactions, snapshots, fork references or
        nodes. An index key of no registered class refuses the reset (fail-closed).
        """
        self.require_writable()
        with self._lock:
            self._check()
            batch = self._batch(allowed=(REBUILDABLE,))
            stale = []
            for key, _ in self._scan(CF_INDEX, b""):
                kc = keys.classify(CF_INDEX, key)
                if kc.durability != REBUILDABLE:  # pragma: no cover - the index CF holds only rebuildable classes
                    raise InvalidPersistence("index column family holds an irreplaceable key class")
                stale.append(key)
            for key in stale:
                batch.delete(CF_INDEX, key)
            paths = children = 0
            for key, _ in self._scan(CF_RECORD, b"h/"):
                address = keys.unescape(key[2:])
                for position, record in self._transactions(address):
                    for path in record["touched_paths"]:
                        batch.put(CF_INDEX, keys.path_key(address, path, position), b"")
                        paths += 1
            for key, raw in self._scan(CF_RECORD, b"f/"):
                child = keys.unescape(key[2:])
                ref = records.decode_fork_reference(raw, child)
                batch.put(CF_INDEX, keys.child_key(ref["parent_address"], child), b"")
                children += 1
            ready = sum(self.mailbox.stage_ready_index(batch, address, self.resume(address).root)
                        for address in self.addresses())
            self._write(batch)
            self.nodes.forget()
            return {"removed": len(stale), "path_entries": paths, "child_entries": children, "ready_entries": ready}

    def sweep_nodes(self) -> int:
        """Delete tree nodes no retained version reaches (after removes and cuts); returns the count.

        Every retained version stays readable (:meth:`DurableProcess.at`): the roots kept
        are each head's, each base's and each retained transaction's resulting root.
        """
        self.require_writable()
        with self._lock:
            self._check()
            roots = []
            for key, _ in self._scan(CF_RECORD, b"h/"):
                address = keys.unescape(key[2:])
                head = self._read_head(address)
                if head is None:
                    continue
                roots.append(head["root_hash"])
                raw = self._get(CF_RECORD, keys.base_key(address))
                if raw is not None:
                    roots.append(records.decode_base(raw, address)["root_hash"])
                prefix = keys.transaction_prefix(address)
                for tkey, traw in self._scan(CF_RECORD, prefix):
                    position = keys.from_u64(tkey[len(prefix):])
                    roots.append(records.decode_transaction_root(address, position, traw)["resulting_root_hash"])
            return self.nodes.sweep(roots)

    def record_digests(self) -> dict[str, str]:
        """BLAKE3 of every irreplaceable record, keyed by column family and hex key (for audits)."""
        out: dict[str, str] = {}
        with self._lock:
            self._check()
            for cf in COLUMN_FAMILIES:
                for key, value in self._scan(cf, b""):
                    if keys.classify(cf, key).durability == IRREPLACEABLE:
                        out[f"{cf}:{key.hex()}"] = blake3.blake3(value).hexdigest()
        return out

    # ------------------------------------------------------------------ history
    def _transactions(self, address: str, after: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
        """(position, verified envelope) in position order, starting after ``after``."""
        return self.history.transactions(address, after)

    def _rebuild(self, address: str, stop: Head | None, depth: int) -> _State:
        """The state at the head (or at ``stop``), validated record by record."""
        return self.history.rebuild(address, stop, depth)

    def _restore(self, data: Any, what: str) -> Process:
        """A stored process snapshot restored under :attr:`restore_limits`."""
        return self.history.restore(data, what)

    # ------------------------------------------------------------------ commit
    def _current_head(self, handle: DurableProcess, version: int) -> dict[str, Any]:
        """The address's accepted head, provided ``handle`` is up to date with it (else
        PersistenceConflict). Call holding the store lock."""
        head = self._accepted_head(handle.address)
        if head["position"] != handle.head.position or head["hash"] != handle.head.hash or head["process_version"] != version:
            raise PersistenceConflict()
        return head

    def _accepted_head(self, address: str) -> dict[str, Any]:
        """The head the next commit of ``address`` must chain to (store lock held).

        Every head this store writes passes through :attr:`_heads` (a commit's as soon as
        its batch is queued, before its sync), and no one else writes heads (the engine
        is this store's alone), so the store's own record is the compare-and-swap
        reference; only an address it has not seen yet is read and verified. On a shared
        engine other processes write heads too, so this record is only what the commit
        *expects*: the batch carries the exact bytes of that head as an expectation
        (:meth:`_stage_head_expectation`), the engine compares them with the stored head
        atomically with the write, and a head another process moved is a conflict, after
        which the record is dropped and read again (:meth:`_forget_head`).
        """
        head = self._heads.get(address)
        if head is None:
            read = self._decode_head_bytes(address)
            if read is None:
                raise PersistenceNotFound(address)
            raw, head = read
            self._heads[address] = head
            self._head_bytes[address] = (head, raw)
        return head

    def _accepted_head_bytes(self, address: str, head: dict[str, Any]) -> bytes:
        """The exact bytes of ``head``, the accepted head of ``address`` (store lock held):
        those written or read with it when known, else the record sealed again (head
        records are canonical, so the same bytes)."""
        known = self._head_bytes.get(address)
        if known is not None and known[0] is head:
            return known[1]
        return self._head_record(address, head["base_hash"], Head(head["position"], head["hash"]),
                                 head["process_version"], head["root_hash"])

    def _stage_head_expectation(self, batch: WriteBatch, address: str, *, absent: bool = False) -> None:
        """On a shared engine, make ``batch`` apply only if the head of ``address`` still
        holds the bytes read here or is still absent (``absent``): the compare-and-swap is
        then made by the engine, atomically with the write (a commit expects the bytes
        kept with its accepted head, :meth:`_accepted_head_bytes`)."""
        if not self.engine.shared:
            return
        head_key = keys.head_key(address)
        if absent:
            batch.expect(CF_RECORD, head_key, None)
            batch.expect(CF_RECORD, keys.base_key(address), None)
            return
        batch.expect(CF_RECORD, head_key, self._get(CF_RECORD, head_key))

    def _accept_head(self, address: str, base_hash: str, head: Head, version: int, root_hash: str,
                     raw: bytes | None = None) -> dict[str, Any]:
        """Note the head a write of this store just made (or queued) for ``address`` (with
        ``raw``, the bytes it wrote); returns the record noted."""
        accepted = self._heads[address] = {
            "head_format": codec.HEAD_FORMAT, "address": address, "base_hash": base_hash,
            "position": head.position, "hash": head.hash, "process_version": version, "root_hash": root_hash}
        if raw is not None:
            self._head_bytes[address] = (accepted, raw)
        return accepted

    @contextlib.contextmanager
    def effects_guard(self, handle: DurableProcess) -> Iterator[None]:
        """Held from before an activation's mount writes until it is published: a stale
        handle conflicts before touching a mount, and no other commit can slip in."""
        self.require_writable()
        with self._lock:
            self._check()
            self._current_head(handle, handle.version)
            yield

    def commit(self, handle: DurableProcess, transition: Transition) -> None:
        """Append one transaction with compare-and-swap on the head; synced before returning.

        The batch (transaction, new nodes, path-index entries, head) is prepared under the
        store lock and queued; the commit then shares one synced write with whatever other
        commits are queued at the same moment (:mod:`svit.store.group`) and returns only
        after that write returned. A second handle of the same address conflicts as soon
        as the first one's batch is queued.

        The transition's root is its mutations applied to the previous root by the one
        :func:`svit.mutation.apply`, the function resume replays, so the record is not
        replayed here; resume checks every transaction's resulting root hash.
        """
        engine = self.engine
        if engine.read_only:
            raise read_only_refusal()
        address = transition.address
        source = transition.source
        # Up to 1,024 characters are 1-4,096 UTF-8 bytes whatever they are (a lone
        # surrogate is 3): only a longer text is encoded to count its bytes.
        if type(source) is not str or not (0 < len(source) <= MAX_SOURCE_BYTES // 4
                                           or 1 <= len(source.encode("utf-8", "surrogatepass")) <= MAX_SOURCE_BYTES):
            raise InvalidPersistence("transaction source must be 1-4,096 bytes of text")
        mutations = transition.mutations
        root_after = transition.root_after
        root_hash = root_after.hash
        version_before = transition.version_before
        version_after = transition.version_after
        summary = records.output_summary(transition.output)
        lock = self._lock
        with lock.committing():
            engine.check()
            # The compare-and-swap on the head (:meth:`_current_head`, inline).
            head = self._heads.get(address)
            if head is None:
                head = self._accepted_head(address)
            known = handle.head
            previous_position = head["position"]
            if (previous_position != known.position or head["hash"] != known.hash
                    or head["process_version"] != version_before):
                raise PersistenceConflict()
            position = 0 if previous_position is None else previous_position + 1
            if position > U64_MAX:
                raise ResourceLimitExceeded("persistence transaction position")
            touched = mutation_module.touched_paths(mutations)
            base_hash = head["base_hash"]
            try:
                encoded, event_hash, head_bytes = records.commit_records(
                    address, base_hash, position, head["hash"], version_before, version_after, mutations,
                    touched, source, root_hash, int(time.time() * 1000), transition.script, summary)
            except ValueError:
                raise InvalidPersistence("transaction cannot be encoded (text that is not Unicode)") from None
            if len(encoded) > MAX_TRANSACTION_BYTES:
                raise ResourceLimitExceeded("persistence transaction bytes")
            new_head = Head(position, event_hash)
            prefixes = self._keys.get(address)
            head_key, transaction_prefix, path_prefix = prefixes if prefixes is not None else self._address_keys(address)
            position_key = _u64_key(position)
            batch = engine.batch()
            put = batch.put
            put(CF_RECORD, transaction_prefix + position_key, encoded)
            pending = self.nodes.stage(batch, root_after, transition.root_before)
            for path in touched:
                put(CF_INDEX, path_prefix + _escape(path) + _SEP + position_key, b"")
            self.mailbox.stage_commit(batch, transition)
            # A control receipt answering this commit is written by the same synced write.
            receipt = None if transition.receipt is None else stage_commit_receipt(self, batch, transition)
            put(CF_RECORD, head_key, head_bytes)
            if engine.shared:
                # The head this commit chains to, as the bytes written or read with it.
                batch.expect(CF_RECORD, head_key, self._accepted_head_bytes(address, head))
            fences = handle.fences
            if fences:
                for space, key, value in fences:
                    batch.expect(space, key, value)
            ticket = lock.submit(batch)
            accepted = self._accept_head(address, base_hash, new_head, version_after, root_hash, head_bytes)
            # Known from now on: a later commit that skips these nodes is queued behind this
            # batch (written in the same or a later write), and a failed write is terminal.
            # Noted under the lock, so a sweep (which forgets) never interleaves. A batch
            # with expectations may be left out of its write, so its nodes are noted only
            # once it was written (a commit beside it stages them again meanwhile).
            conditional = bool(batch.expectations)
            if not conditional:
                self.nodes.remember(*pending)
        # A failed write leaves the store terminal (nothing chains to ``accepted`` then); a
        # waiter interrupted here leaves its batch queued, to be written as accepted.
        try:
            lock.wait(ticket)
        except BaseException as failure:
            # Nothing a failed (or abandoned) commit staged is taken as stored any more:
            # the chunk memory starts over (forgetting is always safe).
            with lock.committing():
                self.nodes.forget()
            if isinstance(failure, (PersistenceConflict, PersistenceUnavailable)):
                # The batch was not written (refused, or a write that certainly did not
                # happen; after any other failed write the store is terminal anyway).
                self._forget_head(address, accepted)
            raise
        if conditional:
            with lock.committing():
                self.nodes.remember(*pending)
        # Kept as it is: neither cache hands its records out (a read copies), nor changes them.
        self._head_cache[address] = (head_bytes, accepted)
        if receipt is not None:
            receipt.written = True
        handle.set_head(new_head)
        self._latest[address] = _State(version_after, root_after, handle.limits, new_head, base_hash)

    def _address_keys(self, address: str) -> tuple[bytes, bytes, bytes]:
        """``(head key, transaction prefix, path-index prefix)`` of ``address``, made once
        per address (a bounded memory: it starts over past :data:`ADDRESS_KEYS`)."""
        made = self._keys.get(address)
        if made is None:
            if len(self._keys) >= ADDRESS_KEYS:
                self._keys.clear()
            made = self._keys[address] = (keys.head_key(address), keys.transaction_prefix(address),
                                          keys.path_prefix_key(address))
        return made

    def _forget_head(self, address: str, accepted: dict[str, Any]) -> None:
        """A queued head was not written (an expectation failed, or the write did not
        happen): the next commit reads the stored head again instead of chaining to it."""
        with self._lock.committing():
            if self._heads.get(address) is accepted:
                del self._heads[address]
                self._head_bytes.pop(address, None)
            self._head_cache.pop(address, None)

    # ------------------------------------------------------------------ handle operations
    def _check_head(self, handle: DurableProcess) -> dict[str, Any]:
        head = self._read_head(handle.address)
        if head is None:
            raise PersistenceNotFound(handle.address)
        if head["position"] != handle.head.position or head["hash"] != handle.head.hash:
            raise PersistenceConflict()
        return head

    def record_snapshot(self, handle: DurableProcess) -> StoreSnapshot:
        self.require_writable()
        process = handle.process
        with process.lock, self._lock:
            self._check()
            self._check_head(handle)
            record, snapshot_hash = self._snapshot_record(handle.address, handle.head, process)
            batch = self._batch()
            batch.put(CF_RECORD, keys.snapshot_key(handle.address, snapshot_hash), record[0])
            self._stage_head_expectation(batch, handle.address)
            self._write(batch)
            return record[1]

    def _snapshot_record(self, address: str, head: Head, process: Process) -> tuple[tuple[bytes, StoreSnapshot], str]:
        encoded, snapshot = records.snapshot_record(address, head, process)
        return (encoded, snapshot), snapshot.snapshot_hash

    def cut_history(self, handle: DurableProcess) -> StoreSnapshot:
        self.require_writable()
        process = handle.process
        address = handle.address
        with process.lock, self._lock:
            self._check()
            self._check_head(handle)
            children = self._children(address)
            if children:
                raise PersistenceReferenced(f"{address} is referenced by fork {children[0]}")
            head = handle.head
            (record, snapshot), snapshot_hash = self._snapshot_record(address, head, process)
            origin = {"origin": "snapshot", "snapshot_hash": snapshot_hash}
            base_bytes, base_hash = self._base_record(address, head.position, head.hash, process.version,
                                                      process.root_hash, origin)
            new_head = Head(head.position, base_hash)
            batch = self._batch()
            for key, _ in self._scan(CF_RECORD, keys.transaction_prefix(address)):
                batch.delete(CF_RECORD, key)
            for key, _ in self._scan(CF_INDEX, keys.path_prefix_key(address)):
                batch.delete(CF_INDEX, key)
            # Losing the fork reference unpins the parent: first hold what the thread reads from it.
            stage_thread_detach(self, batch, address)
            self._stage_detach(batch, address)
            batch.put(CF_RECORD, keys.snapshot_key(address, snapshot_hash), record)
            batch.put(CF_RECORD, keys.base_key(address), base_bytes)
            head_bytes = self._head_record(address, base_hash, new_head, process.version, process.root_hash)
            batch.put(CF_RECORD, keys.head_key(address), head_bytes)
            self._stage_head_expectation(batch, address)
            for space, key, value in handle.fences:
                batch.expect(space, key, value)
            self._write(batch)
            self._accept_head(address, base_hash, new_head, process.version, process.root_hash, head_bytes)
            handle.set_head(new_head)
            self._latest[address] = _State(process.version, process.root, process.limits, new_head, base_hash)
            return snapshot

    def query_transactions(self, handle: DurableProcess, after_position: int | None, through_position: int | None,
               path_prefix: str | None, source: str | None, version_from: int | None, version_through: int | None,
               transaction_hash: str | None, limit: int) -> list[Transaction]:
        return self.history.query(handle.address, after_position, through_position, path_prefix, source,
                                  version_from, version_through, transaction_hash, limit)
