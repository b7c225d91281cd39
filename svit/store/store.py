"""The durable process store: a hash-chained transaction log per address in RocksDB.

Contract (reference §10, with DESIGN §5.5/§5.7 and durability.md 1-3):

* A process's history is a **base** (created, imported, fork or snapshot) followed by
  **transactions**; the **head** names the last one. Each transaction records the
  mutations of one committed transition and is chained to its predecessor by hash.
* A durable handle publishes a transition only after ONE RocksDB write batch holding
  the transaction, the new tree nodes, the derived path-index entries and the new head
  has returned from a ``sync=True`` write (WAL fsynced). The batch is guarded by a
  compare-and-swap on the head under the store lock: a stale handle gets
  ``PersistenceConflict`` and keeps its old state.
* A synced write that raises makes the store terminal: every later operation raises
  ``PersistenceUnavailable`` until the store is reopened (RocksDB recovery runs on
  open). The failed write is never retried or reported as successful.
* Resume rebuilds the base, replays every transaction's mutations without running guest
  code, re-validates the root after each, checks every hash, the head, and the stored
  tree nodes of the head state. Any inconsistency is ``InvalidPersistence``.

RocksDB options relied on (pinned in :func:`_options`): WAL on (``disable_wal`` is
False on every write), ``sync=True`` on every write batch, WAL recovery mode
``PointInTime`` (recover to the last consistent record; every acknowledged batch was
fsynced before it, so it survives), ``paranoid_checks``, missing column families
created on open. Only this process may hold the directory open (RocksDB's lock file).

Key classes and column families are declared in :mod:`svit.store.keys`.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterable, Iterator, Self, cast

import rocksdict

from .. import mutation as mutation_module
from .. import snapshot as snapshot_module
from .. import tree
from ..activation import compile_check
from ..errors import (
    InvalidPersistence,
    InvalidValue,
    PersistenceAlreadyExists,
    PersistenceConflict,
    PersistenceNotFound,
    PersistenceReferenced,
    PersistenceUnavailable,
    ResourceLimitExceeded,
    SvitError,
)
from ..limits import Limits
from ..mounts import Mount
from ..mutation import Mutation
from ..namespace import validate_root
from ..paths import parse, validate_address
from ..process import Process, Transition
from ..tree import Node
from . import codec, failures, keys
from .events import StoreEventLog, stage_fork_share
from .failures import storage_error
from .keys import CF_DEFAULT, CF_INDEX, CF_NODES, CF_RECORD, COLUMN_FAMILIES, IRREPLACEABLE, REBUILDABLE

if TYPE_CHECKING:
    from .._ports import Ports
    from ..activation import Activation
    from ..loop.events import Checkpoint, Event, EventLog
    from ..loop.messages import Message
    from ..process import Change

STORE_FORMAT = b"svit-store@1"
MAX_TRANSACTION_BYTES = 16 * 1024 * 1024
MAX_SOURCE_BYTES = 4096
MAX_FORK_DEPTH = 64
MAX_QUERY_LIMIT = 4096
U64_MAX = 2**64 - 1
_KNOWN_NODES_MAX = 1 << 18


def _options() -> rocksdict.Options:
    """The RocksDB options this store's guarantees rest on (see the module docstring)."""
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_wal_recovery_mode(rocksdict.DBRecoveryMode.point_in_time())
    options.set_paranoid_checks(True)
    return options


def _write_options() -> rocksdict.WriteOptions:
    options = rocksdict.WriteOptions()
    options.sync = True
    options.disable_wal = False
    return options


@dataclass(frozen=True)
class StoreSnapshot:
    """A stored snapshot of one address at one head; ``bytes(s)`` is the process snapshot."""

    snapshot_hash: str
    address: str
    covered_position: int | None
    head_hash: str
    process_version: int
    root_hash: str
    process_snapshot: bytes = field(repr=False)

    def __bytes__(self) -> bytes:
        return self.process_snapshot


@dataclass(frozen=True)
class Transaction:
    """One committed transaction as a query returns it (values as plain data)."""

    address: str
    position: int
    hash: str
    previous_hash: str
    process_version_before: int
    process_version_after: int
    mutations: list[dict[str, Any]]
    touched_paths: list[str]
    source: str
    resulting_root_hash: str


@dataclass(frozen=True)
class Head:
    position: int | None
    hash: str


@dataclass
class _State:
    version: int
    root: Node
    limits: Limits
    head: Head
    base_hash: str


class _Batch:
    """A write batch that only accepts keys of registered classes it is allowed to touch."""

    def __init__(self, store: ProcessStore, allowed: tuple[str, ...] = (IRREPLACEABLE, REBUILDABLE)) -> None:
        self._store = store
        self._allowed = allowed
        self.batch = rocksdict.WriteBatch(raw_mode=True)
        self.size = 0

    def _check(self, column_family: str, key: bytes) -> Any:
        kc = keys.classify(column_family, key)
        if kc.durability not in self._allowed:
            raise InvalidPersistence(f"this operation may not write {kc.durability} key class {kc.name!r}")
        return self._store._handles[column_family]

    def put(self, column_family: str, key: bytes, value: bytes) -> None:
        handle = self._check(column_family, key)
        self.batch.put(key, value, handle)
        self.size += len(key) + len(value)

    def delete(self, column_family: str, key: bytes) -> None:
        handle = self._check(column_family, key)
        self.batch.delete(key, handle)


