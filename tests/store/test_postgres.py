"""What only the PostgreSQL engine has: a server between the store and its data.

A commit whose reply is lost is resolved by reading back (committed: the commit stands;
not committed: a clear error, the engine healthy; the server unreachable: terminal),
faults injected by a proxy that cuts the connection around ``COMMIT``. Stores in two
engine objects (as in two OS processes) share one database and its heads. Errors show
neither the URL's password nor server text; a schema of another layout is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from svit import Process
from svit.errors import InvalidPersistence, PersistenceConflict, PersistenceUnavailable
from svit.store import ProcessStore, keys
from svit.store.keys import CF_DEFAULT, CF_RECORD
from svit.store.postgres import SCAN_PAGE, PostgreSQLEngine, location
from tests.store.pg_cluster import free_port
from tests.store.pg_proxy import Proxy

ADDRESS = "svit://local/pg/counter"
ROOT = str(Path(__file__).resolve().parents[2])
COUNTER = """
(define (main input)
  (let ((next (+ (read "/memory/count") 1)))
    (do (write "/memory/count" next) next)))
"""


def counter(where: str = ADDRESS) -> Process:
    return Process.builder(where).memory("count", 0).library("counter", COUNTER).build()


@pytest.fixture
def proxied(postgresql_url: str) -> Iterator[tuple[Proxy, ProcessStore]]:
    """A store whose every connection passes through a proxy that can cut it."""
    proxy, url = Proxy.before(postgresql_url)
    store = ProcessStore.open(url)
    assert isinstance(store.engine, PostgreSQLEngine)
    store.engine.resolve_seconds = 1.0
    try:
        yield proxy, store
    finally:
        proxy.refuse = False
        store.close()
        proxy.close()


def stored_version(url: str) -> int:
    with ProcessStore.open(url) as store:
        return store.resume(ADDRESS).version


# ---------------------------------------------------------------------------- lost replies


def test_a_commit_whose_reply_is_lost_after_it_committed_stands(proxied: tuple[Proxy, ProcessStore],
                                                                postgresql_url: str) -> None:
    proxy, store = proxied
    handle = store.create(counter())
    proxy.arm("after")
    assert handle.exec("/lib/counter").output == 1
    assert proxy.cuts == 1 and store.engine.resolved == ["committed"]  # type: ignore[attr-defined]
    assert handle.version == 1 and not store.terminal
    assert handle.exec("/lib/counter").output == 2  # the next commit chains to it
    assert stored_version(postgresql_url) == 2


def test_a_commit_cut_before_the_server_saw_it_is_sent_once_more_and_written_once(
        proxied: tuple[Proxy, ProcessStore], postgresql_url: str) -> None:
    proxy, store = proxied
    handle = store.create(counter())
    handle.exec("/lib/counter")
    proxy.arm("before")
    assert handle.exec("/lib/counter").output == 2
    assert proxy.cuts == 1 and store.engine.resolved == ["not committed"]  # type: ignore[attr-defined]
    assert not store.terminal
    assert stored_version(postgresql_url) == 2
    with ProcessStore.open(postgresql_url) as again:
        assert [t.position for t in again.resume(ADDRESS).query()] == [0, 1]


def test_a_commit_cut_twice_is_not_written_and_the_engine_stays_healthy(
        proxied: tuple[Proxy, ProcessStore], postgresql_url: str) -> None:
    proxy, store = proxied
    handle = store.create(counter())
    handle.exec("/lib/counter")
    proxy.arm("before", times=2)
    with pytest.raises(PersistenceUnavailable) as caught:
        handle.exec("/lib/counter")
    assert proxy.cuts == 2 and store.engine.resolved == ["not committed"] * 2  # type: ignore[attr-defined]
    assert caught.value.reason == "interrupted" and "did not commit" in caught.value.message
    assert handle.version == 1 and handle.read("/memory/count") == 1
    assert not store.terminal
    assert stored_version(postgresql_url) == 1
    assert handle.exec("/lib/counter").output == 2  # the same handle goes on
    assert stored_version(postgresql_url) == 2


def _prepared_commits(proxy: Proxy, store: ProcessStore, count: int) -> Any:
    """A counter handle after ``count`` commits, checked to have run as executions of a
    prepared statement (no statement text on the wire)."""
    handle = store.create(counter())
    runs = proxy.prepared_runs
    for _ in range(count):
        handle.exec("/lib/counter")
    assert proxy.prepared_runs - runs >= count - 1  # all but (at most) the first on each connection
    return handle


@pytest.mark.parametrize("mode", ["after", "before"])
def test_a_prepared_commit_whose_reply_is_lost_is_resolved_by_reading_back(
        proxied: tuple[Proxy, ProcessStore], postgresql_url: str, mode: str) -> None:
    proxy, store = proxied
    handle = _prepared_commits(proxy, store, 6)
    proxy.arm(mode)
    assert handle.exec("/lib/counter").output == 7
    assert proxy.cuts == 1
    assert store.engine.resolved == ["committed" if mode == "after" else "not committed"]  # type: ignore[attr-defined]
    assert handle.version == 7 and not store.terminal
    assert handle.exec("/lib/counter").output == 8
    assert stored_version(postgresql_url) == 8
    with ProcessStore.open(postgresql_url) as again:
        assert [t.position for t in again.resume(ADDRESS).query()] == list(range(8))  # each written once


def test_a_prepared_commit_cut_twice_is_not_written_and_the_engine_stays_healthy(
        proxied: tuple[Proxy, ProcessStore], postgresql_url: str) -> None:
    proxy, store = proxied
    handle = _prepared_commits(proxy, store, 6)
    proxy.arm("before", times=2)
    with pytest.raises(PersistenceUnavailable) as caught:
        handle.exec("/lib/counter")
    assert proxy.cuts == 2 and caught.value.reason == "interrupted"
    assert handle.version == 6 and not store.terminal
    assert stored_version(postgresql_url) == 6


def test_a_lost_reply_the_server_cannot_be_reached_to_resolve_makes_the_engine_terminal(
        proxied: tuple[Proxy, ProcessStore], postgresql_url: str) -> None:
    proxy, store = proxied
    handle = store.create(counter())
    proxy.arm("before", times=2)
    proxy.refuse = True
    with pytest.raises(PersistenceUnavailable) as caught:
        handle.exec("/lib/counter")
    assert "could not be reached" in caught.value.message
    assert store.terminal and handle.version == 0
    with pytest.raises(PersistenceUnavailable) as later:
        handle.exec("/lib/counter")
    assert later.value.reason == "terminal"
    proxy.refuse = False
    assert stored_version(postgresql_url) == 0


def test_a_connection_the_server_ended_between_commits_is_replaced(postgresql_url: str) -> None:
    with ProcessStore.open(postgresql_url) as store:
        handle = store.create(counter())
        handle.exec("/lib/counter")
        with psycopg.connect(postgresql_url, autocommit=True) as admin:
            # Every other connection of this schema's test: the store's pooled ones.
            ended = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                "AND backend_type = 'client backend' AND query NOT LIKE '%%pg_stat_activity%%' "
                "AND pid IN (SELECT CAST(split_part(writer, ':', 2) AS int) FROM svit_writers)").fetchone()
        assert ended is not None and ended[0] >= 1
        assert handle.exec("/lib/counter").output == 2
        assert not store.terminal


# ---------------------------------------------------------------------------- the commit connection


def _commit_backends(url: str) -> list[int]:
    """The server processes of this test's schema that ran the one-statement commit last."""
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = current_setting('application_name') "
            "AND pid <> pg_backend_pid() AND query LIKE 'WITH%%marker AS (%%'").fetchall()
    return [int(row[0]) for row in rows]


