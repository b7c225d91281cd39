"""The RocksDB storage engine: the only module that touches ``rocksdict``.

Options relied on (pinned in :func:`store_options`): WAL on (``disable_wal`` is False on
every write), every write batch followed by a sync of the log before it is acknowledged,
WAL recovery mode ``PointInTime`` (recover to the last consistent record; every
acknowledged batch was fsynced before it, so it survives), ``paranoid_checks``, missing
column families created on open.

A batch is written to the log unsynced and then the log is synced (RocksDB's
``FlushWAL(sync=true)``, i.e. ``SyncWAL``), rather than written with ``sync=True``: the
same durability (the batch is acknowledged only once the sync that covers it returned),
but rocksdict holds the GIL through a ``sync=True`` write and releases it through the
log sync, so while one group of commits is being synced the other threads of the
process run their activations and queue the next group (see :mod:`svit.store.group`).
Between the two calls the batch is already readable; a thread that does not hold the
store lock waits until the sync is over before it reads (:meth:`RocksDBEngine._settled`),
so only the commit path (whose own batch is queued behind the one being synced, and
fails with it) ever sees a write before it is durable. Only
this process may hold the directory open (RocksDB's lock file). Each key space of
:mod:`svit.store.keys` is one column family.

Opening is durable and bounded: a store directory the open creates (and each missing
parent) is fsynced into its parent before the first write; an existing store's MANIFEST
is checked record by record before RocksDB reads it (:mod:`svit.store.rocksdb_files`),
since one flipped type byte there makes RocksDB spin instead of failing; and RocksDB's
first read of an existing store's files runs in a child process killed at a deadline
(RocksDB holds the GIL while it opens, so nothing in this process could interrupt it).
Either failure is ``InvalidPersistence``, the store's own verification refusing the
files; corruption RocksDB reports itself is ``PersistenceUnavailable`` with reason
``damaged``.

A writer records who it is beside the data (:mod:`svit.store.holder`), so a second
writer refused by the lock is told which process holds the store. A reader
(:class:`RocksDBReader`, ``ProcessStore.open(..., read_only=True)``) takes no lock: it is
a RocksDB *secondary* instance over the same files, with its own scratch directory (a
private temporary directory, removed at close), that catches up with the writer's log
when an operation starts (at most every :data:`FOLLOW_SECONDS`), so it sees the writer's
commits while the writer runs; it never writes a byte of the store.

A writer opened with ``reuse_logs`` has RocksDB reuse obsolete write-ahead logs as new
ones (:data:`REUSED_LOGS` kept; logs capped at :data:`REUSED_LOG_BYTES`, past which the
column families holding data in the oldest log are flushed, so it becomes obsolete at
all). A log sync then overwrites bytes the file already holds, which ext4 syncs without
a metadata journal commit (an append changes the file's size and extents). Recovery is
unchanged: reused logs are written in RocksDB's recyclable record format, whose every
record names its log, and point-in-time recovery (which the RocksDB 9.8 that rocksdict
bundles keeps beside reuse; older releases silently turned reuse off) ends a log at the
first record of an older one; the directory sync made by the first log sync
into a reused file makes its rename durable before anything in it is acknowledged. But
RocksDB's secondary instance cannot follow such a writer: it replays every log file in
the directory, kept obsolete ones included, and loops forever (holding the GIL) on the
first old record after a reused log's live ones. So a reader of a store whose latest
writer, or the one before it, reuses logs (read from the OPTIONS files RocksDB writes at
every open: :func:`writer_reuses_logs`), or that holds a log in the reusable format,
follows it with RocksDB *read-only* instances instead, opened afresh when the store's
files changed: a read-only open recovers like a
writer's (the MANIFEST names the live logs, older ones are skipped, a reused log ends at
its first old record), takes no lock and writes nothing. Each is preceded by the same
bounded first read as a first open, in a child process the reader keeps for them
(:class:`_Prober`), and is kept only when no log went (reused or removed) while it read
(see :class:`RocksDBReader`).

RocksDB's and the operating system's error text name host files, so every raw failure
is classified (:mod:`svit.store.failures`) and only the classified problem is kept.
That includes closing: RocksDB flushes on close, which a full disk can refuse.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import logging
import os
import re
import selectors
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import rocksdict

from ..errors import InvalidPersistence, PersistenceNotFound, PersistenceUnavailable, SvitError
from . import holder as holders
from . import rocksdb_files
from .engine import ExpectationFailed, StorageEngine, WriteBatch
from .failures import storage_error
from .fsshim import FileSystem
from .group import GroupCommit
from .keys import CF_DEFAULT, COLUMN_FAMILIES

__all__ = [
    "RocksDBEngine", "RocksDBReader", "FOLLOW_SECONDS", "MAX_MANIFEST_BYTES", "OPEN_DEADLINE_SECONDS",
    "REUSED_LOG_BYTES", "REUSED_LOGS", "store_options", "writer_reuses_logs",
]

_log = logging.getLogger("svit.store")


#: A MANIFEST grows to at most about this size before RocksDB starts a new one, so the
#: check of it made at every open (:mod:`svit.store.rocksdb_files`) reads a bounded file.
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
#: With ``reuse_logs``: once the write-ahead logs hold this many bytes, RocksDB starts a
#: new log and flushes every column family holding data in the old one, which becomes
#: obsolete and is kept to be reused. (Without a cap, an old log stays live until every
#: column family's memory table filled, and no log is ever reused.) Also bounds the log a
#: crash recovery replays, and the memory tables.
REUSED_LOG_BYTES = 4 * 1024 * 1024
#: With ``reuse_logs``: how many obsolete write-ahead logs RocksDB keeps to reuse as new
#: logs (the steady state alternates between two).
REUSED_LOGS = 4
#: With ``reuse_logs``: each column family's memory table may grow this large, far above
#: what :data:`REUSED_LOG_BYTES` of log fills, so the log cap (not a full memory table)
#: rolls the log over and the logs are all about the same size: a reused one is then
#: overwritten rather than extended. (RocksDB's default, pinned.)
_REUSED_MEMTABLE_BYTES = 64 * 1024 * 1024
#: How long reading an existing store's files may take before the open gives up (seconds).
OPEN_DEADLINE_SECONDS = 60.0
#: A reader catches up with the writer's log when an operation starts, at most this
#: often (seconds): a catch-up costs about a millisecond even when nothing is new.
FOLLOW_SECONDS = 0.05

# Run in an isolated child process (``-I``) with the directory rocksdict was imported
# from as its argument, for a first open (one path) and for the reopens of a reader (see
# :class:`_Prober`): for each store directory read from its input (one JSON string per
# line), list the column families, open every one read-only (RocksDB reads the MANIFEST
# and replays the logs as the real open will), and print what happened as one JSON line.
_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import rocksdict
for line in sys.stdin:
    try:
        path = json.loads(line)
        options = rocksdict.Options(raw_mode=True)
        names = rocksdict.Rdict.list_cf(path, options)
        db = rocksdict.Rdict(path, options, column_families={n: rocksdict.Options(raw_mode=True) for n in names if n != "default"},
                             access_type=rocksdict.AccessType.read_only())
        db.close()
    except Exception as exc:
        print(json.dumps({"error": str(exc), "kind": type(exc).__name__}), flush=True)
    else:
        print(json.dumps({"column_families": names}), flush=True)
"""


