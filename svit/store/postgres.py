"""The PostgreSQL storage engine: the only module that touches ``psycopg``.

Layout: one table per key space of :mod:`svit.store.keys` (``svit_default``,
``svit_record``, ``svit_nodes``, ``svit_index``), each ``key bytea primary key, value
bytea not null``, in the schema the URL's ``search_path`` names (created on open). bytea
compares byte by byte, so ``ORDER BY key`` is the key order RocksDB keeps and a prefix
scan is a key range. One more table, ``svit_writers``, holds one commit marker per open
connection (see below).

Commits are made on one connection the engine keeps from one commit to the next (the
group commit's leader writes one batch at a time, so it needs no pool round trip per
commit); one that fails is given back to the pool, which replaces it, and the next
commit takes another, checked first. A batch of one commit is one statement, prepared
once per connection (see :meth:`_Statements.single`) and handed straight to libpq
(:class:`_Committer`): binary parameters as they are, the reply awaited in ``select``
(bounded, interpreter lock released), and only its status and SQLSTATE read.

A write batch is ONE transaction of plain SQL, sent pipelined in one round trip:
``BEGIN``, each part's expectations, its puts (``INSERT ... ON CONFLICT (key) DO
UPDATE``) and deletes, the connection's commit marker, ``COMMIT``. An expectation of a
value is a guard statement that locks the row holding it (``SELECT ... FOR UPDATE``: a
concurrent writer of that key waits, and the row is checked again once that writer
committed) and divides by the number of such rows, so a value that is not there aborts
the transaction on the server (division by zero) and ``COMMIT`` never runs. An
expectation of absence is a plain ``INSERT`` of the key (removed again unless the batch
writes the key), which waits for, and then collides with, any concurrent transaction
creating it. ``synchronous_commit`` is set ``on`` for every connection, so ``COMMIT``
returns only once the server has flushed the commit record to its write-ahead log.

A commit whose reply is lost (the connection fails while the transaction is in flight)
is resolved by reading back: every transaction also writes a fresh random token into
the connection's row of ``svit_writers``; a new connection locks that row (which waits
until the lost transaction has ended, committed or aborted) and compares the token.
Present: the batch committed and the write succeeds. Absent: nothing was written, so the
batch is sent once more on a fresh connection (a commit connection the server had ended
looks the same); if that fails the same way the write raises ``PersistenceUnavailable``
(reason ``interrupted``, "did not commit") and the engine stays healthy. If the server
cannot be reached to tell within :data:`RESOLVE_SECONDS`, the engine is terminal.
Before reading back, the lost connection's server process is ended (a statement it had
not read yet must never run after the answer); one that cannot be ended in time makes
the engine terminal too. A reply that does not come within :data:`COMMIT_SECONDS` is
taken as lost, so a server process that stops answering never hangs a commit.

``sequence()`` is the server's current write-ahead-log position
(``pg_current_wal_lsn()`` in bytes): it moves forward with every committed write of any
writer, needs no write of its own, and fits in 64 bits.

Errors never carry the URL's password or the server's text (which may name host paths
or data): every failure is described from a fixed vocabulary by its SQLSTATE class.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg_pool
from psycopg import sql

from ..errors import InvalidPersistence, PersistenceNotFound, PersistenceUnavailable, SvitError
from .engine import BatchPart, ExpectationFailed, NotWritten, StorageEngine, StorageFailure, WriteBatch
from .engine import database_location as location
from .keys import COLUMN_FAMILIES

__all__ = [
    "PostgreSQLEngine",
    "TABLE_PREFIX",
    "WRITERS_TABLE",
    "RESOLVE_SECONDS",
    "COMMIT_SECONDS",
    "location",
    "table_name",
]

#: Every table of the store starts with this; a ``svit_`` table the layout does not
#: declare refuses the open, as an unregistered column family does on RocksDB.
TABLE_PREFIX = "svit_"
#: One commit marker per open connection: ``(writer text primary key, token bytea)``.
WRITERS_TABLE = "svit_writers"
#: How long a lost commit reply may take to resolve before the engine gives up (terminal).
RESOLVE_SECONDS = 10.0
#: How long an open waits for its first connection.
CONNECT_SECONDS = 10.0
#: How long a one-statement commit waits for its reply before taking it as lost (then
#: resolved by reading back, within :data:`RESOLVE_SECONDS`). Far above any legitimate
#: wait, such as another store's commit holding the same head row for a moment.
COMMIT_SECONDS = 30.0
#: What a failed expectation raises on the server: a claimed key that exists, or a
#: guard that found no row holding the expected value.
EXPECTATION_ERRORS = (psycopg.errors.UniqueViolation, psycopg.errors.DivisionByZero)
#: Rows fetched per query of a scan (a scan is a sequence of key-range pages).
SCAN_PAGE = 512
#: Up to this many rows of one key space are written (or deleted) by a one-statement
#: commit as a list of parameters (a bounded number of statement shapes); more, as arrays.
LISTED_ROWS = 8
#: psycopg prepares a statement by itself once it ran this many times: never, in effect.
#: Only the one-statement commit is prepared, explicitly (it is planned once per
#: connection instead of at every commit, which cost about as much as running it).
NEVER_PREPARE_AFTER = 2**31 - 1


def table_name(space: str) -> str:
    return f"{TABLE_PREFIX}{space}"


def _upper_bound(prefix: bytes) -> bytes | None:
    """The least key greater than every key starting with ``prefix`` (None: no bound)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def _classify(exc: BaseException) -> tuple[str, str]:
    """``(reason, description)`` of a psycopg failure, from a fixed vocabulary."""
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return "unreachable", "the database server cannot be reached (no connection within the timeout)"
    if isinstance(exc, psycopg.OperationalError) and getattr(exc, "sqlstate", None) is None:
        return "unreachable", "the connection to the database server failed"
    state = getattr(exc, "sqlstate", None) or ""
    if state.startswith("53"):
        return "full", "the database server is out of resources (disk, memory or connections)"
    if state.startswith("28"):
        return "refused", "the database server refused the credentials"
    if state.startswith("42501") or state == "25006":
        return "read_only", "the database refuses writes (permission or read-only transaction)"
    if state.startswith("3D"):
        return "not_found", "the database named in the URL does not exist"
    if state.startswith("57") or state.startswith("08"):
        return "unreachable", f"the database server ended the connection (SQLSTATE {state})"
    if state.startswith("XX"):
        return "damaged", f"the database server reports an internal error (SQLSTATE {state})"
    name = type(exc).__name__
    return "unknown", f"unexpected database failure ({name}{f', SQLSTATE {state}' if state else ''})"


