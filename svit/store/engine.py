"""The storage engine interface: what the process store needs from the database under it.

An engine holds named **key spaces** (RocksDB calls them column families: ``default``,
``record``, ``nodes``, ``index``, see :mod:`svit.store.keys`) of byte keys and byte
values, ordered by key. It offers point reads, prefix scans in key order (and the last
key under a prefix), and **one write primitive**: a :class:`WriteBatch` applied
atomically and durably (synced) before :meth:`StorageEngine.write` returns. Everything
else (records, history, indexes, the thread log, the archive) is built on that, so a
second engine (a PostgreSQL table per key space, a batch as one transaction) plugs in
by implementing the abstract methods below.

The fail-stop rule lives here, once for every engine: a write that raises makes the
engine **terminal**; every later operation raises ``PersistenceUnavailable`` (reason
``terminal``) until the store is reopened, and the failed write is never retried or
reported as successful. A closed engine refuses everything (reason ``closed``).

Batches check every key against the declared key classes when it is staged (a key of
no class, or of a class the operation may not touch, raises before anything is
written), so an engine never sees a key the layout does not declare.

A batch may also carry **expectations** (:meth:`WriteBatch.expect`): keys that must hold
exactly a given value (or be absent) when the batch is written. The engine checks them
atomically with the write, in the order batches were queued (a batch sees the writes of
the batches before it in its group); a batch whose expectation fails is left out of the
write and raises ``PersistenceConflict`` alone: the other batches of its group are
written, and the engine stays healthy. A **shared** engine (:attr:`StorageEngine.shared`)
may be written by other OS processes at the same time, so the store checks its heads
through expectations instead of trusting what it last wrote.
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import InvalidPersistence, PersistenceConflict, PersistenceUnavailable, SvitError
from . import failures, keys
from .group import GroupCommit
from .keys import IRREPLACEABLE, REBUILDABLE

__all__ = ["ALL_CLASSES", "READ_ONLY_REFUSAL", "DATABASE_SCHEMES", "read_only_refusal", "database_location", "is_database_url", "WriteBatch", "BatchPart", "ExpectationFailed", "NotWritten", "StorageFailure", "StorageEngine"]

#: Both durability classes: what an ordinary operation's batch may touch.
ALL_CLASSES = (IRREPLACEABLE, REBUILDABLE)


_log = logging.getLogger("svit.store")
_BY_PREFIX = keys.BY_PREFIX

#: What a store opened with ``read_only=True`` answers every writing operation.
READ_ONLY_REFUSAL = ("this store was opened read-only (it follows another process's commits and writes nothing); "
                     "open it without read_only to change it")


def read_only_refusal() -> PersistenceUnavailable:
    """The error a read-only store raises, before anything is written, for any write."""
    return PersistenceUnavailable(READ_ONLY_REFUSAL, reason="read_only")


#: URL schemes :meth:`svit.store.ProcessStore.open` opens as a PostgreSQL database.
DATABASE_SCHEMES = ("postgresql://", "postgres://")


def is_database_url(location: str | os.PathLike[str]) -> bool:
    """True when ``location`` names a PostgreSQL database rather than a directory."""
    return isinstance(location, str) and location.startswith(DATABASE_SCHEMES)


def database_location(url: str) -> str:
    """``url`` without its password (what errors and statements may show); the rest,
    query options included, still opens the same database where no password is needed.

    The user and password are cut off as libpq reads them: everything before the first
    ``@`` that comes before any ``/``, so a password holding ``?`` or ``#`` (which a
    generic URL parser takes for the start of the query or fragment) is never shown."""
    try:
        scheme, sep, rest = url.partition("://")
        credentials = ""
        for index, char in enumerate(rest):
            if char == "/":
                break
            if char == "@":
                credentials, rest = rest[:index], rest[index + 1:]
                break
        parts = urllib.parse.urlsplit(f"{scheme}{sep}{rest}")
        if "@" in parts.netloc:
            raise ValueError("a second user designator")
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        port = f":{parts.port}" if parts.port is not None else ""
        username = credentials.split(":", 1)[0]
        user = f"{urllib.parse.quote(urllib.parse.unquote(username), safe='')}@" if username else ""
        query = urllib.parse.urlencode(
            [(name, value) for name, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
             if name.lower() not in ("password", "sslpassword")], quote_via=urllib.parse.quote)
        return f"{parts.scheme}://{user}{host}{port}{parts.path}{'?' + query if query else ''}"
    except ValueError:
        return "postgresql://(unparsable URL)"


class WriteBatch:
    """Puts and deletes for one atomic synced write, each checked against the key classes.

    ``allowed`` names the durability classes this batch may touch (a reset of derived
    state passes ``(REBUILDABLE,)`` so it cannot change a byte of the history).
    """

    __slots__ = ("allowed", "operations", "expectations", "parts", "size")

    def __init__(self, allowed: tuple[str, ...] = ALL_CLASSES) -> None:
        self.allowed = allowed
        #: ``(key space, key, value or None for a delete)`` in staging order.
        self.operations: list[tuple[str, bytes, bytes | None]] = []
        #: ``(key space, key, expected value or None for absent)``: checked when written.
        self.expectations: list[tuple[str, bytes, bytes | None]] = []
        #: The batches a group write merged into this one, in queue order (one part for
        #: a batch written alone); an engine checks each part's expectations before
        #: applying its operations, and raises :class:`ExpectationFailed` naming the part.
        self.parts: list[BatchPart] = []
        #: Bytes of keys and values put so far.
        self.size = 0

    def _check(self, space: str, key: bytes) -> None:
        kc = keys.classify(space, key)
        if kc.durability not in self.allowed:
            raise InvalidPersistence(f"this operation may not write {kc.durability} key class {kc.name!r}")

    def put(self, space: str, key: bytes, value: bytes) -> None:
        kc = _BY_PREFIX.get((space, key[:2]))  # classify's own first look-up, inline: puts are many
        if kc is None or kc.durability not in self.allowed:
            self._check(space, key)
        self.operations.append((space, key, value))
        self.size += len(key) + len(value)

    def delete(self, space: str, key: bytes) -> None:
        self._check(space, key)
        self.operations.append((space, key, None))

    def expect(self, space: str, key: bytes, value: bytes | None) -> None:
        """Apply this batch only if ``key`` in ``space`` holds exactly ``value`` (None:
        absent) when it is written; otherwise the batch raises ``PersistenceConflict``."""
        keys.classify(space, key)
        self.expectations.append((space, key, value))

    def __len__(self) -> int:
        return len(self.operations)

    def split(self) -> list[BatchPart]:
        """The parts an engine checks and applies in order (the whole batch if not merged)."""
        if self.parts:
            return self.parts
        return [BatchPart(self.expectations, self.operations)]


class BatchPart:
    """One queued batch inside a group write: its expectations, then its operations."""

    __slots__ = ("expectations", "operations")

    def __init__(self, expectations: list[tuple[str, bytes, bytes | None]],
                 operations: list[tuple[str, bytes, bytes | None]]) -> None:
        self.expectations = expectations
        self.operations = operations


class ExpectationFailed(Exception):
    """Raised by an engine's :meth:`StorageEngine.apply` when part ``index`` of the batch
    found a key not holding what it expected; nothing of the batch was applied."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class StorageFailure(Exception):
    """A failed write an engine has already classified: ``reason`` and a host-free
    ``description`` (:mod:`svit.store.failures` classifies every other exception)."""

    def __init__(self, reason: str, description: str) -> None:
        super().__init__(description)
        self.reason = reason
        self.description = description