_ROCKSDICT_HOME = os.path.dirname(os.path.dirname(os.path.abspath(rocksdict.__file__)))


def store_options(reuse_logs: bool = False) -> rocksdict.Options:
    """The RocksDB options of a store's database and of each of its column families: those
    its guarantees rest on, and with ``reuse_logs`` those that make it reuse obsolete
    write-ahead logs (see the module docstring)."""
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_wal_recovery_mode(rocksdict.DBRecoveryMode.point_in_time())
    options.set_paranoid_checks(True)
    options.set_max_manifest_file_size(MAX_MANIFEST_BYTES)
    if reuse_logs:
        options.set_max_total_wal_size(REUSED_LOG_BYTES)
        options.set_write_buffer_size(_REUSED_MEMTABLE_BYTES)
        options.set_recycle_log_file_num(REUSED_LOGS)
    return options


def _write_options() -> rocksdict.WriteOptions:
    """Written to the WAL (never disabled) without a sync of its own: :meth:`RocksDBEngine.apply`
    syncs the log right after, and acknowledges nothing before that sync returned."""
    options = rocksdict.WriteOptions()
    options.sync = False
    # rocksdict's stub declares this property as a method
    options.disable_wal = False  # type: ignore[method-assign,assignment]
    return options


def _checked_column_families(path: str, deadline: float | None) -> list[str]:
    """The column families of the existing store at ``path``, after the checks every open
    makes first: its MANIFEST record by record, then RocksDB's own first read (within
    ``deadline`` seconds); a damaged store or an unregistered family is ``InvalidPersistence``."""
    problem = rocksdb_files.check_manifest(path)
    if problem is not None:
        raise InvalidPersistence(f"store is damaged: {problem}; restore it from a copy or an archive")
    existing = _probe_column_families(path, deadline)
    unknown = sorted(set(existing) - set(COLUMN_FAMILIES))
    if unknown:
        raise InvalidPersistence(f"store has unregistered column families: {unknown}")
    return existing