def _unavailable(exc: BaseException, doing: str) -> PersistenceUnavailable:
    reason, description = _classify(exc)
    return PersistenceUnavailable(f"{doing}: {description}", reason=reason)


class _LostReply(Exception):
    """The connection failed while ``COMMIT`` was in flight: the outcome must be read back."""


class PostgreSQLEngine(StorageEngine):
    """One PostgreSQL schema; each key space is a table; a batch is one transaction."""

    shared = True

    def __init__(self, url: str, pool: psycopg_pool.ConnectionPool, engine_id: str, *,
                 read_only: bool = False) -> None:
        super().__init__(location(url))
        self.read_only = read_only
        #: The URL as given (it may hold a password: never shown; :attr:`path` is safe).
        self.url = url
        self._pool = pool
        self._engine_id = engine_id
        self._tables = {space: sql.Identifier(table_name(space)) for space in COLUMN_FAMILIES}
        self.resolve_seconds = RESOLVE_SECONDS
        self.commit_seconds = COMMIT_SECONDS
        #: Lost commit replies resolved by reading back, and how each ended (for drills).
        self.resolved: list[str] = []
        self._statements = _Statements(self._tables)
        #: The connection commits are made on, kept between commits (see :meth:`_committer`),
        #: and the lock that holds one commit at a time on it (the group commit's leader
        #: and the store lock already make them one at a time: this only makes sure).
        self._kept: _Committer | None = None
        self._committing = threading.Lock()
        #: What bounds the waits psycopg makes for commits (None for a read-only engine).
        self._deadlines: _Deadlines | None = None if read_only else _Deadlines()

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, url: str, *, max_connections: int = 8, connect_timeout: float = CONNECT_SECONDS,
             read_only: bool = False) -> PostgreSQLEngine:
        """Connect (a pool of up to ``max_connections``), create the tables if absent, and
        refuse a schema holding ``svit_`` tables the layout does not declare.

        ``read_only``: create nothing (a database without the tables is
        ``PersistenceNotFound``), write no marker rows, and run every connection with
        ``default_transaction_read_only``, so the server itself refuses a write; the
        engine refuses every batch before that (:attr:`StorageEngine.read_only`).
        Other connections' commits are visible as soon as they are made."""
        engine_id = uuid.uuid4().hex

        def configure(conn: psycopg.Connection[Any]) -> None:
            if read_only:
                conn.execute("SET default_transaction_read_only TO on")
                return
            # Every connection commits synchronously and owns one marker row from the start,
            # so a lost reply's transaction holds that row's lock while it is in flight.
            conn.execute("SET synchronous_commit TO on")
            conn.execute(
                sql.SQL("INSERT INTO {} (writer, token) VALUES (%s, %s) ON CONFLICT (writer) DO NOTHING")
                .format(sql.Identifier(WRITERS_TABLE)), [_writer(engine_id, conn), b""])

        try:
            _create_schema(url, connect_timeout, create=not read_only)
            pool = psycopg_pool.ConnectionPool(
                url, min_size=1, max_size=max(2, max_connections), open=False, configure=configure,
                kwargs={"autocommit": True, "connect_timeout": max(1, int(connect_timeout)),
                        "prepare_threshold": NEVER_PREPARE_AFTER},
                timeout=connect_timeout, name="svit-store", reconnect_timeout=connect_timeout,
            )
            pool.open(wait=True, timeout=connect_timeout)
        except SvitError:
            raise
        except Exception as exc:
            raise _unavailable(exc, "cannot open store") from None
        return cls(url, pool, engine_id, read_only=read_only)

    # ------------------------------------------------------------------ writing
    def apply(self, batch: WriteBatch) -> None:
        parts = batch.split()
        with self._committing:
            for attempt in (1, 2):
                again = attempt == 1
                token = secrets.token_bytes(16)
                try:
                    committer = self._committer()
                    try:
                        self._transaction(committer, parts, token)
                    except _LostReply:
                        self._let_go(committer)
                        if self._resolve(committer.writer, token):
                            return
                        if again:
                            continue  # certainly not written: once more, on a fresh connection
                        raise NotWritten("the connection failed while the commit was in flight, and reading back "
                                         "shows it did not commit; nothing was written") from None
                    except BaseException:
                        self._let_go(committer, unless_idle=True)
                        raise
                    return
                except (ExpectationFailed, NotWritten, StorageFailure):
                    raise
                except psycopg.Error as exc:
                    reason, description = _classify(exc)
                    if reason != "unreachable":
                        raise StorageFailure(reason, description) from None
                    if again and not isinstance(exc, psycopg_pool.PoolTimeout):
                        continue  # nothing was committed (COMMIT was not reached): once more
                    raise NotWritten(f"{description}; nothing was committed", "unreachable") from None

    def _committer(self) -> _Committer:
        """The connection commits are made on, kept from one commit to the next (taken
        from the pool when there is none: at the first commit, or after one failed).

        A connection taken is checked first (one empty query, once per connection kept):
        the one that just failed may not have been the only one the server ended, and a
        commit's second attempt must not fail again on a connection known to be dead."""
        committer = self._kept
        if committer is not None:
            return committer
        for _attempt in range(self._pool.max_size):
            conn = self._pool.getconn()
            try:
                with self._bounded(conn):
                    self._pool.check_connection(conn)
            except psycopg.OperationalError:
                self._pool.putconn(conn)  # the pool drops it and opens another
                continue
            committer = self._kept = _Committer(conn, _writer(self._engine_id, conn))
            return committer
        conn = self._pool.getconn()
        committer = self._kept = _Committer(conn, _writer(self._engine_id, conn))
        return committer

    def _bounded(self, conn: psycopg.Connection[Any]) -> contextlib.AbstractContextManager[None]:
        """A block whose waits on ``conn`` end within :attr:`commit_seconds` (see :class:`_Deadlines`)."""
        if self._deadlines is None:
            return contextlib.nullcontext()
        return self._deadlines.bound(conn, self.commit_seconds)

    def _let_go(self, committer: _Committer, *, unless_idle: bool = False) -> None:
        """Give the commit connection back to the pool (which replaces it if broken) and
        take a fresh one at the next commit; with ``unless_idle``, only when it is not
        idle and healthy (an expectation failure leaves it so, ready for the next)."""
        conn = committer.conn
        if unless_idle and not conn.broken and not conn.closed \
                and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            return
        if self._kept is committer:
            self._kept = None
        try:
            self._pool.putconn(conn)
        except Exception:
            pass  # the pool is closing, or the connection is beyond saving: it is dropped

    def _transaction(self, committer: _Committer, parts: list[BatchPart], token: bytes) -> None:
        """Write ``parts`` as one transaction on the commit connection, pipelined: one
        round trip.

        A failed expectation aborts the transaction on the server (``COMMIT`` is then not
        run); with one part it is that part's, with several the parts are run again one
        statement at a time to find which (:meth:`_one_by_one`)."""
        conn, writer = committer.conn, committer.writer
        statements = self._statements
        single = statements.single(parts[0]) if len(parts) == 1 else None
        if single is not None:
            committer.run(*single, token, self.commit_seconds)
            return
        with self._bounded(conn):
            self._pipelined(conn, parts, writer, token)

    def _pipelined(self, conn: psycopg.Connection[Any], parts: list[BatchPart], writer: str, token: bytes) -> None:
        """:meth:`_transaction` of several parts (psycopg's pipeline, awaited by psycopg:
        the caller bounds the wait)."""
        statements = self._statements
        try:
            with conn.pipeline() as pipeline:
                conn.execute("BEGIN")
                for part in parts:
                    for query, part_params in statements.part(part):
                        conn.execute(query, part_params)
                conn.execute(statements.marker, [writer, token])
                conn.execute("COMMIT")
                pipeline.sync()
        except EXPECTATION_ERRORS:
            self._rollback(conn)
            if len(parts) == 1:
                raise ExpectationFailed(0) from None
            self._one_by_one(conn, parts, writer, token)
        except psycopg.OperationalError as exc:
            if _connection_lost(conn, exc):
                raise _LostReply() from None
            raise

    def _one_by_one(self, conn: psycopg.Connection[Any], parts: list[BatchPart], writer: str, token: bytes) -> None:
        """The same transaction, one statement at a time: the first part whose expectation
        fails raises :class:`ExpectationFailed` with its index (nothing committed); if none
        fails now, the transaction commits (it is exactly the batch)."""
        statements = self._statements
        try:
            conn.execute("BEGIN")
            for index, part in enumerate(parts):
                for query, params in statements.part(part):
                    try:
                        conn.execute(query, params)
                    except EXPECTATION_ERRORS:
                        self._rollback(conn)
                        raise ExpectationFailed(index) from None
            conn.execute(statements.marker, [writer, token])
        except BaseException:
            self._rollback(conn)
            raise
        try:
            conn.execute("COMMIT")
        except psycopg.OperationalError as exc:
            if _connection_lost(conn, exc):
                raise _LostReply() from None
            raise

    @staticmethod
    def _rollback(conn: psycopg.Connection[Any]) -> None:
        try:
            conn.execute("ROLLBACK")
        except psycopg.Error:
            pass

    def _resolve(self, writer: str, token: bytes) -> bool:
        """Read back whether the transaction that wrote ``token`` committed (see the module
        docstring). A server that cannot be reached within :attr:`resolve_seconds`
        raises (terminal)."""
        deadline = time.monotonic() + self.resolve_seconds
        query = sql.SQL("SELECT token FROM {} WHERE writer = %s FOR UPDATE").format(sql.Identifier(WRITERS_TABLE))
        while True:
            try:
                left = max(1, int(deadline - time.monotonic()))
                with psycopg.connect(self.url, connect_timeout=left, autocommit=True) as conn:
                    conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(f"{left}s")))
                    # End the lost connection's server process first, so a statement it
                    # has not read yet can never run after the answer read here.
                    ended = conn.execute(
                        "SELECT pg_terminate_backend(pid, %s) FROM pg_stat_activity WHERE pid = %s",
                        [left * 1000, int(writer.rsplit(":", 1)[1])]).fetchall()
                    if ended and not ended[0][0]:
                        raise StorageFailure(
                            "unreachable", "the reply to a commit was lost and the server process that "
                            "received it could not be ended to tell whether it committed")
                    with conn.transaction(force_rollback=True):  # it only reads
                        row = conn.execute(query, [writer]).fetchone()
                break
            except psycopg.Error:
                if time.monotonic() >= deadline:
                    raise StorageFailure(
                        "unreachable", "the reply to a commit was lost and the database server could not be "
                        "reached to tell whether it committed") from None
                time.sleep(0.1)
        committed = row is not None and bytes(row[0]) == token
        self.resolved.append("committed" if committed else "not committed")
        return committed

    # ------------------------------------------------------------------ reading
    def _query(self, query: sql.Composed | str, params: list[Any], doing: str) -> list[tuple[Any, ...]]:
        """The rows of one read; a pooled connection the server had ended is replaced once
        (a read changes nothing, so it is safe to run again)."""
        for attempt in (1, 2):
            try:
                with self._pool.connection() as conn:
                    return conn.execute(query, params).fetchall()
            except Exception as exc:
                if attempt == 1 and isinstance(exc, psycopg.OperationalError) \
                        and not isinstance(exc, psycopg_pool.PoolTimeout) and _classify(exc)[0] == "unreachable":
                    continue
                raise _unavailable(exc, doing) from None
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def get(self, space: str, key: bytes) -> bytes | None:
        rows = self._query(self._statements.get[space], [key], "read failed")
        return bytes(rows[0][0]) if rows else None

    def scan(self, space: str, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        upper = _upper_bound(prefix)
        low = start if start is not None and start > prefix else prefix
        inclusive = True
        while True:
            params = [low, upper, SCAN_PAGE] if upper is not None else [low, SCAN_PAGE]
            rows = self._query(self._statements.scan(space, inclusive, upper is not None), params, "scan failed")
            for key, value in rows:
                yield bytes(key), bytes(value)
            if len(rows) < SCAN_PAGE:
                return
            low, inclusive = bytes(rows[-1][0]), False

    def last_key(self, space: str, prefix: bytes) -> bytes | None:
        upper = _upper_bound(prefix)
        rows = self._query(self._statements.last(space, upper is not None),
                           [prefix, upper] if upper is not None else [prefix], "scan failed")
        return bytes(rows[0][0]) if rows else None

    def sequence(self) -> int:
        rows = self._query("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint", [], "read failed")
        return int(rows[0][0]) if rows else 0

    def describe(self) -> dict[str, Any]:
        return {
            "engine": "postgresql",
            "write": "every acknowledged commit in one PostgreSQL transaction with synchronous_commit=on "
                     "(COMMIT returns after the server flushed its write-ahead log; commits arriving together "
                     "share one)",
            "wal_recovery_mode": "PostgreSQL crash recovery (write-ahead log replay)",
            # One database: the derived index shares the record's server and disk.
            "shares_device": True,
            "location": self.path,
        }

    def _release(self) -> None:
        with self._committing:
            if self._kept is not None:
                self._let_go(self._kept)
        if self._deadlines is not None:
            self._deadlines.stop()
        if self.read_only:  # it wrote no marker rows
            self._pool.close(timeout=5)
            return
        try:
            with self._pool.connection(timeout=2) as conn:
                conn.execute(sql.SQL("DELETE FROM {} WHERE writer LIKE %s").format(sql.Identifier(WRITERS_TABLE)),
                             [f"{self._engine_id}:%"])
        except Exception:
            pass  # markers of a closed engine are harmless; the next open does not read them
        finally:
            self._pool.close(timeout=5)


def _writer(engine_id: str, conn: psycopg.Connection[Any]) -> str:
    """The marker row of ``conn``: this engine's id and the server process serving it
    (fixed for the connection's life, unique among the server's live connections)."""
    return f"{engine_id}:{conn.info.backend_pid}"


def _connection_lost(conn: psycopg.Connection[Any], exc: BaseException) -> bool:
    """True when ``exc`` is the connection failing (not the server refusing the statement)."""
    return conn.broken or conn.closed or getattr(exc, "sqlstate", None) is None \
        or str(getattr(exc, "sqlstate", "")).startswith(("08", "57"))


def _create_schema(url: str, connect_timeout: float, *, create: bool = True) -> None:
    """Create the tables if absent (unless not ``create``: then they must exist); refuse
    unregistered ``svit_`` tables."""
    tables = [table_name(space) for space in COLUMN_FAMILIES]
    with psycopg.connect(url, autocommit=True, connect_timeout=max(1, int(connect_timeout))) as conn:
        for _attempt in range(3 if create else 0):
            try:
                with conn.transaction():
                    for name in tables:
                        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (key bytea PRIMARY KEY, value bytea NOT NULL)")
                                     .format(sql.Identifier(name)))
                    conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (writer text PRIMARY KEY, token bytea NOT NULL)")
                                 .format(sql.Identifier(WRITERS_TABLE)))
                break
            except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
                continue  # another process created them at the same moment: look again
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_name LIKE 'svit\\_%'").fetchall()
    unknown = sorted({str(row[0]) for row in rows} - set(tables) - {WRITERS_TABLE})
    if unknown:
        raise InvalidPersistence(f"store has unregistered tables: {unknown}")
    if not create and set(tables) - {str(row[0]) for row in rows}:
        raise PersistenceNotFound("no store has been written to this database yet")