def test_commits_are_made_on_one_kept_connection_not_taken_from_the_pool_each_time(
        postgresql_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with ProcessStore.open(postgresql_url) as store:
        handle = store.create(counter())
        handle.exec("/lib/counter")
        pool = store.engine._pool  # type: ignore[attr-defined]
        taken: list[object] = []
        getconn = pool.getconn

        def counted(*args: Any, **kwargs: Any) -> Any:
            taken.append(args)
            return getconn(*args, **kwargs)

        monkeypatch.setattr(pool, "getconn", counted)
        for _ in range(10):
            handle.exec("/lib/counter")
        assert taken == []
        assert len(_commit_backends(postgresql_url)) == 1
        assert stored_version(postgresql_url) == 11


def test_the_one_statement_commit_is_handed_to_libpq_without_a_psycopg_cursor(
        postgresql_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    executed: list[bytes] = []
    execute = psycopg.Cursor.execute

    def recorded(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        executed.append(query if isinstance(query, bytes) else str(query).encode())
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recorded)
    with ProcessStore.open(postgresql_url) as store:
        handle = store.create(counter())
        for _ in range(5):
            handle.exec("/lib/counter")
    assert not [query for query in executed if b"marker AS (" in query]
    assert stored_version(postgresql_url) == 5


def test_a_commit_connection_the_server_ended_mid_run_is_replaced_and_every_commit_stands(
        postgresql_url: str) -> None:
    with ProcessStore.open(postgresql_url) as store:
        handle = store.create(counter())
        handle.exec("/lib/counter")
        ended = threading.Event()
        failures: list[BaseException] = []
        done = [0]

        def commit_on() -> None:
            after_end = 0
            for _ in range(2000):
                try:
                    handle.exec("/lib/counter")
                except BaseException as exc:
                    failures.append(exc)
                    return
                done[0] += 1
                after_end += ended.is_set()
                if after_end >= 5:
                    return

        writer = threading.Thread(target=commit_on)
        writer.start()
        try:
            while done[0] < 3 and writer.is_alive():
                threading.Event().wait(0.001)
            [before] = _commit_backends(postgresql_url)
            with psycopg.connect(postgresql_url, autocommit=True) as admin:
                assert admin.execute("SELECT pg_terminate_backend(%s)", [before]).fetchone() == (True,)
        finally:
            ended.set()
            writer.join(60)
        assert failures == [] and not writer.is_alive()
        # The commit in flight (or the next one) found its connection gone, read back how
        # it ended, and every commit then went on, on another connection.
        assert len(store.engine.resolved) == 1  # type: ignore[attr-defined]
        assert _commit_backends(postgresql_url) not in ([], [before])
        assert handle.version == 1 + done[0] and not store.terminal
    assert stored_version(postgresql_url) == 1 + done[0]


def test_a_commit_connection_given_back_and_taken_again_keeps_its_prepared_commit(postgresql_url: str) -> None:
    engine = PostgreSQLEngine.open(postgresql_url)
    try:
        for value in (b"1", b"2"):
            batch = engine.batch()
            batch.put(CF_DEFAULT, b"m/k", value)
            engine.write(batch)
            committer = engine._kept
            assert committer is not None
            pid = committer.conn.info.backend_pid
            engine._let_go(committer)  # healthy: the pool keeps it, its statement prepared
        batch = engine.batch()
        batch.put(CF_DEFAULT, b"m/k", b"3")
        engine.write(batch)
        assert engine._kept is not None and engine._kept.conn.info.backend_pid == pid
        assert engine.get(CF_DEFAULT, b"m/k") == b"3" and not engine.terminal
    finally:
        engine.close()


def test_a_commit_the_server_refuses_is_named_by_its_sqlstate(postgresql_url: str) -> None:
    with ProcessStore.open(postgresql_url) as store:
        handle = store.create(counter())
        handle.exec("/lib/counter")
        with psycopg.connect(postgresql_url, autocommit=True) as admin:
            admin.execute("CREATE FUNCTION full_disk() RETURNS trigger LANGUAGE plpgsql AS "
                          "$$ BEGIN RAISE EXCEPTION 'no room at /secret/path' USING ERRCODE = 'disk_full'; END $$")
            admin.execute("CREATE TRIGGER full_disk BEFORE INSERT ON svit_record FOR EACH ROW EXECUTE FUNCTION full_disk()")
        with pytest.raises(PersistenceUnavailable) as caught:
            handle.exec("/lib/counter")
        assert caught.value.reason == "full" and "/secret/path" not in caught.value.message
        assert store.terminal
    assert stored_version(postgresql_url) == 1


# ---------------------------------------------------------------------------- many writers


def test_two_stores_on_one_database_share_heads_and_exactly_one_of_two_racing_commits_wins(
        postgresql_url: str) -> None:
    with ProcessStore.open(postgresql_url) as first_store, ProcessStore.open(postgresql_url) as second_store:
        first_store.create(counter())
        wins = 0
        for round_number in range(12):
            handles = [first_store.resume(ADDRESS), second_store.resume(ADDRESS)]
            assert handles[0].version == handles[1].version == wins
            barrier = threading.Barrier(2)
            outcomes: list[BaseException | None] = [None, None]

            def race(i: int) -> None:
                barrier.wait(5)
                try:
                    handles[i].write("/memory/who", f"{i}:{round_number}")
                except BaseException as exc:
                    outcomes[i] = exc

            threads = [threading.Thread(target=race, args=(i,)) for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            refused = [o for o in outcomes if o is not None]
            assert len(refused) == 1 and isinstance(refused[0], PersistenceConflict), outcomes
            wins += 1
        assert first_store.resume(ADDRESS).version == second_store.resume(ADDRESS).version == wins
        assert not first_store.terminal and not second_store.terminal


def test_a_store_that_cached_a_head_another_store_moved_is_refused(postgresql_url: str) -> None:
    with ProcessStore.open(postgresql_url) as first_store, ProcessStore.open(postgresql_url) as second_store:
        stale = first_store.create(counter())
        second_store.resume(ADDRESS).exec("/lib/counter")
        with pytest.raises(PersistenceConflict):
            stale.exec("/lib/counter")
        assert first_store.resume(ADDRESS).exec("/lib/counter").output == 2


def test_a_resume_racing_another_stores_commit_reads_one_consistent_state(
        postgresql_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process commits between the reading of the head and of the history: the
    resume reads the head again instead of calling the history invalid."""
    with ProcessStore.open(postgresql_url) as reader, ProcessStore.open(postgresql_url) as writer:
        reader.create(counter())
        rebuild = reader._rebuild

        def committed_meanwhile(address: str, stop: object, depth: int) -> object:
            monkeypatch.setattr(reader, "_rebuild", rebuild)
            writer.resume(ADDRESS).exec("/lib/counter")
            return rebuild(address, stop, depth)  # type: ignore[arg-type]

        monkeypatch.setattr(reader, "_rebuild", committed_meanwhile)
        handle = reader.resume(ADDRESS)
        assert handle.version == 1 and handle.read("/memory/count") == 1
        assert handle.exec("/lib/counter").output == 2


def test_a_resume_whose_history_never_stops_moving_is_a_conflict(
        postgresql_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with ProcessStore.open(postgresql_url) as reader, ProcessStore.open(postgresql_url) as writer:
        reader.create(counter())
        rebuild = reader._rebuild
        moving = writer.resume(ADDRESS)

        def committed_meanwhile(address: str, stop: object, depth: int) -> object:
            # A commit lands before the history is read and another before the head is.
            moving.exec("/lib/counter")
            state = rebuild(address, stop, depth)  # type: ignore[arg-type]
            moving.exec("/lib/counter")
            return state

        monkeypatch.setattr(reader, "_rebuild", committed_meanwhile)
        with pytest.raises(PersistenceConflict):
            reader.resume(ADDRESS)
        monkeypatch.setattr(reader, "_rebuild", rebuild)
        assert reader.resume(ADDRESS).version == moving.version


# ---------------------------------------------------------------------------- reading


def test_scans_are_in_key_order_across_pages_and_bounded_by_the_prefix(postgresql_url: str) -> None:
    engine = PostgreSQLEngine.open(postgresql_url)
    try:
        batch = engine.batch()
        prefix = keys.thread_session_prefix(ADDRESS, "s")
        count = SCAN_PAGE * 2 + 7
        for n in range(count):
            batch.put(CF_RECORD, keys.thread_event_key(ADDRESS, "s", n), b"%d" % n)
        batch.put(CF_RECORD, keys.thread_event_key(ADDRESS, "t", 0), b"other session")
        engine.write(batch)
        found = list(engine.scan(CF_RECORD, prefix))
        assert [value for _, value in found] == [b"%d" % n for n in range(count)]
        assert [key for key, _ in found] == sorted(key for key, _ in found)
        start = keys.thread_event_key(ADDRESS, "s", SCAN_PAGE + 3)
        assert next(iter(engine.scan(CF_RECORD, prefix, start)))[1] == b"%d" % (SCAN_PAGE + 3)
        assert engine.last_key(CF_RECORD, prefix) == keys.thread_event_key(ADDRESS, "s", count - 1)
        # A prefix ending in 0xff bytes still bounds the scan (its upper bound carries over).
        high = engine.batch()
        high.put(CF_DEFAULT, b"m/\xff\xffa", b"1")
        high.put(CF_DEFAULT, b"m/\xff\xff", b"0")
        engine.write(high)
        assert [key for key, _ in engine.scan(CF_DEFAULT, b"m/\xff\xff")] == [b"m/\xff\xff", b"m/\xff\xffa"]
        assert engine.last_key(CF_DEFAULT, b"m/\xff") == b"m/\xff\xffa"
        before = engine.sequence()
        one = engine.batch()
        one.put(CF_DEFAULT, b"m/x", b"y")
        engine.write(one)
        assert engine.sequence() > before
    finally:
        engine.close()


def test_describe_names_synchronous_commit_and_the_location_without_a_password() -> None:
    assert location("postgresql://user:hunter2-secret@db.example:6543/svit?sslmode=require&password=p2") \
        == "postgresql://user@db.example:6543/svit?sslmode=require"


def test_the_statement_says_how_commits_are_made_durable(store: ProcessStore, engine_kind: str) -> None:
    statement = store.statement()
    if engine_kind == "postgresql":
        assert "synchronous_commit=on" in statement["write"]
        assert statement["path"].startswith("postgresql://")
    else:
        assert "SyncWAL" in statement["write"] and "synced before it was acknowledged" in statement["write"]


# ---------------------------------------------------------------------------- refusals


def test_an_unreachable_server_is_named_without_the_password() -> None:
    url = f"postgresql://svit:not-this-password-42@127.0.0.1:{free_port()}/postgres"
    with pytest.raises(PersistenceUnavailable) as caught:
        PostgreSQLEngine.open(url, connect_timeout=2)
    text = str(caught.value)
    assert caught.value.reason == "unreachable"
    assert "not-this-password-42" not in text and "127.0.0.1" not in text, text


def test_a_missing_database_is_named(postgresql_server: str) -> None:
    url = postgresql_server.rsplit("/", 1)[0] + "/no_such_database_here"
    with pytest.raises(PersistenceUnavailable) as caught:
        ProcessStore.open(url)
    assert "no_such_database_here" not in str(caught.value)


def test_a_schema_holding_an_unregistered_table_is_refused(postgresql_url: str) -> None:
    ProcessStore.open(postgresql_url).close()
    with psycopg.connect(postgresql_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE svit_mystery (key bytea PRIMARY KEY, value bytea NOT NULL)")
    with pytest.raises(InvalidPersistence, match="unregistered tables"):
        ProcessStore.open(postgresql_url)


def test_a_database_of_another_format_is_refused(postgresql_url: str) -> None:
    ProcessStore.open(postgresql_url).close()
    with psycopg.connect(postgresql_url, autocommit=True) as conn:
        conn.execute("UPDATE svit_default SET value = 'svit-store@1' WHERE key = %s", [keys.FORMAT_KEY])
    with pytest.raises(InvalidPersistence, match="'svit-store@1'"):
        ProcessStore.open(postgresql_url)


def test_a_database_url_without_the_extra_names_the_extra(tmp_path: Path) -> None:
    blocker = (
        "import importlib.abc, sys\n"
        "class Blocker(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('psycopg', 'psycopg_pool'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Blocker())\n"
        "from svit.store import ProcessStore\n"
        "try:\n"
        "    ProcessStore.open('postgresql://svit@127.0.0.1:9/postgres')\n"
        "except Exception as error:\n"
        "    print(type(error).__name__, error)\n")
    done = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": ROOT}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "PersistenceUnavailable" in done.stdout and "pip install 'svit[postgresql]'" in done.stdout


def test_the_cli_takes_a_database_url_from_store_and_from_svit_store(postgresql_url: str, tmp_path: Path) -> None:
    def svit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "svit.cli", *args], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": ROOT, **(env or {})}, cwd=tmp_path)

    made = svit("--store", postgresql_url, "new", ADDRESS, "--memory", "n=1")
    assert made.returncode == 0, made.stderr
    assert "created a process store" not in made.stderr
    read = svit("read", ADDRESS, "/memory/n", env={"SVIT_STORE": postgresql_url})
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip() == "1"
    assert not list(tmp_path.iterdir())  # no directory was made for the URL


def test_a_commit_whose_server_process_stops_answering_fails_closed_instead_of_hanging(
        postgresql_url: str) -> None:
    """A stopped server process (SIGSTOP) never answers: the commit waits at most its
    bound, the reply is taken as lost, and since that process cannot be ended to read back
    the outcome, the store is terminal. Once the process runs again it is ended before it
    reads the statement, so nothing was written."""
    import signal
    import time

    store = ProcessStore.open(postgresql_url)
    try:
        handle = store.create(counter())
        handle.exec("/lib/counter")
        engine = store.engine  # type: ignore[attr-defined]
        engine.commit_seconds, engine.resolve_seconds = 0.5, 1.0
        before = handle.version
        [pid] = _commit_backends(postgresql_url)
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(PersistenceUnavailable) as caught:
                handle.exec("/lib/counter")
            waited = time.monotonic() - started
        finally:
            os.kill(pid, signal.SIGCONT)
        assert waited < 20, waited
        assert "could not be ended" in str(caught.value) and store.terminal
        assert engine.resolved == []  # no outcome was guessed
    finally:
        store.close()
    deadline = time.monotonic() + 10
    with psycopg.connect(postgresql_url, autocommit=True) as admin:
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchall():
            assert time.monotonic() < deadline, "the stopped server process was not ended"
            time.sleep(0.05)
    assert stored_version(postgresql_url) == before


def test_a_commit_larger_than_the_socket_takes_at_once_is_sent_as_it_drains(postgresql_url: str) -> None:
    """The commit connection is non-blocking: a statement the socket cannot take at once
    is flushed as the server reads it, not left in libpq's buffer until the wait ends."""
    import socket

    with ProcessStore.open(postgresql_url) as store:
        handle = store.create(counter())
        handle.exec("/lib/counter")
        engine = store.engine  # type: ignore[attr-defined]
        engine.commit_seconds = 5.0
        kept = socket.socket(fileno=os.dup(engine._kept.conn.pgconn.socket))
        try:
            kept.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        finally:
            kept.close()  # the duplicate only; the option stays on the shared socket
        big = "x" * 300_000
        handle.write("/memory/big", big)
        assert engine.resolved == [] and not store.terminal
        assert handle.read("/memory/big") == big
    with ProcessStore.open(postgresql_url) as store:
        assert store.resume(ADDRESS).read("/memory/big") == big


# ---------------------------------------------------------------------------- the end of a commit


def _refuse_at_commit(url: str) -> None:
    """A deferred constraint trigger on ``svit_default`` that fails the transaction at its
    end (as a serialization failure does under serializable isolation): the statement
    itself completes, and only the commit that follows it is refused."""
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                      "RAISE EXCEPTION 'refused at commit' USING ERRCODE = 'serialization_failure'; END $$")
        admin.execute("CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT OR UPDATE ON svit_default "
                      "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()")


def test_a_one_statement_commit_refused_at_its_end_is_not_reported_written(postgresql_url: str) -> None:
    """The statement's own result comes before the commit that ends it: a commit refused
    there is a failed write (terminal), never an acknowledged one."""
    engine = PostgreSQLEngine.open(postgresql_url)
    try:
        _refuse_at_commit(postgresql_url)
        key = keys.lease_key("svit://local/pg/refused")
        batch = engine.batch()
        batch.put(CF_DEFAULT, key, b"held")
        with pytest.raises(PersistenceUnavailable) as caught:
            engine.write(batch)
        assert "SQLSTATE 40001" in caught.value.message and engine.terminal
        assert engine.resolved == []
    finally:
        engine.close()
    with psycopg.connect(postgresql_url, autocommit=True) as admin:
        assert admin.execute("SELECT count(*) FROM svit_default").fetchone() == (0,)


def _stopped_commit(postgresql_url: str, make: Any) -> tuple[list[BaseException], bool]:
    """Stop (SIGSTOP) the server process of an engine's commit connection, write the batch
    ``make(engine)`` returns, and wait up to 20 s for the write to end: the errors it
    raised, and whether it ended in that time. The process runs again afterwards (and is
    ended by the engine before it could commit anything)."""
    import signal

    engine = PostgreSQLEngine.open(postgresql_url)
    try:
        first = engine.batch()
        first.put(CF_DEFAULT, keys.lease_key("svit://local/pg/first"), b"1")
        engine.write(first)
        engine.commit_seconds, engine.resolve_seconds = 0.5, 1.0
        batch = make(engine)
        [pid] = _commit_backends(postgresql_url)
        raised: list[BaseException] = []

        def write() -> None:
            try:
                engine.write(batch)
            except BaseException as exc:
                raised.append(exc)

        writer = threading.Thread(target=write, daemon=True)
        os.kill(pid, signal.SIGSTOP)
        try:
            writer.start()
            writer.join(20)
            ended = not writer.is_alive()
        finally:
            os.kill(pid, signal.SIGCONT)
        writer.join(30)
        return raised, ended
    finally:
        engine.close()


def _stored_leases(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute("SELECT count(*) FROM svit_default").fetchone()
    return int(row[0]) if row else 0


def test_a_group_commit_whose_server_process_stops_answering_fails_closed_instead_of_hanging(
        postgresql_url: str) -> None:
    """Batches written together (several parts, one pipelined transaction) are bounded
    like a one-statement commit: the reply is taken as lost, never awaited for ever."""
    from svit.store.engine import StorageEngine

    def group(engine: PostgreSQLEngine) -> Any:
        parts = []
        for name in ("b", "c"):
            part = engine.batch()
            key = keys.lease_key(f"svit://local/pg/{name}")
            part.expect(CF_DEFAULT, key, None)
            part.put(CF_DEFAULT, key, b"1")
            parts.append(part)
        return StorageEngine._merge(parts)

    raised, ended = _stopped_commit(postgresql_url, group)
    assert ended, "the group commit waited for a server process that does not answer"
    assert len(raised) == 1 and isinstance(raised[0], PersistenceUnavailable)
    assert "could not be ended" in str(raised[0])
    assert _stored_leases(postgresql_url) == 1  # the first write only


def test_the_first_commit_of_a_new_shape_whose_server_process_stops_answering_fails_closed(
        postgresql_url: str) -> None:
    """A commit of a shape the connection has not prepared yet prepares it first: that
    round trip is bounded by the same wait as the commit itself."""
    def new_shape(engine: PostgreSQLEngine) -> Any:
        batch = engine.batch()
        for name in ("d", "e"):
            batch.put(CF_DEFAULT, keys.lease_key(f"svit://local/pg/{name}"), b"1")
        return batch

    raised, ended = _stopped_commit(postgresql_url, new_shape)
    assert ended, "preparing the commit waited for a server process that does not answer"
    assert len(raised) == 1 and isinstance(raised[0], PersistenceUnavailable)
    assert "could not be ended" in str(raised[0])
    assert _stored_leases(postgresql_url) == 1


@pytest.mark.parametrize("secret", ["12?hunter2-secret", "12#hunter2-secret"])
def test_the_location_of_a_url_whose_password_holds_a_delimiter_shows_none_of_it(secret: str) -> None:
    """libpq takes everything up to the first ``@`` (before any ``/``) as the user and
    password, ``?`` and ``#`` included: so does the location shown in errors."""
    from psycopg.conninfo import conninfo_to_dict

    url = f"postgresql://svit:{secret}@db.example:6543/svit?sslmode=require"
    assert conninfo_to_dict(url)["password"] == secret  # what the server is sent
    assert location(url) == "postgresql://svit@db.example:6543/svit?sslmode=require"