def _probe_column_families(path: str, deadline: float | None) -> list[str]:
    """The column families of the existing store at ``path``, read within ``deadline`` seconds.

    RocksDB holds the GIL while it opens a database, so a thread cannot time it out, and
    a damaged file can make it spin: the first read runs in a child process that is
    killed at the deadline. Without a deadline (or without an interpreter to start), the
    list is read here.
    """
    if deadline is None or not sys.executable:
        return list(rocksdict.Rdict.list_cf(path, rocksdict.Options(raw_mode=True)))
    try:
        probe = subprocess.run(
            [sys.executable, "-I", "-c", _PROBE, _ROCKSDICT_HOME],
            input=json.dumps(path).encode("utf-8") + b"\n", capture_output=True, timeout=deadline,
        )
    except subprocess.TimeoutExpired:
        raise _late(deadline) from None
    return _probe_answer(probe.stdout, f"exit status {probe.returncode}")


def _late(deadline: float) -> InvalidPersistence:
    return InvalidPersistence(
        f"store did not open within {deadline:g} s: RocksDB did not finish reading its files (a damaged "
        "MANIFEST or log can make it spin); restore it from a copy or an archive")


def _probe_answer(output: bytes, status: str) -> list[str]:
    """The column families a probe printed as its last line, or the failure it reported."""
    try:
        answer = json.loads(output.decode("utf-8").strip().splitlines()[-1])
    except (ValueError, IndexError, UnicodeDecodeError):
        raise PersistenceUnavailable(
            f"cannot open store: the process reading its files failed ({status}); "
            "open_deadline=None reads them in this process instead", reason="unknown"
        ) from None
    if "error" in answer:
        # RocksDB's own text, raised as rocksdict raises it, to be classified (never shown).
        raise Exception(str(answer["error"]))
    return [str(name) for name in answer["column_families"]]


