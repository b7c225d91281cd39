"""Storage failures are clear Svit errors that name the problem, never a host path or raw
RocksDB or OS text: a store held by another process, a read-only or full device, damage."""

# RocksDB only: the store directory's lock, files, permissions and RocksDB's error texts (PostgreSQL's: test_postgres.py).

from __future__ import annotations

import errno
import glob
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from svit import Process
from svit.errors import InvalidPersistence, PersistenceUnavailable
from svit.store import ProcessStore
from svit.store import rocksdb as rocksdb_engine
from svit.store import store as store_module
from svit.store.archive import MemoryArchive
from svit.store.fsshim import FileSystem
from tests.bounds import unchanged

ADDR = "svit://local/errors/counter"
COUNTER = '(define (main input) (let ((n (+ (read "/memory/n") 1))) (do (write "/memory/n" n) n)))'
HOLDER = Path(__file__).with_name("hold_store.py")
ROOT = str(Path(__file__).resolve().parents[2])


def _counter() -> Process:
    return Process.builder(ADDR).memory("n", 0).library("count", COUNTER).build()


def _open_refused(path: Path) -> PersistenceUnavailable:
    with pytest.raises(PersistenceUnavailable) as caught:
        ProcessStore.open(path)
    _no_host_text(caught.value, path)
    return caught.value


