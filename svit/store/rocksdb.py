"""The RocksDB storage engine: the only module that touches ``rocksdict``.

Options relied on (pinned in :func:`_options`): WAL on (``disable_wal`` is False on
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

RocksDB's and the operating system's error text name host files, so every raw failure
is classified (:mod:`svit.store.failures`) and only the classified problem is kept.
That includes closing: RocksDB flushes on close, which a full disk can refuse.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import rocksdict

from ..errors import InvalidPersistence, PersistenceUnavailable, SvitError
from . import rocksdb_files
from .engine import ExpectationFailed, StorageEngine, WriteBatch
from .failures import storage_error
from .fsshim import FileSystem
from .keys import CF_DEFAULT, COLUMN_FAMILIES

__all__ = ["RocksDBEngine", "MAX_MANIFEST_BYTES", "OPEN_DEADLINE_SECONDS"]


#: A MANIFEST grows to at most about this size before RocksDB starts a new one, so the
#: check of it made at every open (:mod:`svit.store.rocksdb_files`) reads a bounded file.
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
#: How long reading an existing store's files may take before the open gives up (seconds).
OPEN_DEADLINE_SECONDS = 60.0

# Run in an isolated child process (``-I``) with the store directory and the directory
# rocksdict was imported from as its arguments: list the column families, open every one
# read-only (RocksDB reads the MANIFEST and replays the logs as the real open will), and
# print what happened as one JSON line.
_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[2])
import rocksdict
path = sys.argv[1]
try:
    options = rocksdict.Options(raw_mode=True)
    names = rocksdict.Rdict.list_cf(path, options)
    db = rocksdict.Rdict(path, options, column_families={n: rocksdict.Options(raw_mode=True) for n in names if n != "default"},
                         access_type=rocksdict.AccessType.read_only())
    db.close()
except Exception as exc:
    print(json.dumps({"error": str(exc), "kind": type(exc).__name__}))
else:
    print(json.dumps({"column_families": names}))
"""


_ROCKSDICT_HOME = os.path.dirname(os.path.dirname(os.path.abspath(rocksdict.__file__)))


def _options() -> rocksdict.Options:
    """The RocksDB options the store's guarantees rest on (see the module docstring)."""
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_wal_recovery_mode(rocksdict.DBRecoveryMode.point_in_time())
    options.set_paranoid_checks(True)
    options.set_max_manifest_file_size(MAX_MANIFEST_BYTES)
    return options


def _write_options() -> rocksdict.WriteOptions:
    """Written to the WAL (never disabled) without a sync of its own: :meth:`RocksDBEngine.apply`
    syncs the log right after, and acknowledges nothing before that sync returned."""
    options = rocksdict.WriteOptions()
    options.sync = False
    # rocksdict's stub declares this property as a method
    options.disable_wal = False  # type: ignore[method-assign,assignment]
    return options


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
            [sys.executable, "-I", "-c", _PROBE, path, _ROCKSDICT_HOME],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=deadline,
        )
    except subprocess.TimeoutExpired:
        raise InvalidPersistence(
            f"store did not open within {deadline:g} s: RocksDB did not finish reading its files (a damaged "
            "MANIFEST or log can make it spin); restore it from a copy or an archive"
        ) from None
    try:
        answer = json.loads(probe.stdout.decode("utf-8").strip().splitlines()[-1])
    except (ValueError, IndexError, UnicodeDecodeError):
        raise PersistenceUnavailable(
            f"cannot open store: the process reading its files failed (exit status {probe.returncode}); "
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
        self._handles = {name: db.get_column_family_handle(name) for name in COLUMN_FAMILIES}
        self._column_families = {
            name: (db if name == CF_DEFAULT else db.get_column_family(name)) for name in COLUMN_FAMILIES
        }
        self._write_options = _write_options()
        #: Writes begun and writes whose sync ended (failed or not): a reader waits for
        #: those begun before it (see :meth:`_settled`), on ``_synced``.
        self._begun = 0
        self._ended = 0
        self._waiting = 0
        self._synced = threading.Condition(threading.Lock())

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, fs: FileSystem | None = None,
        open_deadline: float | None = OPEN_DEADLINE_SECONDS,
    ) -> RocksDBEngine:
        """Open (creating if absent) a store directory; refuses unregistered column families.

        A directory it creates is durable before it returns (each new directory's parent
        is fsynced, see :meth:`FileSystem.create_directories`). An existing store's
        MANIFEST is checked before RocksDB reads it (:mod:`svit.store.rocksdb_files`: a
        bad record is ``InvalidPersistence``), and RocksDB's first read of its files must
        end within ``open_deadline`` seconds (None: no bound).
        """
        path = os.fspath(path)
        fs = fs if fs is not None else FileSystem()
        try:
            fs.create_directories(path)
            if not os.path.isdir(path):
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory")
            if os.path.exists(os.path.join(path, "CURRENT")):
                problem = rocksdb_files.check_manifest(path)
                if problem is not None:
                    raise InvalidPersistence(f"store is damaged: {problem}; restore it from a copy or an archive")
                existing = _probe_column_families(path, open_deadline)
                unknown = sorted(set(existing) - set(COLUMN_FAMILIES))
                if unknown:
                    raise InvalidPersistence(f"store has unregistered column families: {unknown}")
            column_families = {name: _options() for name in COLUMN_FAMILIES if name != CF_DEFAULT}
            db = rocksdict.Rdict(path, _options(), column_families=column_families)
        except SvitError:
            raise
        except Exception as exc:
            raise storage_error(exc, "cannot open store") from None
        try:
            return cls(path, db)
        except Exception as exc:
            _close_quietly(db)
            raise storage_error(exc, "cannot open store") from None

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
        try:
            self._db.write(native, self._write_options)
            # SyncWAL: returns once the log holding the batch is on disk; the GIL is
            # released meanwhile, so other threads prepare the next group.
            self._db.flush_wal(True)
        finally:
            self._ended += 1
            if self._waiting:  # a reader counts itself before it compares the counts
                with self._synced:
                    self._synced.notify_all()

    def _settled(self) -> None:
        """Wait until the sync of every write begun so far has ended (not for writes begun
        later: a steady stream of commits cannot starve a reader), unless this thread
        holds the store lock: a commit preparing under it reads its own predecessors
        (queued behind the write being synced, failing with it), and any other holder
        entered the lock only once every queued write was done."""
        begun = self._begun
        if self._ended < begun and not self.lock.owned():
            with self._synced:
                self._waiting += 1
                try:
                    while self._ended < begun:
                        self._synced.wait()
                finally:
                    self._waiting -= 1

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
        return {
            "engine": "rocksdb",
            "write": "every acknowledged commit in a WriteBatch whose WAL was synced before it was acknowledged "
                     "(WAL on, SyncWAL after each write; commits arriving together share one)",
            "wal_recovery_mode": "point_in_time",
            # One RocksDB instance: the derived index shares the record's device.
            "shares_device": True,
        }

    def _release(self) -> None:
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
