"""Fixtures and fakes shared by more than one test file.

Fixtures arrive by name; the plain helpers are imported (``from tests.conftest import
with_trailer``), which is well defined because ``tests`` is a package.
"""

from __future__ import annotations

import gc
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import blake3
import pytest
import rocksdict

from svit.lisp.budget import Budget
from svit.lisp.context import Context, LispLimits, enter, leave
from svit.snapshot import MAGIC
from svit.store import ProcessStore, keys
from svit.store.postgres import table_name
from svit.store.store import is_database_url
from tests.loop.fake_openai import FakeOpenAI
from tests.store import pg_cluster

__all__ = ["ENGINES", "location_of", "make_files", "raw_db", "reopen", "rewrite_raw", "wipe_location", "with_trailer"]


# ---------------------------------------------------------------------------- fixtures


ENGINES = ["rocksdb", "postgresql"]


@pytest.fixture(scope="session")
def postgresql_server() -> Iterator[str]:
    """The URL of a PostgreSQL server for this test session: ``SVIT_TEST_POSTGRESQL_URL``
    if set, else a throwaway cluster (initdb into a temporary directory, 127.0.0.1 on a
    free port) stopped at the end. Without PostgreSQL the tests that need it skip, unless
    ``SVIT_REQUIRE_POSTGRESQL=1`` (CI), where they fail."""
    given = os.environ.get("SVIT_TEST_POSTGRESQL_URL")
    if given:
        yield given
        return
    required = os.environ.get("SVIT_REQUIRE_POSTGRESQL") == "1"
    if pg_cluster.binaries() is None:
        message = "PostgreSQL binaries (initdb, pg_ctl) not found; set SVIT_TEST_POSTGRESQL_URL"
        if required:
            pytest.fail(message)
        pytest.skip(message)
    try:
        cluster = pg_cluster.Cluster.start()
    except Exception as exc:
        if required:
            pytest.fail(f"cannot start PostgreSQL: {exc}")
        pytest.skip(f"cannot start PostgreSQL: {exc}")
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture
def postgresql_url(postgresql_server: str) -> Iterator[str]:
    """A database of this test's own: a fresh schema on the session's server (dropped after)."""
    schema, url = pg_cluster.create_schema(postgresql_server)
    yield url
    pg_cluster.drop_schema(postgresql_server, schema)


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    """The storage engine the ``store`` fixture opens: each test using it runs on both."""
    return str(request.param)


@pytest.fixture
def store_location(engine_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where this test's store lives: ``tmp_path/store`` or its own PostgreSQL schema."""
    if engine_kind == "postgresql":
        return str(request.getfixturevalue("postgresql_url"))
    return str(tmp_path / "store")


@pytest.fixture
def store(store_location: str) -> Iterator[ProcessStore]:
    """An open process store (RocksDB in ``tmp_path/store``, or a PostgreSQL schema of its
    own), closed after the test (closing twice is harmless)."""
    opened = ProcessStore.open(store_location)
    yield opened
    opened.close()


@pytest.fixture
def host_context() -> Iterator[Context]:
    """A run context entered by the test, as a host does before calling Lisp code directly.

    Outside a run there is no context (system code refuses to run); tests that call
    system functions or render results themselves enter this one, under the default
    limits and a budget large enough never to be the point of the test.
    """
    context = Context(LispLimits(), Budget(max_steps=1_000_000_000, max_millis=None))
    previous = enter(context)
    try:
        yield context
    finally:
        leave(previous)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    """A fake OpenAI-compatible server on a local port (``tests/loop/fake_openai.py``)."""
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(autouse=True)
def no_openai_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never pick up a real provider from the environment."""
    for name in ("OPENAI_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


# ---------------------------------------------------------------------------- helpers


def reopen(store: ProcessStore) -> ProcessStore:
    """Close ``store`` and open the same directory or database again (what a restart does)."""
    store.close()
    return ProcessStore.open(location_of(store))


def location_of(store: ProcessStore) -> str:
    """What opens ``store`` again: its directory, or its database URL (with the options
    that select its schema; ``store.path`` shows a PostgreSQL URL without them)."""
    url = getattr(store.engine, "url", None)
    return url if isinstance(url, str) else store.path


def raw_db(path: str) -> rocksdict.Rdict:
    """The database opened directly, bypassing the store (to tamper with it)."""
    families = {name: rocksdict.Options(raw_mode=True) for name in keys.COLUMN_FAMILIES if name != "default"}
    return rocksdict.Rdict(path, rocksdict.Options(raw_mode=True), column_families=families)


def rewrite_raw(location: str, column_family: str, key: bytes, change: Callable[[bytes], bytes | None]) -> None:
    """Rewrite one stored value of a closed store, bypassing it (to tamper with it):
    ``change(old) -> new``, None deletes. ``location`` is a directory or a database URL."""
    if is_database_url(location):
        import psycopg
        from psycopg import sql

        table = sql.Identifier(table_name(column_family))
        with psycopg.connect(location, autocommit=True) as conn:
            row = conn.execute(sql.SQL("SELECT value FROM {} WHERE key = %s").format(table), [key]).fetchone()
            assert row is not None, key
            old = bytes(row[0])
            new = change(old)
            if new is None:
                conn.execute(sql.SQL("DELETE FROM {} WHERE key = %s").format(table), [key])
            else:
                assert new != old
                conn.execute(sql.SQL("UPDATE {} SET value = %s WHERE key = %s").format(table), [new, key])
        return
    db = raw_db(location)
    cf = db if column_family == "default" else db.get_column_family(column_family)
    old_value = cf.get(key)
    assert old_value is not None, key
    new_value = change(old_value)
    if new_value is None:
        del cf[key]
    else:
        assert new_value != old_value
        cf[key] = new_value
    del cf
    db.close()
    gc.collect()


def wipe_location(location: str) -> None:
    """Destroy a closed store's data: its directory, or every table of its schema."""
    if not is_database_url(location):
        shutil.rmtree(location)
        return
    import psycopg

    with psycopg.connect(location, autocommit=True) as conn:
        names = [row[0] for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_name LIKE 'svit\\_%'").fetchall()]
        for name in names:
            conn.execute(f'DROP TABLE "{name}"')


def with_trailer(body: bytes) -> bytes:
    """Snapshot ``body`` sealed with a freshly computed trailer (what a forger can always do)."""
    return body + MAGIC + len(body).to_bytes(8, "big") + blake3.blake3(body).digest()


def make_files(root: Path) -> None:
    """A small folder to mount: one text file at the top and one in a subdirectory."""
    (root / "greeting.txt").write_text("hello\n")
    (root / "notes").mkdir()
    (root / "notes" / "checklist.md").write_text("# todo\njust check\n")