def _no_host_text(error: BaseException, path: Path) -> None:
    text = str(error)
    assert str(path) not in text and os.path.realpath(path) not in text and "/tmp" not in text, text
    for raw in ("IO error", "Corruption", "Errno", "While lock file", "Exception:"):
        assert raw not in text, text


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "store"
    ProcessStore.open(path).close()
    env = dict(os.environ, PYTHONPATH=ROOT)
    holder = subprocess.Popen([sys.executable, str(HOLDER), str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"ready"
        yield path
    finally:
        holder.stdin.close()  # type: ignore[union-attr]
        holder.wait(timeout=30)


def test_a_store_held_by_another_process_is_named_as_in_use(held: Path) -> None:
    error = _open_refused(held)
    assert error.code == "persistence_unavailable" and error.reason == "in_use"
    assert "store is in use by another process" in error.message


def test_the_store_opens_once_the_other_process_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "store"
    first = ProcessStore.open(path)
    error = _open_refused(path)
    assert error.reason == "in_use"
    first.close()
    ProcessStore.open(path).close()


def _damage(path: Path, pattern: str, change: Any) -> None:
    for name in glob.glob(str(path / pattern)):
        data = bytearray(Path(name).read_bytes())
        change(data)
        Path(name).write_bytes(bytes(data))


def _flip_tail(data: bytearray) -> None:
    for i in range(10, len(data)):
        data[i] ^= 0xFF


def test_a_damaged_store_is_named_as_damaged(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with ProcessStore.open(path) as store:
        store.create(_counter()).exec("/lib/count")
    _damage(path, "CURRENT", lambda d: d.__setitem__(slice(None), b"garbage\n"))
    error = _open_refused(path)
    assert error.reason == "damaged" and "store is damaged" in error.message


def test_a_damaged_manifest_is_refused_by_the_store_before_rocksdb_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with ProcessStore.open(path) as store:
        store.create(_counter()).exec("/lib/count")
    _damage(path, "MANIFEST-*", _flip_tail)
    with pytest.raises(InvalidPersistence) as caught:
        ProcessStore.open(path)
    _no_host_text(caught.value, path)
    assert caught.value.code == "invalid_persistence" and "store is damaged" in caught.value.message


def test_a_store_path_that_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "store"
    path.write_text("not a store")
    error = _open_refused(path)
    assert error.reason == "not_a_directory" and "store path is not a directory" in error.message


@pytest.mark.parametrize(
    ("raised", "reason", "text"),
    [
        (Exception("IO error: While open a file for appending: {path}/000010.log: Read-only file system"), "read_only", "store is read-only"),
        (Exception("IO error: While opening a file for sequentially reading: {path}/CURRENT: Permission denied"), "read_only", "store is read-only"),
        (Exception("IO error: No space left on device: While appending to file: {path}/000010.log"), "full", "no space left"),
        (Exception("IO error: While fsync: {path}/000010.log: Input/output error"), "io_error", "input/output error"),
        (Exception("Invalid argument: {path}: does not exist (create_if_missing is false)"), "unknown", "Exception"),
    ],
)
def test_rocksdb_open_failures_are_classified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: Exception, reason: str, text: str) -> None:
    path = tmp_path / "store"
    message = str(raised).format(path=path)

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise type(raised)(message)

    monkeypatch.setattr(rocksdb_engine.rocksdict, "Rdict", failing)
    error = _open_refused(path)
    assert error.reason == reason and text in error.message


def test_a_directory_that_cannot_be_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "store"

    def refused(target: Any, *args: Any, **kwargs: Any) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(target))

    monkeypatch.setattr(store_module.os, "makedirs", refused)
    error = _open_refused(path)
    assert error.reason == "read_only" and "permission denied" in error.message


class _DamagedReads:
    """A column family whose reads fail the way RocksDB reports a bad block."""

    def __init__(self, inner: Any, path: Path) -> None:
        self.inner, self.path = inner, path

    def get(self, key: bytes) -> Any:
        raise Exception(f"Corruption: block checksum mismatch in {self.path}/000009.sst offset 69 size 897")

    def iter(self) -> Any:
        raise Exception(f"IO error: While pread offset 0 len 4096: {self.path}/000009.sst: Input/output error")


def test_read_and_scan_failures_after_open_name_the_problem(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = ProcessStore.open(path)
    try:
        durable = store.create(_counter())
        column_families = store.engine._column_families
        for name in list(column_families):
            column_families[name] = _DamagedReads(column_families[name], path)
        with unchanged(durable.process):
            with pytest.raises(PersistenceUnavailable) as read:
                store.resume(ADDR)
        _no_host_text(read.value, path)
        assert read.value.reason == "damaged" and "store is damaged" in read.value.message
        with pytest.raises(PersistenceUnavailable) as scan:
            store.addresses()
        _no_host_text(scan.value, path)
        assert scan.value.reason == "io_error"
    finally:
        store.close()


def test_a_failed_synced_write_names_the_problem(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = ProcessStore.open(path)
    try:
        durable = store.create(_counter())

        def full(batch: Any) -> None:
            raise Exception(f"IO error: No space left on device: While appending to file: {path}/000012.log")

        store.engine.writer = full
        with unchanged(durable.process):
            with pytest.raises(PersistenceUnavailable) as caught:
                durable.exec("/lib/count")
        _no_host_text(caught.value, path)
        assert caught.value.reason == "full" and "terminal" in caught.value.message
        with pytest.raises(PersistenceUnavailable) as later:
            durable.exec("/lib/count")
        _no_host_text(later.value, path)
        assert later.value.reason == "terminal"
    finally:
        store.close()


def test_closed_store_has_a_reason(tmp_path: Path) -> None:
    store = ProcessStore.open(tmp_path / "store")
    store.close()
    with pytest.raises(PersistenceUnavailable) as caught:
        store.addresses()
    assert caught.value.reason == "closed"


class _FullDisk(FileSystem):
    def write(self, fd: int, data: bytes, path: str = "") -> None:
        raise OSError(errno.ENOSPC, "No space left on device", path)


def test_archive_export_failures_carry_no_host_path(tmp_path: Path) -> None:
    archive_dir = tmp_path / "archive"
    with ProcessStore.open(tmp_path / "store") as store:
        store.create(_counter())
        result = MemoryArchive(archive_dir, fs=_FullDisk()).export(store)
    assert result.outcome == "failed"
    assert "no space left on the device" in result.message
    assert str(tmp_path) not in result.message and "Errno" not in result.message
