"""The storage engine interface: atomic synced batches, ordered scans, fail-stop; its boundaries."""

from __future__ import annotations

import ast
from pathlib import Path

import cbor2
import pytest

from svit import Process
from svit.errors import InvalidPersistence, PersistenceUnavailable
from svit.store import ProcessStore, keys, records
from svit.store.engine import StorageEngine, WriteBatch
from svit.store.faults import FailingWrites
from svit.store.keys import CF_DEFAULT, CF_INDEX, CF_RECORD, REBUILDABLE
from svit.store.postgres import PostgreSQLEngine
from svit.store.rocksdb import RocksDBEngine
from svit.store.store import STORE_FORMAT, is_database_url

STORE_PACKAGE = Path(__file__).resolve().parents[2] / "svit" / "store"
ADDR = "svit://local/test/engine"


def open_engine(location: str) -> StorageEngine:
    """The engine at ``location`` (a directory, or a PostgreSQL URL), opened directly."""
    if is_database_url(location):
        return PostgreSQLEngine.open(location)
    return RocksDBEngine.open(location)


@pytest.fixture
def engine(store_location):
    opened = open_engine(store_location)
    yield opened
    opened.close()


def _event_key(n: int) -> bytes:
    return keys.thread_event_key(ADDR, "s", n)


def test_a_batch_is_applied_whole_and_read_back_in_key_order(engine):
    assert isinstance(engine, StorageEngine)
    batch = engine.batch()
    for n in (3, 1, 2):
        batch.put(CF_RECORD, _event_key(n), f"v{n}".encode())
    batch.put(CF_RECORD, keys.head_key(ADDR), b"head")
    assert len(batch) == 4 and batch.size > 0
    engine.write(batch)
    prefix = keys.thread_session_prefix(ADDR, "s")
    assert [value for _, value in engine.scan(CF_RECORD, prefix)] == [b"v1", b"v2", b"v3"]
    assert [value for _, value in engine.scan(CF_RECORD, prefix, prefix + keys.u64(2))] == [b"v2", b"v3"]
    assert engine.last_key(CF_RECORD, prefix) == _event_key(3)
    assert engine.last_key(CF_RECORD, keys.thread_session_prefix(ADDR, "other")) is None
    assert engine.get(CF_RECORD, keys.head_key(ADDR)) == b"head"
    assert engine.get(CF_RECORD, keys.head_key(ADDR + "x")) is None
    before = engine.sequence()
    delete = engine.batch()
    delete.delete(CF_RECORD, _event_key(2))
    engine.write(delete)
    assert engine.sequence() > before
    assert [value for _, value in engine.scan(CF_RECORD, prefix)] == [b"v1", b"v3"]


def test_a_batch_refuses_undeclared_keys_and_classes_it_may_not_touch(engine):
    batch = engine.batch()
    with pytest.raises(InvalidPersistence, match="unregistered key class"):
        batch.put(CF_INDEX, b"zz/unknown", b"")
    rebuild_only = WriteBatch(allowed=(REBUILDABLE,))
    with pytest.raises(InvalidPersistence, match="may not write irreplaceable"):
        rebuild_only.put(CF_RECORD, keys.head_key(ADDR), b"x")
    rebuild_only.put(CF_INDEX, keys.child_key(ADDR, ADDR + "/c"), b"")  # control: a derived key is fine
    assert len(batch) == 0 and len(rebuild_only) == 1


@pytest.mark.parametrize("landed", [False, True])
def test_a_failed_synced_write_makes_the_engine_terminal(engine, landed):
    batch = engine.batch()
    batch.put(CF_RECORD, _event_key(1), b"one")
    batch.put(CF_RECORD, _event_key(2), b"two")
    with FailingWrites(engine, 1, apply=landed) as faults:
        with pytest.raises(PersistenceUnavailable) as caught:
            engine.write(batch)
    assert faults.failed == 1 and "the store is terminal until reopened" in caught.value.message
    assert engine.terminal
    for operation in (lambda: engine.write(engine.batch()), engine.check):
        with pytest.raises(PersistenceUnavailable) as later:
            operation()
        assert later.value.reason == "terminal"
    # all or nothing: either both keys landed (a lost acknowledgement) or neither did
    found = [engine.get(CF_RECORD, _event_key(n)) for n in (1, 2)]
    assert found == ([b"one", b"two"] if landed else [None, None])