class RocksDBEngine(StorageEngine):
    """One RocksDB directory; each key space is a column family."""

    def __init__(self, path: str, db: rocksdict.Rdict) -> None:
        super().__init__(path)
        self._db = db
        #: This writer's holder record (:mod:`svit.store.holder`), removed before the lock is let go.
        self.holder: holders.Holder | None = None
        self._handles = {name: db.get_column_family_handle(name) for name in COLUMN_FAMILIES}
        self._column_families = {
            name: (db if name == CF_DEFAULT else db.get_column_family(name)) for name in COLUMN_FAMILIES
        }
        self._write_options = _write_options()
        #: Whether RocksDB reuses this writer's obsolete write-ahead logs (``reuse_logs``).
        self.reuse_logs = False
        #: Writes begun and writes whose sync ended (failed or not): a reader waits for
        #: those begun before it (see :meth:`_settled`), on ``_synced``.
        self._begun = 0
        self._ended = 0
        self._waiting = 0
        self._synced = threading.Condition(threading.Lock())
        #: A write failed or its sync did: what RocksDB reads may hold a batch that is not
        #: durable, so every read is refused from then on (the engine goes terminal).
        self._unsynced = False

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, fs: FileSystem | None = None,
        open_deadline: float | None = OPEN_DEADLINE_SECONDS, read_only: bool = False, holder: str | None = None,
        reuse_logs: bool = False,
    ) -> RocksDBEngine:
        """Open (creating if absent) a store directory; refuses unregistered column families.

        A directory it creates is durable before it returns (each new directory's parent
        is fsynced, see :meth:`FileSystem.create_directories`). An existing store's
        MANIFEST is checked before RocksDB reads it (:mod:`svit.store.rocksdb_files`: a
        bad record is ``InvalidPersistence``), and RocksDB's first read of its files must
        end within ``open_deadline`` seconds (None: no bound).

        ``read_only``: a :class:`RocksDBReader` over an existing store (no lock, nothing
        written, not even a directory). Otherwise this writer records itself as the
        holder (``holder`` names what it is; default: the program's name), and a store
        another process holds is refused naming that process.

        ``reuse_logs``: RocksDB reuses obsolete write-ahead logs, so a commit's log sync
        overwrites bytes instead of appending them (cheaper); a reader then follows this
        writer by reopening rather than catching up: see the module docstring.
        """
        if read_only:
            return RocksDBReader.open_reader(path, open_deadline=open_deadline)
        path = os.fspath(path)
        fs = fs if fs is not None else FileSystem()
        try:
            fs.create_directories(path)
            if not os.path.isdir(path):
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory")
            if os.path.exists(os.path.join(path, "CURRENT")):
                _checked_column_families(path, open_deadline)
            column_families = {name: store_options(reuse_logs) for name in COLUMN_FAMILIES if name != CF_DEFAULT}
            db = rocksdict.Rdict(path, store_options(reuse_logs), column_families=column_families)
        except SvitError:
            raise
        except Exception as exc:
            error = storage_error(exc, "cannot open store")
            if error.reason == "in_use":
                error = PersistenceUnavailable(f"cannot open store: {holders.describe_in_use(path)}", reason="in_use")
            raise error from None
        try:
            engine = cls(path, db)
            engine.reuse_logs = reuse_logs
        except Exception as exc:
            _close_quietly(db)
            raise storage_error(exc, "cannot open store") from None
        previous = holders.read_holder(path)
        if previous is not None and previous.pid != os.getpid():
            _log.warning("store opened for writing; the previous writer (%s) did not close it", previous.describe())
        engine.holder = holders.write_holder(path, holder)
        return engine

    def apply(self, batch: WriteBatch) -> None:
        native = rocksdict.WriteBatch(raw_mode=True)
        handles = self._handles
        if batch.expectations:
            # Only this process writes the directory and writes are serialized (the store
            # lock or the group's one leader), so reads here and the write below are atomic.
            staged: dict[tuple[str, bytes], bytes | None] = {}
            for index, part in enumerate(batch.split()):
                for space, key, expected in part.expectations:
                    where = (space, key)
                    found = staged[where] if where in staged else self._column_families[space].get(key)
                    if found != expected:
                        raise ExpectationFailed(index)
                for space, key, value in part.operations:
                    staged[(space, key)] = value
        for space, key, value in batch.operations:
            if value is None:
                native.delete(key, handles[space])
            else:
                native.put(key, value, handles[space])
        self._begun += 1  # written by one leader at a time (see above)
        synced = False
        try:
            self._db.write(native, self._write_options)
            # SyncWAL: returns once the log holding the batch is on disk; the GIL is
            # released meanwhile, so other threads prepare the next group.
            self._db.flush_wal(True)
            synced = True
        finally:
            if not synced:
                # The batch may be in the memory table without its sync: noted before the
                # count, so a reader woken by it is refused instead of shown the batch.
                self._unsynced = True
            self._ended += 1
            if self._waiting:  # a reader counts itself before it compares the counts
                with self._synced:
                    self._synced.notify_all()

    def _settled(self) -> None:
        """Wait until the sync of every write begun so far has ended (not for writes begun
        later: a steady stream of commits cannot starve a reader), unless this thread
        holds the store lock: a commit preparing under it reads its own predecessors
        (queued behind the write being synced, failing with it), and any other holder
        entered the lock only once every queued write was done.

        Once a write or its sync failed, refuse: its batch may be in the memory table,
        readable though not durable (a power loss takes it back), and a read outside the
        store lock (a head read by the server, say) makes no check of its own."""
        begun = self._begun
        if self._ended < begun and not self.lock.owned():
            with self._synced:
                self._waiting += 1
                try:
                    while self._ended < begun:
                        self._synced.wait()
                finally:
                    self._waiting -= 1
        if self._unsynced:
            self.check()  # the write path has recorded the failure by now, or is about to
            raise PersistenceUnavailable("a synced write failed; reopen the store", reason="terminal")

    def get(self, space: str, key: bytes) -> bytes | None:
        self._settled()
        try:
            value: bytes | None = self._column_families[space].get(key)
        except Exception as exc:
            raise storage_error(exc, "read failed") from None
        return value

    def scan(self, space: str, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        self._settled()
        try:
            iterator = self._column_families[space].iter()
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

    def last_key(self, space: str, prefix: bytes) -> bytes | None:
        self._settled()
        try:
            iterator = self._column_families[space].iter()
            # Every key class under a prefix ends in fixed-width fields or text, so no key
            # under ``prefix`` sorts after ``prefix`` plus eight 0xff bytes.
            iterator.seek_for_prev(prefix + b"\xff" * 8)
            key: bytes | None = iterator.key() if iterator.valid() else None
            iterator.status()
        except Exception as exc:
            raise storage_error(exc, "scan failed") from None
        return key if key is not None and key.startswith(prefix) else None

    def sequence(self) -> int:
        self._settled()
        try:
            return int(self._db.latest_sequence_number())
        except Exception as exc:
            raise storage_error(exc, "read failed") from None

    def describe(self) -> dict[str, Any]:
        reuse = "; obsolete WAL files reused, so readers follow it by reopening" if self.reuse_logs else ""
        return {
            "engine": "rocksdb",
            "write": "every acknowledged commit in a WriteBatch whose WAL was synced before it was acknowledged "
                     f"(WAL on, SyncWAL after each write; commits arriving together share one{reuse})",
            "wal_recovery_mode": "point_in_time",
            # One RocksDB instance: the derived index shares the record's device.
            "shares_device": True,
        }

    def _release(self) -> None:
        # The holder record goes first, while this writer still holds the lock: once the
        # lock is let go, the file may already be the next writer's.
        holders.release_holder(self.path, self.holder)
        self.holder = None
        # Column-family objects keep the database (and its LOCK file) alive. rocksdict's
        # close lets go of the database even when its final flush raises.
        self._column_families.clear()
        self._handles.clear()
        try:
            self._db.close()
        finally:
            gc.collect()


def _close_quietly(db: rocksdict.Rdict) -> None:
    """Close a database that failed to become an engine; the failure being reported wins."""
    try:
        db.close()
    except Exception:
        pass
    finally:
        gc.collect()


def _reader_options() -> rocksdict.Options:
    """Options of a secondary instance: it creates nothing, and keeps every table file
    open (RocksDB requires it of a secondary, whose writer may delete files meanwhile)."""
    options = rocksdict.Options(raw_mode=True)
    options.set_max_open_files(-1)
    options.set_paranoid_checks(True)
    return options


class _FollowingLock(GroupCommit[WriteBatch]):
    """The store lock of a reader: entering it from outside (not already holding it)
    first catches up with the writer, so an operation under the lock sees one state of
    the store from its first read to its last. (Entered as the writer's lock is: what
    this call took is given back when anything, a KeyboardInterrupt included, is raised
    before it returns.)"""

    def __init__(self, write_group: Callable[[list[WriteBatch]], list[BaseException | None]],
                 on_enter: Callable[[], None]) -> None:
        super().__init__(write_group)
        self._on_enter = on_enter

    @property
    def held(self) -> bool:
        """Whether the calling thread holds the lock."""
        return self.owned()

    def __enter__(self) -> GroupCommit[WriteBatch]:
        lock = self._lock
        held = self._count()
        try:
            super().__enter__()
            if not held:
                self._on_enter()
        except BaseException:
            if self._count() > held:
                lock.release()
            raise
        return self

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        lock = self._lock
        held = self._count()
        try:
            if not super().acquire(blocking, timeout):
                return False
            if not held:
                self._on_enter()
        except BaseException:
            if self._count() > held:
                lock.release()
            raise
        return True

    def committing(self) -> contextlib.AbstractContextManager[Any]:
        return self


def _open_secondary(path: str, scratch: str) -> rocksdict.Rdict:
    column_families = {name: _reader_options() for name in COLUMN_FAMILIES if name != CF_DEFAULT}
    return rocksdict.Rdict(path, _reader_options(), column_families=column_families,
                           access_type=rocksdict.AccessType.secondary(scratch))


def _open_read_only(path: str) -> rocksdict.Rdict:
    column_families = {name: _reader_options() for name in COLUMN_FAMILIES if name != CF_DEFAULT}
    return rocksdict.Rdict(path, _reader_options(), column_families=column_families,
                           access_type=rocksdict.AccessType.read_only())


class _Prober:
    """A child process that makes each of a reader's read-only reopens first, killed when
    one takes longer than the deadline (as :func:`_probe_column_families` does for a first
    open). One process serves all of a reader's reopens: starting an interpreter and
    importing rocksdict costs more than the open. It exits when its input closes, so with
    the reader's process too."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None

    def column_families(self, path: str, deadline: float) -> list[str]:
        if not sys.executable:
            return _probe_column_families(path, deadline)
        process = self._process
        if process is None or process.poll() is not None:
            process = self._process = subprocess.Popen(
                [sys.executable, "-I", "-c", _PROBE, _ROCKSDICT_HOME],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        # An exchange cut short (a signal, an error) leaves the child's answer on its way,
        # which the next reopen would take for its own: the child goes with it.
        try:
            line = self._exchange(process, path, deadline)
        except BaseException:
            self.close()
            raise
        try:
            return _probe_answer(line, "it exited" if not line else "bad answer")
        except PersistenceUnavailable:
            self.close()  # gone, or it printed something else: its answer would come next
            raise

    @staticmethod
    def _exchange(process: subprocess.Popen[bytes], path: str, deadline: float) -> bytes:
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps(path).encode("utf-8") + b"\n")
            process.stdin.flush()
        except OSError:
            raise PersistenceUnavailable("cannot open store: the process reading its files failed (it exited); "
                                         "open_deadline=None reads them in this process instead", reason="unknown") from None
        # One line, written at once: readable means the answer (or the end) came. A
        # selector, not select(), which refuses a descriptor numbered past 1,023.
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            if not selector.select(deadline):
                raise _late(deadline)
        return process.stdout.readline()

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None and process.stdout is not None
        process.kill()
        process.wait()
        process.stdin.close()
        process.stdout.close()


class _StoreFiles(NamedTuple):
    """The files a writer changes when it commits, flushes, reuses a log or opens (its
    logs, CURRENT, MANIFEST and OPTIONS files), as a reader following a log-reusing writer
    saw them: a commit written over a reused log's old bytes changes no size, only the
    modification time."""

    #: (name, size, modification time in ns) of each file.
    stamps: frozenset[tuple[str, int, int]]
    #: The wall-clock time (ns) read just before the files were.
    seen: int

    @property
    def names(self) -> frozenset[str]:
        return frozenset(name for name, _size, _mtime in self.stamps)

    @property
    def settled(self) -> bool:
        """Whether any later write must show in the stamps: file times come from a coarse
        clock (a few ms a tick), so a write in the same tick as the newest stamp may leave it
        as it was; stamps older than :data:`_SETTLED_SECONDS` when seen cannot be repeated.
        That assumes file times at least as fine as that, from this machine's clock, never
        set back, and a write's bytes in the file within that second of its time (the
        kernel sets it as the write begins); otherwise a commit may stay unseen until the
        writer's next change (docs/durability.md says so)."""
        newest = max((mtime for _name, _size, mtime in self.stamps), default=0)
        return newest < self.seen - int(_SETTLED_SECONDS * 1e9)