class _Statements:
    """The SQL of every operation, composed once per engine."""

    def __init__(self, tables: dict[str, sql.Identifier]) -> None:
        self.tables = tables
        self.get = {space: sql.SQL("SELECT value FROM {} WHERE key = %s").format(t) for space, t in tables.items()}
        # Locks the row holding the expected value (FOR UPDATE: a concurrent writer of it
        # waits, and the row is checked again once it committed), and divides by the
        # number of such rows: none aborts the transaction (division by zero).
        self.guard_value = {space: sql.SQL(
            "SELECT 1 / (SELECT count(*) FROM (SELECT 1 FROM {} WHERE key = %s AND value = %s FOR UPDATE) AS held)")
            .format(t) for space, t in tables.items()}
        self.claim_absent = {space: sql.SQL("INSERT INTO {} (key, value) VALUES (%s, '')").format(t)
                             for space, t in tables.items()}
        self.upsert = {space: sql.SQL(
            "INSERT INTO {} (key, value) SELECT * FROM unnest(%s::bytea[], %s::bytea[]) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value").format(t) for space, t in tables.items()}
        self.delete = {space: sql.SQL("DELETE FROM {} WHERE key = ANY(%s::bytea[])").format(t)
                       for space, t in tables.items()}
        self.marker = sql.SQL("INSERT INTO {} (writer, token) VALUES (%s, %s) ON CONFLICT (writer) "
                              "DO UPDATE SET token = EXCLUDED.token").format(sql.Identifier(WRITERS_TABLE))
        self._scans: dict[tuple[str, bool, bool], sql.Composed] = {}
        self._singles: dict[tuple[tuple[str, str, int], ...], _Shape] = {}
        self._lasts: dict[tuple[str, bool], sql.Composed] = {}

    def part(self, part: BatchPart) -> Iterator[tuple[sql.Composed, list[Any]]]:
        """``(statement, parameters)`` for one part: its expectations first, then its
        writes (the last operation on each key wins)."""
        final = _final_operations(part)
        for space, key, expected in part.expectations:
            if expected is None:
                yield self.claim_absent[space], [key]
                final.setdefault((space, key), None)  # the claim is removed unless written
            else:
                yield self.guard_value[space], [key, expected]
        deletes, puts = _by_space(final)
        for space, keys_list in deletes.items():
            yield self.delete[space], [keys_list]
        for space, (keys_list, values) in puts.items():
            yield self.upsert[space], [keys_list, values]

    def single(self, part: BatchPart) -> tuple[_Shape, list[Any]] | None:
        """One part and the commit marker as ONE statement (data-modifying ``WITH``
        clauses, run in autocommit as its own transaction: one round trip), or None when
        the part cannot be said so (an expected-absent key it does not write).

        Each key has one final operation; an expected key the part writes is written by
        a conditional ``UPDATE``/``DELETE ... WHERE value = expected`` (a compare-and-swap,
        checked again against a concurrent writer's committed row), an expected-absent
        key it puts is a plain ``INSERT`` (a key that exists collides), an expected key it
        does not write is locked ``FOR UPDATE``; the statement then divides by each of
        those row counts, so one that is zero aborts it and nothing is written. The text
        depends only on the part's shape (with the number of rows written per key space,
        up to :data:`LISTED_ROWS`), so it is composed once per shape, and prepared once per
        connection: its executions carry only the parameters, all byte strings in binary.
        The parameters returned are the part's; the marker's writer and token follow them."""
        final: dict[tuple[str, bytes], bytes | None] = {}
        for space, key, value in part.operations:  # the last operation on each key wins
            final[space, key] = value
        shape: list[tuple[str, str, int]] = []
        params: list[Any] = []
        for space, key, expected in part.expectations:
            if (space, key) in final:
                value = final.pop((space, key))
                if expected is None and value is not None:
                    shape.append(("insert", space, 1))
                    params += [key, value]
                elif expected is None:
                    return None  # expects absence and deletes: nothing to count
                elif value is None:
                    shape.append(("delete_if", space, 1))
                    params += [key, expected]
                else:
                    shape.append(("update_if", space, 1))
                    params += [value, key, expected]
            elif expected is None:
                return None
            else:
                shape.append(("lock", space, 1))
                params += [key, expected]
        # Per key space, the keys to delete and the keys and values to put (alternating,
        # as the listed statements take them).
        deletes: dict[str, list[bytes]] = {}
        puts: dict[str, list[bytes]] = {}
        for (space, key), value in final.items():
            if value is None:
                deletes.setdefault(space, []).append(key)
            else:
                pairs = puts.get(space)
                if pairs is None:
                    pairs = puts[space] = []
                pairs.append(key)
                pairs.append(value)
        for space, keys_list in deletes.items():
            if len(keys_list) <= LISTED_ROWS:
                shape.append(("delete", space, len(keys_list)))
                params += keys_list
            else:
                shape.append(("delete_array", space, 0))
                params.append(_bytea_array(keys_list))
        for space, pairs in puts.items():
            rows = len(pairs) >> 1
            if rows <= LISTED_ROWS:
                shape.append(("put", space, rows))
                params += pairs
            else:
                shape.append(("put_array", space, 0))
                params += [_bytea_array(pairs[0::2]), _bytea_array(pairs[1::2])]
        key_shape = tuple(shape)
        found = self._singles.get(key_shape)
        if found is None:
            # Every parameter is sent in binary (the marker's writer, text, is its UTF-8 bytes).
            found = self._singles[key_shape] = _Shape(
                f"svit_commit_{len(self._singles)}".encode(), _numbered(self._compose_single(key_shape)),
                (1,) * (len(params) + 2))
        return found, params

    def _compose_single(self, shape: tuple[tuple[str, str, int], ...]) -> bytes:
        # Every byte string is sent in binary (%b): no escaping on either side.
        texts = {
            "insert": "INSERT INTO {} (key, value) VALUES (%b, %b) RETURNING 1",
            "delete_if": "DELETE FROM {} WHERE key = %b AND value = %b RETURNING 1",
            "update_if": "UPDATE {} SET value = %b WHERE key = %b AND value = %b RETURNING 1",
            "lock": "SELECT 1 FROM {} WHERE key = %b AND value = %b FOR UPDATE",
            "delete": "DELETE FROM {} WHERE key IN ({})",
            "delete_array": "DELETE FROM {} WHERE key = ANY(%b::bytea[])",
            "put": "INSERT INTO {} (key, value) VALUES {} ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            "put_array": "INSERT INTO {} (key, value) SELECT * FROM unnest(%b::bytea[], %b::bytea[]) "
                         "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        }
        clauses: list[sql.Composable] = []
        counted: list[str] = []
        for number, (kind, space, rows) in enumerate(shape):
            name = f"w{number}"
            if kind == "put":
                listed = sql.SQL(", ".join(["(%b, %b)"] * rows))
                text = sql.SQL(texts[kind]).format(self.tables[space], listed)
            elif kind == "delete":
                text = sql.SQL(texts[kind]).format(self.tables[space], sql.SQL(", ".join(["%b"] * rows)))
            else:
                text = sql.SQL(texts[kind]).format(self.tables[space])
            clauses.append(sql.SQL("{} AS ({})").format(sql.Identifier(name), text))
            if kind in ("insert", "delete_if", "update_if", "lock"):
                counted.append(name)
        clauses.append(sql.SQL(
            "marker AS (INSERT INTO {} (writer, token) VALUES (%s, %b) "
            "ON CONFLICT (writer) DO UPDATE SET token = EXCLUDED.token)").format(sql.Identifier(WRITERS_TABLE)))
        checks = sql.SQL(" + ").join(
            sql.SQL("1 / (SELECT count(*) FROM {})").format(sql.Identifier(name)) for name in counted) \
            if counted else sql.SQL("1")
        return sql.SQL("WITH {} SELECT {}").format(sql.SQL(", ").join(clauses), checks).as_bytes(None)

    def scan(self, space: str, inclusive: bool, bounded: bool) -> sql.Composed:
        found = self._scans.get((space, inclusive, bounded))
        if found is None:
            low = ">=" if inclusive else ">"
            high = " AND key < %s" if bounded else ""
            found = sql.SQL(f"SELECT key, value FROM {{}} WHERE key {low} %s{high} ORDER BY key LIMIT %s").format(
                self.tables[space])
            self._scans[(space, inclusive, bounded)] = found
        return found

    def last(self, space: str, bounded: bool) -> sql.Composed:
        found = self._lasts.get((space, bounded))
        if found is None:
            high = " AND key < %s" if bounded else ""
            found = sql.SQL(f"SELECT key FROM {{}} WHERE key >= %s{high} ORDER BY key DESC LIMIT 1").format(
                self.tables[space])
            self._lasts[(space, bounded)] = found
        return found


class _Shape:
    """One shape of one-statement commit: its name when prepared, its text (with the
    server's numbered placeholders), and the format of each parameter (all binary)."""

    __slots__ = ("name", "text", "formats")

    def __init__(self, name: bytes, text: bytes, formats: tuple[int, ...]) -> None:
        self.name = name
        self.text = text
        self.formats = formats


#: ``bytea``'s type id, as a binary array names the type of its elements.
_BYTEA_OID = 17


def _bytea_array(values: list[bytes]) -> bytes:
    """``values`` as a one-dimensional ``bytea[]`` in PostgreSQL's binary array format:
    dimensions, no nulls, element type, then each element's length and bytes."""
    out = [struct.pack("!iiiii", 1, 0, _BYTEA_OID, len(values), 1)]
    for value in values:
        out.append(struct.pack("!i", len(value)))
        out.append(value)
    return b"".join(out)


def _numbered(query: bytes) -> bytes:
    """``query`` with its placeholders (``%b``, ``%s``) numbered as the server's ``$1``,
    ``$2``... (the composed text holds no other ``%``: its identifiers are the fixed
    table names)."""
    pieces = query.split(b"%")
    if any(piece[:1] not in (b"b", b"s") for piece in pieces[1:]):
        raise AssertionError("a commit statement holds a % that is not a placeholder")  # pragma: no cover
    return pieces[0] + b"".join(b"$%d%s" % (number, piece[1:]) for number, piece in enumerate(pieces[1:], 1))


class _Committer:
    """The connection commits are made on (kept from one commit to the next), its marker
    row, and the one-statement commits prepared on it.

    :meth:`run` hands a prepared commit's parameters straight to libpq and awaits, for a
    bounded time with the interpreter lock released, the one status it needs: no cursor,
    no adaptation of the parameters, no row of the reply read."""

    __slots__ = ("conn", "writer", "_writer_bytes", "_prepared")

    def __init__(self, conn: psycopg.Connection[Any], writer: str) -> None:
        self.conn = conn
        self.writer = writer
        self._writer_bytes = writer.encode()
        self._prepared: set[bytes] = set()

    def run(self, shape: _Shape, params: list[Any], token: bytes, wait_seconds: float) -> None:
        """Commit one statement of ``shape`` with ``params``, then the
        marker's writer and ``token``; raise as :meth:`PostgreSQLEngine._transaction` does.

        The reply is awaited at most ``wait_seconds``, in ``select`` (so a signal still
        interrupts it): a server that stops answering makes the reply lost, never a hang."""
        pgconn = self.conn.pgconn
        name = shape.name
        params.append(self._writer_bytes)
        params.append(token)
        deadline = time.monotonic() + wait_seconds
        try:
            if name not in self._prepared:
                # Sent and awaited like the commit itself (libpq's blocking prepare would
                # wait for a server that stops answering without any bound).
                pgconn.send_prepare(name, shape.text)
                prepared = self._reply(pgconn, deadline)
                # Already there: this pool's connection was the commit connection before
                # (the name stands for the same text on every connection of the engine).
                if prepared.error_field(_SQLSTATE) != _ALREADY_PREPARED:
                    _outcome(pgconn, prepared)
                self._prepared.add(name)
            pgconn.send_query_prepared(name, params, shape.formats)
            result = self._reply(pgconn, deadline)
        except psycopg.OperationalError:
            raise _LostReply() from None  # libpq could not send or receive (the connection is gone)
        _outcome(pgconn, result)

    def _reply(self, pgconn: psycopg.pq.abc.PGconn, deadline: float) -> psycopg.pq.abc.PGresult:
        """The outcome of what was just sent, awaited until the server is ready for the next
        query (at most until ``deadline``, in ``select``): its first failed result if any,
        else its first result.

        Every result is read: the statement's own result comes before the implicit
        transaction ends, and a failure of that end (a deferred check, a serialization
        failure) follows it as a second one; the first alone would acknowledge a commit
        the server refused."""
        fd = pgconn.socket
        # The connection is non-blocking: what the socket did not take yet is sent as
        # it drains (a large commit), then the reply is read as it comes.
        while pgconn.flush():
            self._wait(select.select([fd], [fd], [], self._left(deadline)), deadline)
            pgconn.consume_input()
        outcome = None
        while True:
            while pgconn.is_busy():
                self._wait(select.select([fd], [], [], self._left(deadline)), deadline)
                pgconn.consume_input()
            result = pgconn.get_result()
            if result is None:
                break
            if outcome is None or (outcome.status in (_TUPLES_OK, _COMMAND_OK)
                                   and result.status not in (_TUPLES_OK, _COMMAND_OK)):
                outcome = result
        if outcome is None:
            raise _LostReply()
        return outcome

    @staticmethod
    def _left(deadline: float) -> float:
        return max(0.0, deadline - time.monotonic())

    def _wait(self, ready: tuple[list[Any], list[Any], list[Any]], deadline: float) -> None:
        """Go on when ``select`` found the socket ready; past ``deadline`` the reply is
        taken as lost, and this connection is done."""
        if not (ready[0] or ready[1]) and time.monotonic() >= deadline:
            self.conn.close()
            raise _LostReply()


class _Deadlines:
    """Bounds the waits psycopg makes without one (a pipelined transaction, the check of a
    connection): past its deadline a bounded block's connection has its socket shut
    down, so the wait ends with the connection lost (:class:`_LostReply` once ``COMMIT``
    may have been sent), never with a hang on a server that stopped answering.

    One thread per engine, started when it opens (a commit starts none): it sleeps until
    the earliest deadline armed. A socket is shut down only while its block is armed
    (under the lock the block's end takes too), so a descriptor reused since is never
    touched."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._armed: dict[int, tuple[float, psycopg.Connection[Any]]] = {}
        self._count = 0
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="svit-store-deadlines", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def bound(self, conn: psycopg.Connection[Any], seconds: float) -> Iterator[None]:
        with self._changed:
            self._count += 1
            key = self._count
            self._armed[key] = (time.monotonic() + seconds, conn)
            self._changed.notify()
        try:
            yield
        finally:
            with self._changed:
                self._armed.pop(key, None)

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        with self._changed:
            while not self._stopped:
                now = time.monotonic()
                for key, (deadline, conn) in list(self._armed.items()):
                    if deadline <= now:
                        del self._armed[key]
                        _shut_down(conn)
                earliest = min((deadline for deadline, _conn in self._armed.values()), default=None)
                self._changed.wait(None if earliest is None else max(0.0, earliest - now))


def _shut_down(conn: psycopg.Connection[Any]) -> None:
    """Shut the socket of ``conn`` down (its own socket, through a duplicate descriptor):
    every wait on it ends at once, with the connection lost."""
    try:
        shared = socket.socket(fileno=os.dup(conn.pgconn.socket))
    except (OSError, psycopg.Error):
        return  # no socket left: the connection is already gone
    try:
        shared.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        shared.close()


def _outcome(pgconn: psycopg.pq.abc.PGconn, result: psycopg.pq.abc.PGresult) -> None:
    """Raise what a failed ``result`` of a commit means (as psycopg would have raised it):
    the connection lost, a failed expectation, or the server's refusal by its SQLSTATE."""
    if result.status in (_TUPLES_OK, _COMMAND_OK):
        return
    state = result.error_field(_SQLSTATE)
    if pgconn.status == _BAD or state is None or state.startswith((b"08", b"57")):
        raise _LostReply()
    code = state.decode("ascii", "replace")
    if code in (psycopg.errors.UniqueViolation.sqlstate, psycopg.errors.DivisionByZero.sqlstate):
        raise ExpectationFailed(0)
    try:
        error: type[psycopg.Error] = psycopg.errors.lookup(code)
    except KeyError:
        error = psycopg.DatabaseError
    raise error("the database server refused the commit")


_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK
_COMMAND_OK = psycopg.pq.ExecStatus.COMMAND_OK
_SQLSTATE = psycopg.pq.DiagnosticField.SQLSTATE
_BAD = psycopg.pq.ConnStatus.BAD
_ALREADY_PREPARED = b"42P05"  # duplicate_prepared_statement


def _final_operations(part: BatchPart) -> dict[tuple[str, bytes], bytes | None]:
    """The last operation of ``part`` on each key (a put's value, or None for a delete)."""
    final: dict[tuple[str, bytes], bytes | None] = {}
    for space, key, value in part.operations:
        final[(space, key)] = value
    return final


def _by_space(
    final: dict[tuple[str, bytes], bytes | None],
) -> tuple[dict[str, list[bytes]], dict[str, tuple[list[bytes], list[bytes]]]]:
    """``final`` as the keys to delete and the ``(keys, values)`` to put, per key space."""
    puts: dict[str, tuple[list[bytes], list[bytes]]] = {}
    deletes: dict[str, list[bytes]] = {}
    for (space, key), value in final.items():
        if value is None:
            deletes.setdefault(space, []).append(key)
        else:
            keys_, values = puts.setdefault(space, ([], []))
            keys_.append(key)
            values.append(value)
    return deletes, puts