def test_a_healthy_write_after_the_fault_block_is_a_control(engine):
    with FailingWrites(engine, 2):
        first = engine.batch()
        first.put(CF_RECORD, _event_key(1), b"one")
        engine.write(first)  # the first call passes
    later = engine.batch()
    later.put(CF_RECORD, _event_key(2), b"two")
    engine.write(later)  # the block ended before its second call: nothing failed
    assert not engine.terminal and engine.get(CF_RECORD, _event_key(2)) == b"two"


def test_a_closed_engine_refuses_everything(store_location):
    opened = open_engine(store_location)
    opened.close()
    opened.close()  # idempotent
    assert opened.closed
    with pytest.raises(PersistenceUnavailable) as caught:
        opened.write(opened.batch())
    assert caught.value.reason == "closed"


def test_a_store_runs_over_an_engine_it_is_given(store_location):
    store = ProcessStore.over(open_engine(store_location))
    h = store.create(Process.builder(ADDR).memory("n", 1).build())
    h.write("/memory/n", 2)
    assert store.engine.get(CF_DEFAULT, keys.FORMAT_KEY) == STORE_FORMAT
    store.close()
    again = ProcessStore.open(store_location)
    assert again.resume(ADDR).read("/memory/n") == 2
    again.close()


# ---------------------------------------------------------------------- old formats are refused


def test_a_store_of_the_previous_format_is_refused_naming_it(store_location):
    engine = open_engine(store_location)
    batch = engine.batch()
    batch.put(CF_DEFAULT, keys.FORMAT_KEY, b"svit-store@1")
    engine.write(batch)
    engine.close()
    with pytest.raises(InvalidPersistence) as caught:
        ProcessStore.open(store_location)
    assert "'svit-store@1'" in caught.value.message and STORE_FORMAT.decode() in caught.value.message
    # the refusal released the lock (RocksDB) or its connections: the store opens again
    open_engine(store_location).close()


def _format_one_head(address: str) -> bytes:
    """A head record as format 1 wrote it: fields in declared order, hash field last."""
    import blake3

    body = {"head_format": "svit-head@1", "address": address, "base_hash": "a" * 64, "position": None,
            "hash": "b" * 64, "process_version": 0, "root_hash": "c" * 64}
    digest = blake3.blake3(cbor2.dumps(body)).hexdigest()
    return cbor2.dumps({**body, "head_check": digest})


def test_a_record_of_the_previous_format_is_refused_naming_it():
    with pytest.raises(InvalidPersistence) as caught:
        records.decode_head(_format_one_head(ADDR), ADDR)
    assert "unsupported record format 'svit-head@1'" in caught.value.message


# ---------------------------------------------------------------------- boundaries


def _modules() -> dict[str, ast.Module]:
    return {path.name: ast.parse(path.read_text()) for path in sorted(STORE_PACKAGE.glob("*.py"))}


def _imported(module: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
    return names


def test_only_the_rocksdb_engine_imports_rocksdict():
    users = sorted(name for name, module in _modules().items() if "rocksdict" in _imported(module))
    assert users == ["rocksdb.py"]


def test_only_the_postgresql_engine_imports_psycopg():
    users = sorted(name for name, module in _modules().items()
                   if any(imported.split(".")[0] in ("psycopg", "psycopg_pool") for imported in _imported(module)))
    assert users == ["postgres.py"]


def test_the_store_does_not_import_the_loop():
    for name, module in _modules().items():
        assert not any("loop" in imported.split(".") for imported in _imported(module)), name


def test_no_store_module_reaches_into_the_store_or_engine_privately():
    """store.py holds the facade and its handle class, which share the store's internals."""
    for name, module in _modules().items():
        if name == "store.py":
            continue
        for node in ast.walk(module):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute | ast.Name):
                owner = node.value.attr if isinstance(node.value, ast.Attribute) else node.value.id
                if owner in ("store", "engine", "_store", "_engine") and node.attr.startswith("_"):
                    raise AssertionError(f"{name}: {owner}.{node.attr}")