class NotWritten(Exception):
    """Raised by an engine's :meth:`StorageEngine.apply` when the write certainly did not
    happen and the engine is still sound (a lost reply resolved by reading back): the
    batches fail with ``PersistenceUnavailable`` but the engine does not go terminal."""

    def __init__(self, description: str, reason: str = "interrupted") -> None:
        super().__init__(description)
        self.description = description
        self.reason = reason


class StorageEngine(ABC):
    """Ordered key spaces with one atomic synced write, fail-stop on a failed write.

    ``lock`` is the store lock: every durable operation holds it from its first read to
    its write, so a compare-and-swap on a head and a consistent cut are plain reads
    under it. A commit holds it only to prepare and queue its batch, then shares a
    synced write with the commits queued beside it (group commit, see
    :mod:`svit.store.group`); entering the lock otherwise waits until every queued batch
    is written. ``writer`` is the one synced write path (it is :meth:`apply` unless fault
    injection replaced it, see :mod:`svit.store.faults`): one call per synced write; and
    ``releaser`` the one way the database is let go of (:meth:`_release`, likewise).
    """

    #: Where the engine keeps its data (a directory; a server engine names its database).
    path: str
    #: True when other OS processes may write the same database at the same time: the
    #: store then checks every head through an expectation instead of its own record.
    shared: bool = False
    #: True for an engine opened only to read (``ProcessStore.open(..., read_only=True)``):
    #: :meth:`batch` and :meth:`write` refuse before anything is staged or written, and
    #: the refusal leaves the engine healthy (it is not a failed write).
    read_only: bool = False

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock: GroupCommit[WriteBatch] = GroupCommit(self._write_group)
        self.writer: Callable[[WriteBatch], None] = self.apply
        #: How :meth:`close` lets go of the database (:meth:`_release` unless fault
        #: injection replaced it, see :mod:`svit.store.faults`).
        self.releaser: Callable[[], None] = self._release
        self._failure: str | None = None
        self._closed = False
        #: Tree-chunk digests known to be stored, kept by :class:`svit.store.nodes.StoredNodes`
        #: (those known with their whole subtree, and the rest): one memory per engine, so
        #: every store object over it forgets at once.
        self.chunk_memory: tuple[set[bytes], set[bytes]] = (set(), set())

    # ------------------------------------------------------------------ state
    @property
    def terminal(self) -> bool:
        """True after a synced write failed (reopen to recover)."""
        return self._failure is not None

    @property
    def closed(self) -> bool:
        return self._closed

    def check(self) -> None:
        """Raise ``PersistenceUnavailable`` when the engine is closed or terminal."""
        if self._closed:
            raise PersistenceUnavailable("store is closed", reason="closed")
        if self._failure is not None:
            raise PersistenceUnavailable(f"a synced write failed ({self._failure}); reopen the store", reason="terminal")

    # ------------------------------------------------------------------ writing
    def batch(self, allowed: tuple[str, ...] = ALL_CLASSES) -> WriteBatch:
        """An empty batch that may touch ``allowed`` durability classes (refused on a
        read-only engine: every writing operation starts by making one)."""
        if self.read_only:
            raise read_only_refusal()
        return WriteBatch(allowed)

    def write(self, batch: WriteBatch) -> None:
        """The only durable write: atomic and synced; any failure makes the engine terminal.

        A failed expectation raises ``PersistenceConflict`` (nothing written, engine healthy).
        """
        if self.read_only:
            raise read_only_refusal()
        with self.lock:
            conflict = self._write_group([batch])[0]
        if conflict is not None:
            raise conflict

    def _write_group(self, batches: list[WriteBatch]) -> list[BaseException | None]:
        """``batches`` as ONE atomic synced write (one at a time: the store lock or the
        group commit's single leader serializes it); any failure makes the engine terminal.

        Returns one entry per batch: None when it was written, a ``PersistenceConflict``
        when one of its expectations failed (that batch alone is left out: the write is
        made again without it, so each writer call stays one atomic write).
        """
        self.check()
        if self.read_only:
            return [read_only_refusal() for _ in batches]
        results: list[BaseException | None] = [None] * len(batches)
        remaining = list(range(len(batches)))
        while remaining:
            batch = batches[remaining[0]] if len(remaining) == 1 else self._merge([batches[i] for i in remaining])
            try:
                self.writer(batch)
            except ExpectationFailed as failed:
                results[remaining.pop(failed.index)] = PersistenceConflict()
                continue
            except NotWritten as lost:
                raise PersistenceUnavailable(
                    f"synced write not made ({lost.description}); nothing of it was written", reason=lost.reason
                ) from None
            except BaseException as exc:
                if isinstance(exc, StorageFailure):
                    reason, description = exc.reason, exc.description
                else:
                    reason, description = failures.classify(exc)
                self._failure = description
                _log.error("a synced write failed (%s); the store refuses every operation until it is reopened",
                           description)
                raise PersistenceUnavailable(
                    f"synced write failed ({description}); the store is terminal until reopened", reason=reason
                ) from None
            break
        return results

    @staticmethod
    def _merge(batches: list[WriteBatch]) -> WriteBatch:
        """One batch carrying ``batches`` in order, each as a part (itself when alone)."""
        if len(batches) == 1:
            return batches[0]
        merged = WriteBatch()
        for part in batches:  # every key was checked against its batch's classes when staged
            merged.operations.extend(part.operations)
            merged.expectations.extend(part.expectations)
            merged.parts.append(BatchPart(part.expectations, part.operations))
            merged.size += part.size
        return merged

    def close(self) -> None:
        """Release the database; the engine refuses every later operation.

        The engine counts as closed (and its lock as released) even when releasing fails:
        a failure there (RocksDB flushes its memory tables on close, which a full disk
        refuses) loses nothing acknowledged, since every acknowledged batch is already in
        the synced log and is replayed at the next open. It is still reported, as a
        ``PersistenceUnavailable`` naming the problem, unless the engine is terminal: the
        write that made it so already reported the failure.
        """
        with self.lock:
            if self._closed:
                return
            self._closed = True
            try:
                self.releaser()
            except SvitError:
                raise
            except Exception as exc:
                if self._failure is not None:
                    return
                reason, description = failures.classify(exc)
                raise PersistenceUnavailable(
                    f"store closed, but its final flush failed ({description}); every acknowledged commit "
                    "is in the synced log and is replayed when the store is next opened", reason=reason
                ) from None

    # ------------------------------------------------------------------ what an engine provides
    @abstractmethod
    def apply(self, batch: WriteBatch) -> None:
        """Apply every operation of ``batch`` atomically; return only once it is durable.

        Each part's expectations (:meth:`WriteBatch.split`) are checked, in part order and
        seeing the earlier parts' operations, atomically with the write; the first part
        whose expectation fails raises :class:`ExpectationFailed` with nothing applied.
        """

    @abstractmethod
    def get(self, space: str, key: bytes) -> bytes | None:
        """The value under ``key`` in ``space``, or None; a read error raises, never None."""

    @abstractmethod
    def scan(self, space: str, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` under ``prefix`` in key order, from ``start`` (a key under the
        prefix) when given; a read error raises, it never ends the scan early."""

    @abstractmethod
    def last_key(self, space: str, prefix: bytes) -> bytes | None:
        """The greatest key under ``prefix``, or None."""

    @abstractmethod
    def sequence(self) -> int:
        """A number that grows with every applied write (stamps a point-in-time cut)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """How writes are made durable and what shares a device (the store's statement)."""

    @abstractmethod
    def _release(self) -> None:
        """Close the underlying database (called once, under the lock). It must let go of
        the database (its lock) even when it then raises."""