#: See :attr:`_StoreFiles.settled`: until the newest of a reusing writer's files is this
#: old, a reader reopens at every follow even when no stamp changed.
_SETTLED_SECONDS = 1.0
#: How many read-only opens a reader makes before giving up when the writer created,
#: reused or removed a log while each of them read the files.
_READ_ONLY_ATTEMPTS = 5


def _store_files(path: str) -> _StoreFiles:
    seen = time.time_ns()
    stamps = set()
    try:
        for name in os.listdir(path):
            if name.endswith(".log") or name == "CURRENT" or name.startswith("MANIFEST-") or _OPTIONS.fullmatch(name):
                try:
                    status = os.stat(os.path.join(path, name))
                except FileNotFoundError:  # removed meanwhile: the names differ from the last look
                    continue
                stamps.add((name, status.st_size, status.st_mtime_ns))
    except OSError as exc:
        raise storage_error(exc, "cannot follow the store's writer") from None
    return _StoreFiles(frozenset(stamps), seen)


def _open_settled_read_only(path: str, deadline: float | None, probed: bool,
                            prober: _Prober) -> tuple[rocksdict.Rdict, _StoreFiles]:
    """A read-only instance over the store at ``path`` and the files as they were when it
    began to read them.

    Each open is first made in a child process (``prober``) bounded by ``deadline`` (unless
    ``probed``: the caller has just done so), like a store's first open. A read-only open reads the
    MANIFEST, then the files it names: if the writer reused a log meanwhile (renamed a kept
    one and wrote over it), a live log's records would be missing, so an open during which
    a log went is discarded and made again; one that failed while the writer replaced
    files (a compaction removes tables the MANIFEST it read still named) is made again too.
    """
    for attempt in range(_READ_ONLY_ATTEMPTS):
        last = attempt + 1 == _READ_ONLY_ATTEMPTS
        listed = _listing(path)
        try:
            if deadline is not None and not (probed and attempt == 0):
                prober.column_families(path, deadline)
            before = _store_files(path)
            db = _open_read_only(path)
        except SvitError:
            raise
        except Exception:
            if last or _listing(path) == listed:
                raise
            continue
        try:
            after = _store_files(path)
        except BaseException:
            _close_quietly(db)  # not left to the failure's traceback, which a caller may keep
            raise
        if not {name for name in before.names if name.endswith(".log")} - after.names:
            return db, before
        _close_quietly(db)
    raise PersistenceUnavailable(
        f"cannot read the store: its writer reused a write-ahead log during each of {_READ_ONLY_ATTEMPTS} "
        "attempts to open it; try again", reason="unavailable")


