"""The RocksDB storage engine: the only module that touches ``rocksdict``.

Options relied on (pinned in :func:`_options`): WAL on (``disable_wal`` is False on
every write), ``sync=True`` on every write batch, WAL recovery mode ``PointInTime``
(recover to the last consistent record; every acknowledged batch was fsynced before it,
so it survives), ``paranoid_checks``, missing column families created on open. Only
this process may hold the directory open (RocksDB's lock file). Each key space of
:mod:`svit.store.keys` is one column family.

RocksDB's and the operating system's error text name host files, so every raw failure
is classified (:mod:`svit.store.failures`) and only the classified problem is kept.
"""

from __future__ import annotations

import errno
import gc
import os
from collections.abc import Iterator
from typing import Any

import rocksdict

from ..errors import InvalidPersistence, SvitError
from .engine import StorageEngine, WriteBatch
from .failures import storage_error
from .keys import CF_DEFAULT, COLUMN_FAMILIES

__all__ = ["RocksDBEngine"]


def _options() -> rocksdict.Options:
    """The RocksDB options the store's guarantees rest on (see the module docstring)."""
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_wal_recovery_mode(rocksdict.DBRecoveryMode.point_in_time())
    options.set_paranoid_checks(True)
    return options


def _write_options() -> rocksdict.WriteOptions:
    options = rocksdict.WriteOptions()
    options.sync = True
    # rocksdict's stub declares this property as a method
    options.disable_wal = False  # type: ignore[method-assign,assignment]
    return options


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

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> RocksDBEngine:
        """Open (creating if absent) a store directory; refuses unregistered column families."""
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
            raise storage_error(exc, "cannot open store") from None
        try:
            return cls(path, db)
        except Exception as exc:
            db.close()
            raise storage_error(exc, "cannot open store") from None

    def apply(self, batch: WriteBatch) -> None:
        native = rocksdict.WriteBatch(raw_mode=True)
        handles = self._handles
        for space, key, value in batch.operations:
            if value is None:
                native.delete(key, handles[space])
            else:
                native.put(key, value, handles[space])
        self._db.write(native, self._write_options)

    def get(self, space: str, key: bytes) -> bytes | None:
        try:
            value: bytes | None = self._column_families[space].get(key)
        except Exception as exc:
            raise storage_error(exc, "read failed") from None
        return value

    def scan(self, space: str, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
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
        try:
            return int(self._db.latest_sequence_number())
        except Exception as exc:
            raise storage_error(exc, "read failed") from None

    def describe(self) -> dict[str, Any]:
        return {
            "engine": "rocksdb",
            "write": "every acknowledged commit in a synced WriteBatch (WAL on, sync=True; commits arriving together share one)",
            "wal_recovery_mode": "point_in_time",
            # One RocksDB instance: the derived index shares the record's device.
            "shares_device": True,
        }

    def _release(self) -> None:
        # Column-family objects keep the database (and its LOCK file) alive.
        self._column_families.clear()
        self._handles.clear()
        self._db.close()
        gc.collect()