def _readable_snapshot(process: Process) -> bytes:
    """The process snapshot for a stored record, refused when restore could not read it back.

    Raised limits allow a valid tree whose snapshot exceeds the restore byte bound; a base
    or store snapshot of it would make the address unresumable (a cut deletes the history).
    """
    data = process.snapshot()
    if len(data) > snapshot_module.MAX_SNAPSHOT_BYTES:
        raise ResourceLimitExceeded("snapshot bytes")
    return data


def _compiler(limits: Limits) -> Callable[[str, Any], None]:
    return lambda name, script: compile_check(name, script.source, limits)


def apply_mutations(root: Node, mutations: Iterable[Mutation | dict[str, Any]], what: str) -> Node:
    """Replay mutations on ``root`` (no guest code runs); any failure is InvalidPersistence.

    The same :func:`svit.mutation.apply` a process used to build each committed root, so a
    log replays to exactly the roots it recorded. Records decoded with node values are
    converted to typed mutations here.
    """
    return mutation_module.apply_all(root, [mutation_module.from_node_record(m) for m in mutations], what)


class ProcessStore:
    """A RocksDB directory holding the durable history of many processes."""

    def __init__(self, path: str, db: rocksdict.Rdict) -> None:
        self.path = path
        self._db = db
        self._handles = {name: db.get_column_family_handle(name) for name in COLUMN_FAMILIES}
        self._cfs = {name: (db if name == CF_DEFAULT else db.get_column_family(name)) for name in COLUMN_FAMILIES}
        self._write_options = _write_options()
        self._lock = threading.RLock()
        self._failed: str | None = None
        self._closed = False
        self._known_nodes: set[bytes] = set()
        self._head_cache: dict[str, tuple[bytes, dict[str, Any]]] = {}
        #: Latest committed state per address seen by this store object (a cache; fork uses it).
        self._latest: dict[str, _State] = {}
        #: What restoring a stored snapshot may cost at most (compile-time work of all
        #: its scripts together, see :meth:`Process.restore`); a host may set its own.
        self.restore_limits = Limits()
        #: The one synced write path (``faults.FailingWrites`` wraps it in tests).
        self._writer: Callable[[Any], None] = lambda batch: self._db.write(batch, self._write_options)

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> ProcessStore:
        """Open (creating if absent) a store directory; refuses foreign or unknown layouts."""
        path = os.fspath(path)
        try:
            os.makedirs(path, exist_ok=True)
            if not os.path.isdir(path):
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory")
            if os.path.exists(os.path.join(path, "CURRENT")):
                existing = rocksdict.Rdict.list_cf(path, rocksdict.Options(raw_mode=True))
                unknown = sorted(set(existing) - set(COLUMN_FAMILIES))
                if unknown:
                    raise InvalidPersistence(f"store has unregistered column families: {unknown}")
            column_families = {name: _options() for name in COLUMN_FAMILIES if name != CF_DEFAULT}
            db = rocksdict.Rdict(path, _options(), column_families=column_families)
        except SvitError:
            raise
        except Exception as exc:
            # RocksDB's and the OS's text name host files; only the classified problem is kept.
            raise storage_error(exc, "cannot open store") from None
        try:
            store = cls(path, db)
        except Exception as exc:
            db.close()
            raise storage_error(exc, "cannot open store") from None
        try:
            marker = store._get(CF_DEFAULT, keys.FORMAT_KEY)
            if marker is None:
                batch = store._batch()
                batch.put(CF_DEFAULT, keys.FORMAT_KEY, STORE_FORMAT)
                store._write(batch)
            elif marker != STORE_FORMAT:
                raise InvalidPersistence("store format marker is not svit-store@1")
        except BaseException:
            store.close()  # a refused open leaves no lock behind
            raise
        return store

    def close(self) -> None:
        """Close the database; the object refuses every later operation."""
        with self._lock:
            if not self._closed:
                self._closed = True
                # Column-family objects keep the database (and its LOCK file) alive.
                self._cfs.clear()
                self._handles.clear()
                self._db.close()
                gc.collect()

    def __enter__(self) -> ProcessStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def terminal(self) -> bool:
        """True after a synced write failed (reopen to recover)."""
        return self._failed is not None

    def statement(self) -> dict[str, Any]:
        """Where the history lives, how it is protected, and what is derived (durability 2, 14)."""
        real = os.path.realpath(self.path)
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
            "write": "one synced WriteBatch per acknowledged commit (WAL on, sync=True)",
            "wal_recovery_mode": "point_in_time",
            # One RocksDB instance: the derived index shares the record's device.
            "shares_device": True,
            "terminal": self.terminal,
        }

    # ------------------------------------------------------------------ low-level
    def _check(self) -> None:
        if self._closed:
            raise PersistenceUnavailable("store is closed", reason="closed")
        if self._failed is not None:
            raise PersistenceUnavailable(f"a synced write failed ({self._failed}); reopen the store", reason="terminal")

    def _batch(self, allowed: tuple[str, ...] = (IRREPLACEABLE, REBUILDABLE)) -> _Batch:
        return _Batch(self, allowed)

    def _write(self, batch: _Batch) -> None:
        """The only durable write: synced; any failure makes the store terminal."""
        self._check()
        try:
            self._writer(batch.batch)
        except BaseException as exc:
            reason, description = failures.classify(exc)
            self._failed = description
            raise PersistenceUnavailable(
                f"synced write failed ({description}); the store is terminal until reopened", reason=reason
            ) from None

    def _get(self, column_family: str, key: bytes) -> bytes | None:
        try:
            return self._cfs[column_family].get(key)
        except Exception as exc:
            raise storage_error(exc, "read failed") from None

    def _scan(self, column_family: str, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Keys/values under ``prefix`` in key order; read errors raise, never end early."""
        try:
            iterator = self._cfs[column_family].iter()
            iterator.seek(start if start is not None else prefix)
            while iterator.valid():
                key = iterator.key()
                if not key.startswith(prefix):
                    break
                yield key, iterator.value()
                iterator.next()
            iterator.status()
        except SvitError:
            raise
        except Exception as exc:
            raise storage_error(exc, "scan failed") from None

    # ------------------------------------------------------------------ records
    def _read_head(self, address: str) -> dict[str, Any] | None:
        raw = self._get(CF_RECORD, keys.head_key(address))
        if raw is None:
            return None
        cached = self._head_cache.get(address)
        if cached is not None and cached[0] == raw:
            # Byte-identical to a head this store verified or wrote itself.
            return dict(cached[1])
        head = codec.decode_record(raw, codec.HEAD_FIELDS, "head_check", f"head of {address}")
        if head["head_format"] != codec.HEAD_FORMAT or head["address"] != address:
            raise InvalidPersistence(f"head of {address}: wrong format or address")
        if not (
            (head["position"] is None or codec.is_u64(head["position"]))
            and codec.is_hex_hash(head["hash"])
            and codec.is_hex_hash(head["base_hash"])
            and codec.is_u64(head["process_version"])
            and codec.is_hex_hash(head["root_hash"])
        ):
            raise InvalidPersistence(f"head of {address}: malformed fields")
        self._head_cache[address] = (raw, dict(head))
        return head

    @staticmethod
    def _head_record(address: str, base_hash: str, head: Head, version: int, root_hash: str) -> bytes:
        values = {
            "head_format": codec.HEAD_FORMAT,
            "address": address,
            "base_hash": base_hash,
            "position": head.position,
            "hash": head.hash,
            "process_version": version,
            "root_hash": root_hash,
        }
        return codec.hashed_record(codec.HEAD_FIELDS, values, "head_check")[0]

    @staticmethod
    def _base_record(address: str, covered: int | None, anchor: str | None, version: int, root_hash: str,
                     origin: dict[str, Any]) -> tuple[bytes, str]:
        values = {
            "base_format": codec.BASE_FORMAT,
            "address": address,
            "covered_position": covered,
            "anchor_event_hash": anchor,
            "process_version": version,
            "root_hash": root_hash,
            "origin": origin,
        }
        return codec.hashed_record(codec.BASE_FIELDS, values, "base_hash")

    def _exists(self, address: str) -> bool:
        return (
            self._get(CF_RECORD, keys.head_key(address)) is not None
            or self._get(CF_RECORD, keys.base_key(address)) is not None
        )

    def _children(self, address: str) -> list[str]:
        """Fork children of ``address``: the child index, and the (irreplaceable) fork references.

        The index is derived and may be lost before ``reset_index`` runs; the refusal to
        remove, cut or replace a referenced address must not depend on it alone.
        """
        prefix = keys.children_prefix(address)
        found = {keys.unescape(key[len(prefix):]) for key, _ in self._scan(CF_INDEX, prefix)}
        for key, raw in self._scan(CF_RECORD, b"f/"):
            child = keys.unescape(key[2:])
            ref = codec.decode_record(raw, codec.FORK_FIELDS, "fork_hash", f"fork reference of {child}")
            if ref["parent_address"] == address:
                found.add(child)
        return sorted(found)

    # ------------------------------------------------------------------ nodes
    def _node_present(self, digest: bytes, pending: set[bytes]) -> bool:
        if digest in pending or digest in self._known_nodes:
            return True
        return self._get(CF_NODES, keys.node_key(digest)) is not None

    def _stage_subtree(self, batch: _Batch, node: Node, pending: set[bytes]) -> None:
        """Stage every container of ``node``'s subtree that is not stored yet."""
        stack = [node]
        while stack:
            current = stack.pop()
            if not current.is_container or self._node_present(current.digest, pending):
                continue
            batch.put(CF_NODES, keys.node_key(current.digest), codec.encode_node(current))
            pending.add(current.digest)
            stack.extend(codec.container_children(current))

    def _stage_nodes(self, batch: _Batch, root: Node, mutations: list[dict[str, Any]] | None) -> set[bytes]:
        """Stage the containers ``root`` introduces.

        With ``mutations``, only nodes at or above a mutation path can be new (the
        previous root is fully stored): whole subtrees at mutation paths first, then the
        ancestors on each path (whose other children are unchanged, hence stored).
        """
        pending: set[bytes] = set()
        if mutations is None:
            self._stage_subtree(batch, root, pending)
            return pending
        chains: list[Node] = []
        for mutation in mutations:
            segments = parse(mutation["path"])
            current: Node | None = root
            for depth in range(len(segments) + 1):
                if current is None or not current.is_container:
                    break
                if depth == len(segments):
                    self._stage_subtree(batch, current, pending)
                    break
                chains.append(current)
                try:
                    current = tree.get(current, (segments[depth],))
                except SvitError:
                    current = None
        for node in chains:
            # Ancestors of a change are new in all but rare cases; writing a node that
            # exists rewrites identical bytes (content addressed), cheaper than a lookup.
            if node.digest not in pending:
                batch.put(CF_NODES, keys.node_key(node.digest), codec.encode_node(node))
                pending.add(node.digest)
        return pending

    def _remember_nodes(self, digests: set[bytes]) -> None:
        if len(self._known_nodes) + len(digests) > _KNOWN_NODES_MAX:
            self._known_nodes.clear()
        self._known_nodes |= digests

    def _verify_nodes(self, address: str, root_hash: str) -> None:
        """Walk the stored tree of a head and check every node against its digest."""
        seen: set[bytes] = set()
        stack = [bytes.fromhex(root_hash)]
        while stack:
            digest = stack.pop()
            if digest in seen:
                continue
            seen.add(digest)
            raw = self._get(CF_NODES, keys.node_key(digest))
            if raw is None:
                raise InvalidPersistence(f"{address}: tree node {digest.hex()[:16]} is missing")
            stack.extend(codec.verify_node(digest, raw))
        self._remember_nodes(seen)

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
            batch.put(CF_RECORD, keys.head_key(address), self._head_record(address, base_hash, head, version, root.hash))
            pending = self._stage_nodes(batch, root, None)
            self._write(batch)
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
            what = f"head of {address}"
            if head["base_hash"] != state.base_hash:
                raise InvalidPersistence(f"{what}: base hash does not match the base")
            if head["position"] != state.head.position or head["hash"] != state.head.hash:
                raise InvalidPersistence(f"{what}: does not match the last transaction")
            if head["process_version"] != state.version or head["root_hash"] != state.root.hash:
                raise InvalidPersistence(f"{what}: version or root hash does not match the replayed state")
            self._verify_nodes(address, state.root.hash)
            self._latest[address] = state
            return DurableProcess(self, Process(address, state.root, state.version, state.limits), state.head)

    def fork(self, parent_address: str, child_address: str) -> DurableProcess:
        """A durable child whose base points at the parent's exact head.

        The child shares the parent's current reasoning session (named by its
        ``/thread``) under the same session id: it reads the parent's events up to the
        fork point, then its own (see :mod:`svit.store.events`), so a Svit over the
        child continues the conversation. That shared prefix pins the parent's
        thread-history cuts while the child lives.
        """
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
            batch.put(CF_RECORD, keys.head_key(child_address),
                      self._head_record(child_address, base_hash, child_head, child.version, child.root_hash))
            batch.put(CF_INDEX, keys.child_key(parent_address, child_address), b"")
            pending = self._stage_nodes(batch, child.root, [{"path": "/system"}])
            # The child keeps the parent's reasoning session: shared, in this same batch.
            stage_fork_share(self, batch, parent_address, child_address, parent.read("/thread"))
            self._write(batch)
            self._remember_nodes(pending)
            self._latest[child_address] = _State(child.version, child.root, child.limits, child_head, base_hash)
            return DurableProcess(self, child, child_head)

    def _fork_depth(self, address: str) -> int:
        depth = 0
        current = address
        while depth <= MAX_FORK_DEPTH:
            raw = self._get(CF_RECORD, keys.fork_key(current))
            if raw is None:
                return depth
            ref = codec.decode_record(raw, codec.FORK_FIELDS, "fork_hash", f"fork reference of {current}")
            current = ref["parent_address"]
            depth += 1
        return depth

    def remove(self, address: str) -> None:
        """Drop an address, its history, snapshots, reasoning history and fork reference (the only destructive gesture).

        Refused with ``PersistenceReferenced`` while a fork child references it: a
        child's resume replays the parent's history, so cut or remove children first.
        Shared tree nodes stay until :meth:`sweep_nodes`.
        """
        validate_address(address)
        with self._lock:
            self._check()
            if not self._exists(address):
                raise PersistenceNotFound(address)
            if self._children(address):
                raise PersistenceReferenced(f"{address} is referenced by fork {self._children(address)[0]}")
            batch = self._batch()
            self._stage_tombstone(batch, address)
            self._stage_detach(batch, address)
            batch.delete(CF_RECORD, keys.base_key(address))
            batch.delete(CF_RECORD, keys.head_key(address))
            for prefix, cf in ((keys.transaction_prefix(address), CF_RECORD), (keys.snapshot_prefix(address), CF_RECORD),
                               (keys.thread_events_prefix(address), CF_RECORD),
                               (keys.thread_partitions_prefix(address), CF_RECORD),
                               (keys.thread_checkpoints_prefix(address), CF_RECORD),
                               (keys.path_prefix_key(address), CF_INDEX)):
                for key, _ in self._scan(cf, prefix):
                    batch.delete(cf, key)
            self._write(batch)
            self._latest.pop(address, None)

    def _stage_tombstone(self, batch: _Batch, address: str) -> None:
        """Record that ``address`` was removed on purpose (the archive's shrink guard reads it)."""
        head = self._read_head(address)
        if head is None:
            return
        import time

        import cbor2

        record = {"address": address, "process_version": head["process_version"], "root_hash": head["root_hash"],
                  "removed_at": int(time.time())}
        batch.put(CF_DEFAULT, keys.tombstone_key(address), cbor2.dumps(record, canonical=True))

    # ------------------------------------------------------------------ memory archive support
    def store_id(self) -> str:
        """A random id minted once per store directory (archive generations name it)."""
        import uuid

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

        with self._lock:
            self._check()
            try:
                sequence = int(self._db.latest_sequence_number())
            except Exception as exc:
                raise storage_error(exc, "read failed") from None
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
        import cbor2

        with self._lock:
            self._check()
            tombstones = []
            for key, raw in self._scan(CF_DEFAULT, b"d/"):
                try:
                    record = cbor2.loads(raw)
                    tombstones.append({"address": keys.unescape(key[2:]), "version": int(record["process_version"]),
                                       "root_hash": str(record["root_hash"]), "removed_at": int(record["removed_at"])})
                except Exception:
                    raise InvalidPersistence(f"tombstone of {keys.unescape(key[2:])} does not decode") from None
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
        if not isinstance(process, Process) or process.sink is not None:
            raise InvalidPersistence("install_archived needs a detached Process")
        with process._lock, self._lock:
            self._check()
            address = process.address
            batch = self._batch()
            if self._exists(address):
                if self._children(address):
                    raise PersistenceReferenced(f"{address} is referenced by fork {self._children(address)[0]}")
                from .events import stage_thread_detach

                stage_thread_detach(self, batch, address)
                self._stage_detach(batch, address)
                for prefix, cf in ((keys.transaction_prefix(address), CF_RECORD),
                                   (keys.snapshot_prefix(address), CF_RECORD),
                                   (keys.path_prefix_key(address), CF_INDEX)):
                    for key, _ in self._scan(cf, prefix):
                        batch.delete(cf, key)
            version, root = process.version, process.root
            origin = {"origin": "imported", "process_snapshot": _readable_snapshot(process)}
            base_bytes, base_hash = self._base_record(address, None, None, version, root.hash, origin)
            head = Head(None, base_hash)
            batch.put(CF_RECORD, keys.base_key(address), base_bytes)
            batch.put(CF_RECORD, keys.head_key(address), self._head_record(address, base_hash, head, version, root.hash))
            pending = self._stage_nodes(batch, root, None)
            self._write(batch)
            self._remember_nodes(pending)
            self._head_cache.pop(address, None)
            self._latest[address] = _State(version, root, process.limits, head, base_hash)

    def _stage_detach(self, batch: _Batch, address: str) -> None:
        """Delete this address's own fork reference and its parent's child-index entry."""
        raw = self._get(CF_RECORD, keys.fork_key(address))
        if raw is None:
            return
        ref = codec.decode_record(raw, codec.FORK_FIELDS, "fork_hash", f"fork reference of {address}")
        batch.delete(CF_RECORD, keys.fork_key(address))
        batch.delete(CF_INDEX, keys.child_key(ref["parent_address"], address))

    # ------------------------------------------------------------------ derived state
    def reset_index(self) -> dict[str, int]:
        """Drop and rebuild every derived index from the verified history.

        The batch it writes accepts only rebuildable key classes, so it cannot change
        a byte of any process's base, head, transactions, snapshots, fork references or
        nodes. An index key of no registered class refuses the reset (fail-closed).
        """
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
                ref = codec.decode_record(raw, codec.FORK_FIELDS, "fork_hash", f"fork reference of {child}")
                batch.put(CF_INDEX, keys.child_key(ref["parent_address"], child), b"")
                children += 1
            self._write(batch)
            self._known_nodes.clear()
            return {"removed": len(stale), "path_entries": paths, "child_entries": children}

    def sweep_nodes(self) -> int:
        """Delete tree nodes no stored head reaches (after removes and cuts); returns the count."""
        with self._lock:
            self._check()
            live: set[bytes] = set()
            for key, _ in self._scan(CF_RECORD, b"h/"):
                head = self._read_head(keys.unescape(key[2:]))
                stack = [bytes.fromhex(head["root_hash"])]
                while stack:
                    digest = stack.pop()
                    if digest in live:
                        continue
                    live.add(digest)
                    raw = self._get(CF_NODES, keys.node_key(digest))
                    if raw is not None:
                        stack.extend(codec.verify_node(digest, raw))
            batch = self._batch()
            dead = 0
            for key, _ in self._scan(CF_NODES, b"n/"):
                if key[2:] not in live:
                    batch.delete(CF_NODES, key)
                    dead += 1
            if dead:
                self._write(batch)
            self._known_nodes.clear()
            return dead

    def record_digests(self) -> dict[str, str]:
        """BLAKE3 of every irreplaceable record, keyed by column family and hex key (for audits)."""
        import blake3

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
        prefix = keys.transaction_prefix(address)
        start = prefix + keys.u64(after + 1) if after is not None else None
        for key, raw in self._scan(CF_RECORD, prefix, start):
            suffix = key[len(prefix):]
            if len(suffix) != 8:
                raise InvalidPersistence(f"{address}: malformed transaction key")
            position = keys.from_u64(suffix)
            yield position, self._decode_transaction(address, position, raw)

    def _decode_transaction(self, address: str, position: int, raw: bytes) -> dict[str, Any]:
        what = f"transaction {position} of {address}"
        record = codec.decode_record(raw, codec.TRANSACTION_FIELDS, "event_hash", what)
        if record["event_format"] != codec.TRANSACTION_FORMAT:
            raise InvalidPersistence(f"{what}: unknown format")
        if record["address"] != address or record["position"] != position:
            raise InvalidPersistence(f"{what}: address or position does not match its key")
        if not (codec.is_hex_hash(record["previous_hash"]) and codec.is_hex_hash(record["resulting_root_hash"])
                and codec.is_u64(record["process_version_before"]) and codec.is_u64(record["process_version_after"])):
            raise InvalidPersistence(f"{what}: malformed fields")
        if record["process_version_after"] != record["process_version_before"] + 1:
            raise InvalidPersistence(f"{what}: version does not advance by one")
        source = record["source"]
        if type(source) is not str or not 1 <= len(source.encode("utf-8")) <= MAX_SOURCE_BYTES:
            raise InvalidPersistence(f"{what}: malformed source")
        if type(record["mutations"]) is not list:
            raise InvalidPersistence(f"{what}: malformed mutations")
        record["mutations"] = [codec.decode_mutation(m, what) for m in record["mutations"]]
        if record["touched_paths"] != codec.touched_paths(record["mutations"]):
            raise InvalidPersistence(f"{what}: touched paths do not match its mutations")
        return record

    def _rebuild(self, address: str, stop: Head | None, depth: int) -> _State:
        """The state at the head (or at ``stop``), validated record by record."""
        raw = self._get(CF_RECORD, keys.base_key(address))
        if raw is None:
            if depth:
                raise InvalidPersistence(f"fork parent {address} is missing")
            raise PersistenceNotFound(address)
        what = f"base of {address}"
        base = codec.decode_record(raw, codec.BASE_FIELDS, "base_hash", what)
        if base["base_format"] != codec.BASE_FORMAT or base["address"] != address:
            raise InvalidPersistence(f"{what}: wrong format or address")
        covered, anchor, origin = base["covered_position"], base["anchor_event_hash"], base["origin"]
        if not (codec.is_u64(base["process_version"]) and codec.is_hex_hash(base["root_hash"])
                and (covered is None or codec.is_u64(covered)) and (anchor is None or codec.is_hex_hash(anchor))):
            raise InvalidPersistence(f"{what}: malformed fields")
        kind = origin.get("origin") if type(origin) is dict else None
        if kind in ("created", "imported"):
            if list(origin) != ["origin", "process_snapshot"] or covered is not None or anchor is not None:
                raise InvalidPersistence(f"{what}: malformed {kind} origin")
            process = self._restore(origin["process_snapshot"], what)
            if kind == "created" and process.version != 0:
                raise InvalidPersistence(f"{what}: a created base must be at version 0")
        elif kind == "snapshot":
            if list(origin) != ["origin", "snapshot_hash"] or not codec.is_hex_hash(origin["snapshot_hash"]):
                raise InvalidPersistence(f"{what}: malformed snapshot origin")
            snapshot = self._load_snapshot(address, origin["snapshot_hash"])
            if snapshot["covered_position"] != covered or snapshot["head_hash"] != anchor:
                raise InvalidPersistence(f"{what}: snapshot does not cover the base boundary")
            process = self._restore(snapshot["process_snapshot"], what)
        elif kind == "fork":
            expected = ["origin", "parent_address", "parent_position", "parent_head_hash", "parent_process_version",
                        "parent_root_hash"]
            if list(origin) != expected or covered is not None or anchor is not None:
                raise InvalidPersistence(f"{what}: malformed fork origin")
            if depth >= MAX_FORK_DEPTH:
                raise InvalidPersistence(f"{what}: fork chain is deeper than {MAX_FORK_DEPTH}")
            self._check_fork_ref(address, origin)
            parent_address = origin["parent_address"]
            try:
                validate_address(parent_address)
            except SvitError:
                raise InvalidPersistence(f"{what}: malformed parent address") from None
            parent = self._rebuild(parent_address, Head(origin["parent_position"], origin["parent_head_hash"]), depth + 1)
            if parent.version != origin["parent_process_version"] or parent.root.hash != origin["parent_root_hash"]:
                raise InvalidPersistence(f"{what}: parent state at the boundary does not match")
            try:
                process = Process(parent_address, parent.root, parent.version, parent.limits).fork(address)
            except SvitError as exc:
                raise InvalidPersistence(f"{what}: fork does not rebuild: {exc.message}") from None
        else:
            raise InvalidPersistence(f"{what}: unknown origin")
        if process.address != address or process.version != base["process_version"] or process.root_hash != base["root_hash"]:
            raise InvalidPersistence(f"{what}: rebuilt state does not match the base")
        version, root, limits = process.version, process.root, process.limits
        head = Head(covered, base["base_hash"])
        compile_script = _compiler(limits)
        if stop is None or stop.position is not None:
            for position, record in self._transactions(address, covered):
                expected_position = 0 if head.position is None else head.position + 1
                if position != expected_position:
                    raise InvalidPersistence(f"{address}: transaction {position} does not follow position {head.position}")
                if stop is not None and position > stop.position:
                    break
                what = f"transaction {position} of {address}"
                if record["previous_hash"] != head.hash:
                    raise InvalidPersistence(f"{what}: previous hash does not match the chain")
                if record["process_version_before"] != version:
                    raise InvalidPersistence(f"{what}: version does not follow the process version")
                candidate = apply_mutations(root, record["mutations"], what)
                try:
                    validate_root(candidate, address, limits, compile_script, previous=root, error=InvalidPersistence)
                except InvalidPersistence:
                    raise
                except SvitError as exc:
                    raise InvalidPersistence(f"{what}: resulting root is invalid: {exc.message}") from None
                if candidate.hash != record["resulting_root_hash"]:
                    raise InvalidPersistence(f"{what}: resulting root hash does not match")
                root, version = candidate, record["process_version_after"]
                head = Head(position, record["event_hash"])
        if stop is not None and head != stop:
            raise InvalidPersistence(f"{address}: fork boundary {stop.position} is not in the retained history")
        return _State(version, root, limits, head, base["base_hash"])

    def _restore(self, data: Any, what: str) -> Process:
        if type(data) is not bytes:
            raise InvalidPersistence(f"{what}: process snapshot is not bytes")
        try:
            return Process.restore(data, restore_limits=self.restore_limits)
        except SvitError as exc:
            raise InvalidPersistence(f"{what}: process snapshot does not restore: {exc.message}") from None

    def _load_snapshot(self, address: str, snapshot_hash: str) -> dict[str, Any]:
        raw = self._get(CF_RECORD, keys.snapshot_key(address, snapshot_hash))
        what = f"store snapshot {snapshot_hash[:16]} of {address}"
        if raw is None:
            raise InvalidPersistence(f"{what} is missing")
        record = codec.decode_record(raw, codec.SNAPSHOT_FIELDS, "snapshot_hash", what)
        if record["snapshot_format"] != codec.SNAPSHOT_FORMAT or record["address"] != address:
            raise InvalidPersistence(f"{what}: wrong format or address")
        if record["snapshot_hash"] != snapshot_hash:
            raise InvalidPersistence(f"{what}: hash does not match its key")
        return record

    def _check_fork_ref(self, address: str, origin: dict[str, Any]) -> None:
        raw = self._get(CF_RECORD, keys.fork_key(address))
        what = f"fork reference of {address}"
        if raw is None:
            raise InvalidPersistence(f"{what} is missing")
        ref = codec.decode_record(raw, codec.FORK_FIELDS, "fork_hash", what)
        fields = ("parent_address", "parent_position", "parent_head_hash", "parent_process_version", "parent_root_hash")
        if ref["fork_format"] != codec.FORK_FORMAT or ref["child_address"] != address or any(
            ref[name] != origin[name] for name in fields
        ):
            raise InvalidPersistence(f"{what} does not match the fork base")

    # ------------------------------------------------------------------ commit
    def _current_head(self, handle: DurableProcess, version: int) -> dict[str, Any]:
        """The stored head, provided ``handle`` is up to date with it (else PersistenceConflict)."""
        head = self._read_head(handle.address)
        if head is None:
            raise PersistenceNotFound(handle.address)
        if head["position"] != handle._head.position or head["hash"] != handle._head.hash or head["process_version"] != version:
            raise PersistenceConflict()
        return head

    @contextlib.contextmanager
    def _effects_guard(self, handle: DurableProcess) -> Iterator[None]:
        """Held from before an activation's mount writes until it is published: a stale
        handle conflicts before touching a mount, and no other commit can slip in."""
        with self._lock:
            self._check()
            self._current_head(handle, handle.version)
            yield

    def _commit(self, handle: DurableProcess, transition: Transition) -> None:
        """Append one transaction with compare-and-swap on the head; synced before returning.

        The transition's root is its mutations applied to the previous root by the one
        :func:`svit.mutation.apply`, the function resume replays, so the record is not
        replayed here; resume checks every transaction's resulting root hash.
        """
        address = transition.address
        source = transition.source
        if type(source) is not str or not 1 <= len(source.encode("utf-8")) <= MAX_SOURCE_BYTES:
            raise InvalidPersistence("transaction source must be 1-4,096 bytes of text")
        mutations = transition.mutations
        with self._lock:
            self._check()
            head = self._current_head(handle, transition.version_before)
            position = 0 if head["position"] is None else head["position"] + 1
            if position > U64_MAX:
                raise ResourceLimitExceeded("persistence transaction position")
            values = {
                "event_format": codec.TRANSACTION_FORMAT,
                "address": address,
                "position": position,
                "previous_hash": head["hash"],
                "process_version_before": transition.version_before,
                "process_version_after": transition.version_after,
                "mutations": [m.record() for m in mutations],
                "touched_paths": mutation_module.touched_paths(mutations),
                "source": source,
                "resulting_root_hash": transition.root_after.hash,
            }
            encoded, event_hash = codec.hashed_record(codec.TRANSACTION_FIELDS, values, "event_hash")
            if len(encoded) > MAX_TRANSACTION_BYTES:
                raise ResourceLimitExceeded("persistence transaction bytes")
            new_head = Head(position, event_hash)
            batch = self._batch()
            batch.put(CF_RECORD, keys.transaction_key(address, position), encoded)
            pending = self._stage_nodes(batch, transition.root_after, [{"path": m.path} for m in mutations])
            for path in values["touched_paths"]:
                batch.put(CF_INDEX, keys.path_key(address, path, position), b"")
            head_bytes = self._head_record(
                address, head["base_hash"], new_head, transition.version_after, transition.root_after.hash)
            batch.put(CF_RECORD, keys.head_key(address), head_bytes)
            self._write(batch)
            self._head_cache[address] = (head_bytes, {
                "head_format": codec.HEAD_FORMAT, "address": address, "base_hash": head["base_hash"],
                "position": position, "hash": event_hash, "process_version": transition.version_after,
                "root_hash": transition.root_after.hash})
            self._remember_nodes(pending)
            handle._head = new_head
            self._latest[address] = _State(transition.version_after, transition.root_after, handle.limits,
                                           new_head, head["base_hash"])

    # ------------------------------------------------------------------ handle operations
    def _check_head(self, handle: DurableProcess) -> dict[str, Any]:
        head = self._read_head(handle.address)
        if head is None:
            raise PersistenceNotFound(handle.address)
        if head["position"] != handle._head.position or head["hash"] != handle._head.hash:
            raise PersistenceConflict()
        return head

    def _snapshot(self, handle: DurableProcess) -> StoreSnapshot:
        process = handle._process
        with process._lock, self._lock:
            self._check()
            self._check_head(handle)
            record, snapshot_hash = self._snapshot_record(handle.address, handle._head, process)
            batch = self._batch()
            batch.put(CF_RECORD, keys.snapshot_key(handle.address, snapshot_hash), record[0])
            self._write(batch)
            return record[1]

    def _snapshot_record(self, address: str, head: Head, process: Process) -> tuple[tuple[bytes, StoreSnapshot], str]:
        data = _readable_snapshot(process)
        values = {
            "snapshot_format": codec.SNAPSHOT_FORMAT,
            "address": address,
            "covered_position": head.position,
            "head_hash": head.hash,
            "process_version": process.version,
            "root_hash": process.root_hash,
            "process_snapshot": data,
        }
        encoded, snapshot_hash = codec.hashed_record(codec.SNAPSHOT_FIELDS, values, "snapshot_hash")
        snapshot = StoreSnapshot(snapshot_hash, address, head.position, head.hash, process.version, process.root_hash, data)
        return (encoded, snapshot), snapshot_hash

    def _cut(self, handle: DurableProcess) -> StoreSnapshot:
        process = handle._process
        address = handle.address
        with process._lock, self._lock:
            self._check()
            self._check_head(handle)
            children = self._children(address)
            if children:
                raise PersistenceReferenced(f"{address} is referenced by fork {children[0]}")
            head = handle._head
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
            from .events import stage_thread_detach

            stage_thread_detach(self, batch, address)
            self._stage_detach(batch, address)
            batch.put(CF_RECORD, keys.snapshot_key(address, snapshot_hash), record)
            batch.put(CF_RECORD, keys.base_key(address), base_bytes)
            batch.put(CF_RECORD, keys.head_key(address),
                      self._head_record(address, base_hash, new_head, process.version, process.root_hash))
            self._write(batch)
            handle._head = new_head
            self._latest[address] = _State(process.version, process.root, process.limits, new_head, base_hash)
            return snapshot

    def _query(self, handle: DurableProcess, after_position: int | None, through_position: int | None,
               path_prefix: str | None, source: str | None, version_from: int | None, version_through: int | None,
               transaction_hash: str | None, limit: int) -> list[Transaction]:
        if type(limit) is not int or not 1 <= limit <= MAX_QUERY_LIMIT:
            raise ResourceLimitExceeded("persistence query transactions")
        for name, value in (("after_position", after_position), ("through_position", through_position),
                            ("version_from", version_from), ("version_through", version_through)):
            if value is not None and not codec.is_u64(value):
                raise InvalidValue(f"{name} must be an unsigned 64-bit integer")
        prefix_segments = parse(path_prefix) if path_prefix is not None else ()
        address = handle.address
        with self._lock:
            self._check()
            if self._read_head(address) is None:
                raise PersistenceNotFound(address)
            if prefix_segments:
                positions = self._indexed_positions(address, prefix_segments, after_position)
                records: Iterator[tuple[int, dict[str, Any]]] = (
                    (p, self._load_transaction(address, p)) for p in positions
                )
            else:
                records = self._transactions(address, after_position)
            out: list[Transaction] = []
            for position, record in records:
                if through_position is not None and position > through_position:
                    break
                if source is not None and record["source"] != source:
                    continue
                produced = record["process_version_after"]
                if version_from is not None and produced < version_from:
                    continue
                if version_through is not None and produced > version_through:
                    continue
                if transaction_hash is not None and record["event_hash"] != transaction_hash:
                    continue
                if prefix_segments and not any(
                    parse(p)[: len(prefix_segments)] == prefix_segments for p in record["touched_paths"]
                ):
                    raise InvalidPersistence(f"path index of {address} names transaction {position} wrongly; reset_index")
                out.append(Transaction(
                    address, position, record["event_hash"], record["previous_hash"], record["process_version_before"],
                    produced, [codec.plain_mutation(m) for m in record["mutations"]], list(record["touched_paths"]),
                    record["source"], record["resulting_root_hash"]))
                if len(out) >= limit:
                    break
            return out

    def _indexed_positions(self, address: str, segments: tuple[str, ...], after: int | None) -> list[int]:
        base = keys.path_prefix_key(address)
        text = "/" + "/".join(segments)
        positions: set[int] = set()
        for key, _ in self._scan(CF_INDEX, base + keys.escape(text)):
            rest = key[len(base):]
            path = keys.unescape(rest[:-10])
            if rest[-10:-8] != keys.SEP or not (path == text or path.startswith(text + "/")):
                continue
            position = keys.from_u64(rest[-8:])
            if after is None or position > after:
                positions.add(position)
        return sorted(positions)

    def _load_transaction(self, address: str, position: int) -> dict[str, Any]:
        raw = self._get(CF_RECORD, keys.transaction_key(address, position))
        if raw is None:
            raise InvalidPersistence(f"path index of {address} names missing transaction {position}; reset_index")
        return self._decode_transaction(address, position, raw)


class _HandleSink:
    """The commit sink of one durable handle: each transition is appended to the store
    (one synced batch) before the handle's process publishes it."""

    __slots__ = ("_handle", "_store")

    def __init__(self, store: ProcessStore, handle: DurableProcess) -> None:
        self._store = store
        self._handle = handle

    def commit(self, transition: Transition) -> None:
        self._store._commit(self._handle, transition)

    def effects_guard(self) -> ContextManager[None]:
        return self._store._effects_guard(self._handle)


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

    def exec(self, path: str, input: Any = None, *, dry_run: bool = False) -> Activation:
        return self._process.exec(path, input, dry_run=dry_run)

    def exec_inline(self, source: str, input: Any = None, *, dry_run: bool = False) -> Activation:
        return self._process.exec_inline(source, input, dry_run=dry_run)

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
        return self._store._snapshot(self)

    def cut(self) -> StoreSnapshot:
        """Replace retained history with a snapshot base; refused while a fork references it."""
        return self._store._cut(self)

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
        return self._store._query(self, after_position, through_position, path_prefix, source, version_from,
                                  version_through, transaction_hash, limit)

    def __repr__(self) -> str:
        return f"DurableProcess({self.address!r}, version={self.version}, head={self._head})"