def _while_files_change(path: str, read: Callable[[], list[str]]) -> list[str]:
    """``read()``, made again (up to :data:`_READ_ONLY_ATTEMPTS` times) when RocksDB failed
    while the writer replaced files: a compaction removes tables a MANIFEST read a moment
    before still names."""
    for attempt in range(_READ_ONLY_ATTEMPTS):
        listed = _listing(path)
        try:
            return read()
        except SvitError:
            raise
        except Exception:
            if attempt + 1 == _READ_ONLY_ATTEMPTS or _listing(path) == listed:
                raise
    raise AssertionError("unreachable")


def _listing(path: str) -> frozenset[str]:
    try:
        return frozenset(os.listdir(path))
    except OSError as exc:
        raise storage_error(exc, "cannot follow the store's writer") from None


def _open_instance(path: str, scratch: str, deadline: float | None, probed: bool,
                   prober: _Prober) -> tuple[rocksdict.Rdict, _StoreFiles | None]:
    """A secondary instance (with its scratch directory ``scratch``), or, when the store's
    writer reuses its logs (or the one before it did: see :func:`_logs_may_be_reused`), a
    read-only instance and the files it was opened on."""
    if _logs_may_be_reused(path):
        return _open_settled_read_only(path, deadline, probed, prober)
    os.mkdir(scratch)
    return _open_secondary(path, scratch), None


class RocksDBReader(RocksDBEngine):
    """A read-only view of a store directory that follows its writer.

    Usually a RocksDB secondary instance: it takes no lock (a writer may hold the store),
    reads the writer's files, and keeps its own small scratch files in a private temporary
    directory removed at close. It catches up with the writer's log when the store lock
    is entered from outside (every store operation enters it), at most every
    :data:`FOLLOW_SECONDS`, or at once through :meth:`follow`. Every write is refused
    (:attr:`read_only`) before anything is staged.

    Catching up is not enough when the writer flushed its memory tables (it does when
    one fills, and when it closes): RocksDB's secondary then goes on answering point
    reads of the keys written just before the flush from the memory table it replayed
    earlier, so a head read and a scan of the transactions could disagree. A flush
    always starts a new write-ahead log file (or, at close, deletes the old one), so
    when the set of log files differs from the one this instance was opened or last
    caught up on, the reader opens a fresh secondary instance instead, which reads the
    flushed files as they are. (That reopen skips the open-time checks: the MANIFEST
    check reads up to 4 MiB in Python, too slow to repeat at every flush of a live
    writer whose files the first open verified.)

    When the store's latest writer (or the one before) reuses its logs, which a secondary
    cannot follow, the instance is a RocksDB read-only one instead: it sees the store as
    it was when opened, so following means opening a fresh one (each bounded in time
    like the first) whenever the writer's files changed (:class:`_StoreFiles`). The
    reader switches between the two kinds whenever a writer of the other kind has opened.
    """

    read_only = True

    def __init__(self, path: str, db: rocksdict.Rdict, scratch: str, logs: frozenset[str], *,
                 files: _StoreFiles | None = None, open_deadline: float | None = OPEN_DEADLINE_SECONDS,
                 prober: _Prober | None = None) -> None:
        super().__init__(path, db)
        self._scratch = scratch
        self._instances = 1
        self._logs = logs
        #: The files a read-only instance was opened on (None: a secondary instance).
        self._files = files
        self._deadline = open_deadline
        self._prober = prober if prober is not None else _Prober()
        #: How many times a fresh instance replaced the previous one (for tests).
        self.reopened = 0
        self._caught_up = time.monotonic()
        self._closing = False
        self.lock = _FollowingLock(self._write_group, self._follow_if_due)

    @property
    def reopens_to_follow(self) -> bool:
        """Whether this reader follows a writer that reuses its logs, with read-only instances."""
        return self._files is not None

    @classmethod
    def open_reader(cls, path: str | os.PathLike[str], *, open_deadline: float | None = OPEN_DEADLINE_SECONDS) -> RocksDBReader:
        """Open an existing store to read (``PersistenceNotFound`` when there is none yet).

        The same checks as a writer's open, all of them reads: the MANIFEST record by
        record, then RocksDB's first read of the files in a child process bounded by
        ``open_deadline``.
        """
        path = os.fspath(path)
        if not os.path.isdir(path) or not os.path.exists(os.path.join(path, "CURRENT")):
            raise PersistenceNotFound("no store has been written there yet")
        scratch: str | None = None
        prober = _Prober()
        try:
            existing = _while_files_change(path, lambda: _checked_column_families(path, open_deadline))
            missing = sorted(set(COLUMN_FAMILIES) - set(existing))
            if missing:
                raise PersistenceUnavailable(
                    f"store lacks the column families {missing}: open it for writing once to add them", reason="unknown")
            scratch = tempfile.mkdtemp(prefix="svit-reader-")
            logs = _log_files(path)
            db, files = _open_instance(path, os.path.join(scratch, "1"), open_deadline, probed=True, prober=prober)
        except BaseException as exc:
            prober.close()
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            if isinstance(exc, SvitError) or not isinstance(exc, Exception):
                raise
            raise storage_error(exc, "cannot open store to read") from None
        try:
            return cls(path, db, scratch, logs, files=files, open_deadline=open_deadline, prober=prober)
        except Exception as exc:
            prober.close()
            _close_quietly(db)
            shutil.rmtree(scratch, ignore_errors=True)
            raise storage_error(exc, "cannot open store to read") from None

    def follow(self) -> None:
        """Catch up with the writer now (waits for an operation in progress)."""
        with self.lock:
            self._catch_up()

    def close(self) -> None:
        self._closing = True  # entering the lock to close does not catch up first
        super().close()

    def _follow_if_due(self) -> None:
        if not self._closing and time.monotonic() - self._caught_up >= FOLLOW_SECONDS:
            self._catch_up()

    def _catch_up(self) -> None:
        """Called holding the lock, with no operation in progress on this thread."""
        if self._closed:
            return
        try:
            if self._files is not None:
                if self._files.settled and _store_files(self.path).stamps == self._files.stamps:
                    self._caught_up = time.monotonic()
                    return
            else:
                before = _log_files(self.path)
                if before == self._logs:
                    self._db.try_catch_up_with_primary()
                    after = _log_files(self.path)
                    if after == before:
                        self._caught_up = time.monotonic()
                        return
            self._reopen()
        except SvitError:
            raise
        except Exception as exc:
            raise storage_error(exc, "cannot follow the store's writer") from None
        self._caught_up = time.monotonic()

    def _reopen(self) -> None:
        """Replace the instance by a fresh one (a secondary one has its own scratch directory)."""
        logs = _log_files(self.path)
        self._instances += 1
        db, files = _open_instance(self.path, os.path.join(self._scratch, str(self._instances)), self._deadline,
                                   probed=False, prober=self._prober)
        self._db = db
        self._handles = {name: db.get_column_family_handle(name) for name in COLUMN_FAMILIES}
        self._column_families = {
            name: (db if name == CF_DEFAULT else db.get_column_family(name)) for name in COLUMN_FAMILIES
        }
        self._logs = logs
        self._files = files
        self.reopened += 1
        # The previous instance is let go of, not closed: a scan another thread is still
        # reading keeps it until it ends (a secondary holds no lock, only open files).
        shutil.rmtree(os.path.join(self._scratch, str(self._instances - 1)), ignore_errors=True)

    # A read outside any store operation enters the lock first, so it catches up too.
    def get(self, space: str, key: bytes) -> bytes | None:
        with self.lock:
            return super().get(space, key)

    def last_key(self, space: str, prefix: bytes) -> bytes | None:
        with self.lock:
            return super().last_key(space, prefix)

    def scan(self, space: str, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        if not isinstance(self.lock, _FollowingLock) or not self.lock.held:
            with self.lock:
                pass  # catch up; the iterator then reads one version of the store
        return super().scan(space, prefix, start)

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        described["write"] = (
            "none: read-only instances, opened afresh when the files of the store's writer (which reuses its logs) "
            "changed" if self._files is not None else "none: a read-only secondary instance that follows the store's writer")
        return described

    def _release(self) -> None:
        try:
            super()._release()
        finally:
            self._prober.close()
            shutil.rmtree(self._scratch, ignore_errors=True)


def _log_files(path: str) -> frozenset[str]:
    """The writer's write-ahead log files (a flush starts a new one), and its OPTIONS
    files (a writer that opens writes a new one: it may reuse its logs, see
    :func:`writer_reuses_logs`)."""
    try:
        return frozenset(name for name in os.listdir(path) if name.endswith(".log") or _OPTIONS.fullmatch(name))
    except OSError as exc:
        raise storage_error(exc, "cannot follow the store's writer") from None


_OPTIONS = re.compile(r"OPTIONS-([0-9]{1,20})")
_RECYCLED = re.compile(r"^\s*recycle_log_file_num\s*=\s*([0-9]+)\s*$", re.MULTILINE)


def writer_reuses_logs(path: str | os.PathLike[str]) -> bool:
    """Whether the store's latest writer (running or not) had RocksDB reuse its obsolete
    write-ahead logs: the ``recycle_log_file_num`` of the newest OPTIONS file, which
    RocksDB writes at every open with the options it runs with."""
    reuses = _options_reuse_logs(os.fspath(path))
    if reuses is None:
        raise PersistenceUnavailable("cannot tell how the store's writer runs: its OPTIONS files were replaced "
                                     "each time they were read; try again", reason="unavailable")
    return bool(reuses) and reuses[max(reuses)]


def _logs_may_be_reused(path: str) -> bool:
    """Whether either of the store's OPTIONS files (RocksDB keeps the two newest) reuses
    logs: an ordinary writer writes its OPTIONS file while it opens, before it deletes the
    logs its predecessor kept to reuse, so until the writer after it opened, a secondary
    instance could still find them. Files replaced at every look count as reusing: a
    read-only instance follows any writer, a secondary one loops on a reused log."""
    reuses = _options_reuse_logs(path)
    return reuses is None or any(reuses.values()) or _reusable_format_logs(path)


#: The record types of RocksDB's reusable log format (each record names its log), which
#: only a writer reusing its logs writes: full, first, middle, last, and the one giving
#: the sizes of user-defined timestamps.
_REUSABLE_RECORD_TYPES = frozenset({5, 6, 7, 8, 11})


def _reusable_format_logs(path: str) -> bool:
    """Whether a log file in the directory begins with a record in the reusable format:
    a log a reusing writer wrote, or reused, and left behind. The OPTIONS files miss it
    when an ordinary writer was killed between writing its OPTIONS file and deleting those
    logs, and another one opened after it: both kept OPTIONS files are then theirs."""
    try:
        for name in os.listdir(path):
            if name.endswith(".log"):
                try:
                    with open(os.path.join(path, name), "rb") as handle:
                        header = handle.read(7)
                except FileNotFoundError:
                    continue
                if len(header) == 7 and header[6] in _REUSABLE_RECORD_TYPES:
                    return True
    except OSError as exc:
        raise storage_error(exc, "cannot read the store's logs") from None
    return False


def _options_reuse_logs(path: str) -> dict[int, bool] | None:
    """By number, whether each OPTIONS file of the store has RocksDB reuse logs (None:
    a writer replaced them each time they were read)."""
    for _attempt in range(3):  # a writer opening meanwhile replaces its older OPTIONS files
        found: dict[int, bool] = {}
        try:
            for name in os.listdir(path):
                if (number := _OPTIONS.fullmatch(name)) is not None:
                    with open(os.path.join(path, name), encoding="utf-8", errors="replace") as handle:
                        text = handle.read(1 << 20)
                    found[int(number.group(1))] = any(int(value) > 0 for value in _RECYCLED.findall(text))
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise storage_error(exc, "cannot read the store's options") from None
        return found
    return None
