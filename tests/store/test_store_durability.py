"""The store's own durability: a new directory survives a power loss, a full disk or a failing
device is named as such at every step (writes, close, a restore, reading the format marker),
and a damaged MANIFEST ends the open quickly with ``invalid_persistence`` instead of a hang."""

# RocksDB only: directory fsyncs, MANIFEST checks, the child-process open and RocksDB's error texts.

from __future__ import annotations

import errno
import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from svit import Process
from svit.errors import PersistenceUnavailable
from svit.store import ProcessStore, keys, rocksdb_files
from svit.store import rocksdb as rocksdb_engine
from svit.store.archive import ArchiveRestoreFailed, MemoryArchive, open_store_with_archive
from svit.store.faults import FailingClose
from svit.store.fsshim import FaultyFileSystem
from svit.store.rocksdb import RocksDBEngine

ADDR = "svit://local/durability/counter"
COUNTER = '(define (main input) (let ((n (+ (read "/memory/n") 1))) (do (write "/memory/n" n) n)))'
OPENER = Path(__file__).with_name("open_store.py")
ROOT = str(Path(__file__).resolve().parents[2])
HEADER = struct.Struct("<IHB")


def _counter() -> Process:
    return Process.builder(ADDR).memory("n", 0).library("count", COUNTER).build()


def _store_with_commits(path: Path, commits: int = 2) -> None:
    with ProcessStore.open(path) as store:
        durable = store.create(_counter())
        for _ in range(commits):
            durable.exec("/lib/count")


def _no_host_text(error: BaseException, path: Path) -> None:
    text = str(error) + "".join(getattr(error, "__notes__", []))
    assert str(path) not in text and "/tmp" not in text, text
    for raw in ("IO error", "Corruption", "Errno", "While ", "Exception:"):
        assert raw not in text, text


# ---------------------------------------------------------------------- 1. a new directory is durable
def _record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every os.fsync from Python, as the path its descriptor names (Linux /proc)."""
    synced: list[str] = []
    real = os.fsync

    def recording(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return synced


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name a descriptor")
def test_a_new_store_directory_and_its_new_parents_are_synced_into_their_parents_before_open_returns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a" / "b" / "store"
    synced = _record_fsyncs(monkeypatch)
    store = ProcessStore.open(path)
    during_open = list(synced)
    try:
        store.create(_counter()).exec("/lib/count")
    finally:
        store.close()
    real = os.path.realpath
    # each new directory's entry is in its parent: every parent up to the first that existed
    for directory in (tmp_path, tmp_path / "a", tmp_path / "a" / "b", path):
        assert real(directory) in during_open, (directory, during_open)
    assert during_open.index(real(tmp_path)) < during_open.index(real(tmp_path / "a" / "b"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name a descriptor")
def test_reopening_an_existing_store_creates_and_syncs_no_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "store"
    ProcessStore.open(path).close()
    synced = _record_fsyncs(monkeypatch)
    ProcessStore.open(path).close()
    assert os.path.realpath(tmp_path) not in synced


def test_the_directory_steps_go_through_the_filesystem_layer(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    path = tmp_path / "new" / "store"
    RocksDBEngine.open(path, fs=fs).close()
    steps = [(name, os.path.relpath(target, tmp_path)) for name, target in fs.calls]
    assert steps == [("mkdir", "new/store"), ("dir_fsync", "."), ("dir_fsync", "new"), ("dir_fsync", "new/store")]


def test_a_failed_directory_sync_fails_the_open_before_rocksdb_writes_anything(tmp_path: Path) -> None:
    path = tmp_path / "store"
    fs = FaultyFileSystem(fail={"dir_fsync": 1})
    with pytest.raises(PersistenceUnavailable) as caught:
        RocksDBEngine.open(path, fs=fs)
    _no_host_text(caught.value, tmp_path)
    assert fs.failed == ["dir_fsync"] and "cannot open store" in caught.value.message
    assert not (path / "CURRENT").exists()  # RocksDB was never handed the directory
    ProcessStore.open(path).close()


# ---------------------------------------------------------------------- 2. a full disk, named at every step
NO_SPACE_WAL = "IO error: No space left on device: While appending to file: {path}/000012.log: No space left on device"
NO_SPACE_SST = "IO error: No space left on device: While appending to file: {path}/000013.sst: No space left on device"

ROCKSDB_WRITE_FAILURES = [
    (NO_SPACE_WAL, "full", "no space left on the device"),
    ("IO error: No space left on device: While fsync: {path}/000012.log: No space left on device", "full", "the disk or its quota is full"),
    ("IO error: While appending to file: {path}/000012.log: Disk quota exceeded", "full", "no space left on the device"),
    ("IO error: While fsync: {path}/000012.log: Input/output error", "io_error", "input/output error"),
    ("IO error: No such file or directory: While open a file for appending: {path}/000014.log: No such file or directory",
     "io_error", "a store file or directory is missing"),
    ("IO error: Stale file handle", "io_error", "ESTALE: stale file handle"),
    ("IO error: While appending to file: {path}/000012.log: Bad file descriptor", "io_error", "EBADF: bad file descriptor"),
    ("Corruption: block checksum mismatch: stored = 1, computed = 2 in {path}/000009.sst", "damaged", "store is damaged"),
    ("Operation aborted: ", "unknown", "RocksDB status 'operation aborted'"),
]


@pytest.mark.parametrize(("text", "reason", "says"), ROCKSDB_WRITE_FAILURES)
def test_a_failed_synced_write_says_what_failed(tmp_path: Path, text: str, reason: str, says: str) -> None:
    path = tmp_path / "store"
    store = ProcessStore.open(path)
    try:
        durable = store.create(_counter())

        def failing(batch: Any) -> None:
            raise Exception(text.format(path=path))

        store.engine.writer = failing
        with pytest.raises(PersistenceUnavailable) as caught:
            durable.exec("/lib/count")
        _no_host_text(caught.value, path)
        assert caught.value.reason == reason and says in caught.value.message, caught.value.message
        assert "synced write failed" in caught.value.message and store.terminal
    finally:
        store.close()


def _flush_fails_on_close(store: ProcessStore, text: str) -> FailingClose:
    """From now on, closing ``store`` releases it and then raises RocksDB's ``text``."""
    return FailingClose(store, Exception(text.format(path=store.path))).__enter__()


def test_close_on_a_full_disk_raises_a_svit_error_and_still_closes(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = ProcessStore.open(path)
    store.create(_counter()).exec("/lib/count")
    failing = _flush_fails_on_close(store, NO_SPACE_SST + "; " + NO_SPACE_WAL)
    with pytest.raises(PersistenceUnavailable) as caught:
        store.close()
    _no_host_text(caught.value, path)
    assert caught.value.reason == "full" and "no space left on the device" in caught.value.message
    assert "every acknowledged commit is in the synced log" in caught.value.message
    assert failing.released == 1 and store.closed
    with ProcessStore.open(path) as again:  # the lock is free, nothing acknowledged is lost
        assert again.resume(ADDR).process.read("/memory/n") == 1


def test_close_of_a_terminal_store_does_not_report_the_failure_twice(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = ProcessStore.open(path)
    durable = store.create(_counter())

    def full(batch: Any) -> None:
        raise Exception(NO_SPACE_WAL.format(path=path))

    store.engine.writer = full
    with pytest.raises(PersistenceUnavailable):
        durable.exec("/lib/count")
    failing = _flush_fails_on_close(store, NO_SPACE_SST)
    store.close()
    assert failing.released == 1 and store.closed
    ProcessStore.open(path).close()


def test_a_failing_close_does_not_hide_the_error_of_the_with_block(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with pytest.raises(KeyError) as caught:
        with ProcessStore.open(path) as store:
            _flush_fails_on_close(store, NO_SPACE_SST)
            raise KeyError("the block's own failure")
    notes = getattr(caught.value, "__notes__", [])
    assert len(notes) == 1 and "closing the store also failed" in notes[0] and "no space left" in notes[0]
    assert str(path) not in notes[0]


def test_a_restore_that_fills_the_disk_fails_with_svit_errors_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = MemoryArchive(tmp_path / "archive")
    with ProcessStore.open(tmp_path / "old") as old:
        old.create(_counter()).exec("/lib/count")
        assert archive.export(old).outcome == "written"
    path = tmp_path / "new"
    real_open = ProcessStore.open
    opened: list[ProcessStore] = []

    def open_on_a_full_disk(target: Any, **options: Any) -> ProcessStore:
        store = real_open(target, **options)
        write = store.engine.writer
        writes = []

        def full(batch: Any) -> None:
            writes.append(batch)
            if len(writes) == 1:
                return write(batch)  # the store id fits; the restore then fills the disk
            raise Exception(NO_SPACE_WAL.format(path=path))

        store.engine.writer = full
        _flush_fails_on_close(store, NO_SPACE_SST)
        opened.append(store)
        return store

    monkeypatch.setattr(ProcessStore, "open", staticmethod(open_on_a_full_disk))
    with pytest.raises(ArchiveRestoreFailed) as caught:
        open_store_with_archive(path, archive, restore_mode="auto", start=False)
    _no_host_text(caught.value, path)
    assert "no space left on the device" in caught.value.message
    assert opened and opened[0].closed
    monkeypatch.undo()
    ProcessStore.open(path).close()


# ---------------------------------------------------------------------- 3. the format marker read
def _marker_read_fails(monkeypatch: pytest.MonkeyPatch, failure: Callable[[], BaseException]) -> None:
    real_get = RocksDBEngine.get

    def get(self: RocksDBEngine, space: str, key: bytes) -> bytes | None:
        if key == keys.FORMAT_KEY:
            raise failure()
        return real_get(self, space, key)

    monkeypatch.setattr(RocksDBEngine, "get", get)


def test_an_io_error_reading_the_format_marker_is_a_svit_error_and_releases_the_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "store"
    _store_with_commits(path)
    _marker_read_fails(monkeypatch, lambda: OSError(errno.EIO, "Input/output error", str(path / "000009.sst")))
    with pytest.raises(PersistenceUnavailable) as caught:
        ProcessStore.open(path)
    _no_host_text(caught.value, path)
    assert caught.value.reason == "io_error" and "cannot open store" in caught.value.message
    assert "input/output error" in caught.value.message
    monkeypatch.undo()
    with ProcessStore.open(path) as store:
        assert store.resume(ADDR).process.read("/memory/n") == 2


def test_a_marker_read_error_is_not_masked_by_a_failing_close(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "store"
    _store_with_commits(path)
    read_error = "IO error: While pread offset 0 len 4096: {path}/000009.sst: Input/output error"
    _marker_read_fails(monkeypatch, lambda: PersistenceUnavailable("read failed: the device reported an input/output error",
                                                                   reason="io_error"))
    real_init = RocksDBEngine.__init__

    def init(self: RocksDBEngine, where: str, db: Any) -> None:
        real_init(self, where, db)
        FailingClose(self, Exception(read_error.format(path=path) + "; " + NO_SPACE_WAL.format(path=path))).__enter__()

    monkeypatch.setattr(RocksDBEngine, "__init__", init)
    with pytest.raises(PersistenceUnavailable) as caught:
        ProcessStore.open(path)
    _no_host_text(caught.value, path)
    assert caught.value.reason == "io_error" and "read failed" in caught.value.message
    monkeypatch.undo()
    ProcessStore.open(path).close()


def test_a_failure_setting_up_the_engine_is_not_masked_by_a_failing_close(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "store"
    _store_with_commits(path)
    real_rdict = rocksdb_engine.rocksdict.Rdict

    class Failing:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.db = real_rdict(*args, **kwargs)

        def get_column_family_handle(self, name: str) -> Any:
            raise Exception(f"IO error: While open a file for random read: {path}/000011.sst: Input/output error")

        def close(self) -> None:
            self.db.close()
            raise Exception(NO_SPACE_WAL.format(path=path))

    monkeypatch.setattr(rocksdb_engine.rocksdict, "Rdict", Failing)
    with pytest.raises(PersistenceUnavailable) as caught:
        ProcessStore.open(path)
    _no_host_text(caught.value, path)
    assert caught.value.reason == "io_error" and "input/output error" in caught.value.message
    monkeypatch.undo()
    ProcessStore.open(path).close()


# ---------------------------------------------------------------------- 4. a damaged MANIFEST, bounded
def _manifest(path: Path) -> Path:
    name = rocksdb_files.current_manifest(str(path))
    assert name is not None
    return path / name


def _record_offsets(data: bytes) -> list[int]:
    offsets, offset = [], 0
    while offset + HEADER.size <= len(data):
        left = rocksdb_files.BLOCK_SIZE - offset % rocksdb_files.BLOCK_SIZE
        if left < HEADER.size:
            offset += left
            continue
        offsets.append(offset)
        offset += HEADER.size + HEADER.unpack_from(data, offset)[1]
    return offsets


def _open_in_subprocess(paths: list[Path], *options: str, timeout: float = 60) -> list[dict[str, Any]]:
    env = dict(os.environ, PYTHONPATH=ROOT)
    command = [sys.executable, str(OPENER), *options, *map(str, paths)]
    try:
        done = subprocess.run(command, capture_output=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"opening did not end within {timeout} s")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return [json.loads(line) for line in done.stdout.decode().splitlines()]


@pytest.fixture(scope="module")
def clean_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("manifest") / "clean"
    _store_with_commits(path, commits=3)
    return path


def _copy_with(clean: Path, target: Path, change: Callable[[bytearray], None]) -> Path:
    shutil.copytree(clean, target)
    manifest = _manifest(target)
    data = bytearray(manifest.read_bytes())
    change(data)
    manifest.write_bytes(bytes(data))
    return target


def test_flipped_manifest_record_types_end_the_open_quickly_with_invalid_persistence(clean_store: Path, tmp_path: Path) -> None:
    data = _manifest(clean_store).read_bytes()
    offsets = _record_offsets(data)
    assert len(offsets) >= 6
    # type 1 -> 5 (a "recyclable" record, which skips RocksDB's checksum) made RocksDB
    # spin; the other flips of the same byte are corruption RocksDB reported already
    cases = [(offsets[i], bit) for i in (1, 2, len(offsets) // 2, len(offsets) - 1) for bit in (2,)]
    cases += [(offsets[3], bit) for bit in (0, 1, 3, 7)]
    copies = []
    for n, (offset, bit) in enumerate(cases):
        def flip(d: bytearray, at: int = offset + 6, mask: int = 1 << bit) -> None:
            d[at] ^= mask
        copies.append(_copy_with(clean_store, tmp_path / f"flip{n}", flip))
    started = time.monotonic()
    results = _open_in_subprocess([*copies, clean_store])
    assert time.monotonic() - started < 30
    for case, result in zip(cases, results[:-1]):
        assert result["outcome"] == "refused" and result["code"] == "invalid_persistence", (case, result)
        assert "store is damaged" in result["message"] and "MANIFEST" in result["message"], result
        assert str(tmp_path) not in result["message"]
        assert result["seconds"] < 5, result
    assert results[-1] == {**results[-1], "outcome": "opened", "addresses": [ADDR]}


def _reseal(d: bytearray, offset: int, kind: int) -> None:
    """Give the record at ``offset`` type ``kind`` and a checksum that matches it."""
    _, length, _ = HEADER.unpack_from(d, offset)
    body = bytes([kind]) + bytes(d[offset + HEADER.size : offset + HEADER.size + length])
    HEADER.pack_into(d, offset, rocksdb_files.mask_crc(rocksdb_files.crc32c(body)), length, kind)


def test_a_resealed_recyclable_record_is_refused_for_its_type(clean_store: Path, tmp_path: Path) -> None:
    offset = _record_offsets(_manifest(clean_store).read_bytes())[2]
    copy = _copy_with(clean_store, tmp_path / "resealed", lambda d: _reseal(d, offset, 5))
    (result,) = _open_in_subprocess([copy])  # RocksDB itself would spin on this file
    assert result["outcome"] == "refused" and result["code"] == "invalid_persistence", result
    assert f"at byte {offset}: record type 5 is not one RocksDB writes there" in result["message"]
    assert str(tmp_path) not in result["message"]


def test_the_deadline_alone_bounds_an_open_that_spins(clean_store: Path, tmp_path: Path) -> None:
    offset = _record_offsets(_manifest(clean_store).read_bytes())[2]
    copy = _copy_with(clean_store, tmp_path / "spins", lambda d: d.__setitem__(offset + 6, d[offset + 6] ^ 4))
    started = time.monotonic()
    spun, clean = _open_in_subprocess([copy, clean_store], "--no-manifest-check", "--deadline", "2")
    assert time.monotonic() - started < 30
    assert spun["outcome"] == "refused" and spun["code"] == "invalid_persistence", spun
    assert "store did not open within 2 s" in spun["message"] and 2 <= spun["seconds"] < 10, spun
    assert clean["outcome"] == "opened" and clean["addresses"] == [ADDR]


def test_without_a_deadline_the_store_opens_in_process(clean_store: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(clean_store, copy)
    with ProcessStore.open(copy, open_deadline=None) as store:
        assert store.resume(ADDR).process.read("/memory/n") == 3


def test_a_failure_the_probe_reports_is_classified_without_its_text(clean_store: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(clean_store, copy)
    report = {"error": f"Corruption: Sst file size mismatch: {copy}/000009.sst. Size recorded in manifest 2580, actual size 10",
              "kind": "Exception"}
    monkeypatch.setattr(rocksdb_engine, "_PROBE", f"import json; print(json.dumps({report!r}))")
    with pytest.raises(PersistenceUnavailable) as caught:
        ProcessStore.open(copy)
    _no_host_text(caught.value, tmp_path)
    assert caught.value.reason == "damaged" and "store is damaged" in caught.value.message


def test_a_probe_that_dies_is_a_svit_error(clean_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(clean_store, copy)
    monkeypatch.setattr(rocksdb_engine, "_PROBE", "import os; os._exit(3)")
    with pytest.raises(PersistenceUnavailable) as caught:
        ProcessStore.open(copy)
    assert "the process reading its files failed (exit status 3)" in caught.value.message
    monkeypatch.undo()
    ProcessStore.open(copy).close()  # nothing was held


# ---------------------------------------------------------------------- the log-format check itself
def _log(payloads: list[tuple[int, bytes]]) -> bytes:
    """A log file of records ``(type, payload)``, laid out the way RocksDB writes them: a
    record that does not fit in its block's rest goes on as fragments (first, middle, last)."""
    out = bytearray()

    def physical(kind: int, fragment: bytes) -> None:
        crc = rocksdb_files.mask_crc(rocksdb_files.crc32c(bytes([kind]) + fragment))
        out.extend(HEADER.pack(crc, len(fragment), kind) + fragment)

    for kind, payload in payloads:
        first = True
        while True:
            left = rocksdb_files.BLOCK_SIZE - len(out) % rocksdb_files.BLOCK_SIZE
            if left < HEADER.size:
                out.extend(bytes(left))
                continue
            room = left - HEADER.size
            if len(payload) <= room:
                physical(kind if first else 4, payload)
                break
            physical(2 if first else 3, payload[:room])
            payload, first = payload[room:], False
    return bytes(out)


def _check(tmp_path: Path, data: bytes) -> str | None:
    target = tmp_path / "MANIFEST-000001"
    target.write_bytes(data)
    return rocksdb_files.check_log_file(str(target))


def test_crc32c_matches_the_standard_check_value() -> None:
    assert rocksdb_files.crc32c(b"123456789") == 0xE3069283
    assert rocksdb_files.unmask_crc(rocksdb_files.mask_crc(0x12345678)) == 0x12345678


def test_a_real_manifest_passes_and_every_truncation_of_it_passes(clean_store: Path, tmp_path: Path) -> None:
    data = _manifest(clean_store).read_bytes()
    assert _check(tmp_path, data) is None
    for end in range(0, len(data), 7):  # an interrupted last write is RocksDB's end of the log
        assert _check(tmp_path, data[:end]) is None, end


def test_every_flip_of_a_record_type_bit_in_a_real_manifest_is_caught(clean_store: Path, tmp_path: Path) -> None:
    data = _manifest(clean_store).read_bytes()
    for offset in _record_offsets(data):
        for bit in range(8):
            changed = bytearray(data)
            changed[offset + 6] ^= 1 << bit
            assert _check(tmp_path, bytes(changed)) is not None, (offset, bit)


def test_records_across_blocks_with_padding_pass(tmp_path: Path) -> None:
    records = [(1, bytes([n % 251]) * 700) for n in range(100)]  # > two 32 KiB blocks
    data = _log(records)
    assert len(data) > 2 * rocksdb_files.BLOCK_SIZE
    assert _check(tmp_path, data) is None
    assert _check(tmp_path, data + bytes(3000)) is None  # zeros to the end: never-written space


def test_a_checksum_mismatch_names_the_byte(tmp_path: Path) -> None:
    data = bytearray(_log([(1, b"first"), (1, b"second")]))
    data[HEADER.size + 5 + HEADER.size + 2] ^= 1
    assert _check(tmp_path, bytes(data)) == "RocksDB's MANIFEST-000001 fails verification at byte 12: the record's checksum does not match"


def test_a_zeroed_header_before_later_records_is_caught(tmp_path: Path) -> None:
    first, rest = _log([(1, b"one")]), _log([(1, b"two"), (1, b"three")])
    zeroed = first + bytes(HEADER.size + 3) + rest[HEADER.size + 3 :]
    assert "zeroed record header is followed by more records" in (_check(tmp_path, zeroed) or "")


def test_a_length_flipped_past_the_end_over_later_records_is_caught(tmp_path: Path) -> None:
    data = bytearray(_log([(1, b"one"), (1, b"two" * 10), (1, b"three" * 10)]))
    data[HEADER.size + 3 + 5] ^= 0x40  # high byte of the second record's length
    assert "runs past the end of the file over later records" in (_check(tmp_path, bytes(data)) or "")


def test_a_record_running_past_its_block_is_caught(tmp_path: Path) -> None:
    data = bytearray(_log([(1, b"x" * 1000) for _ in range(40)]))
    HEADER.pack_into(data, 0, 0, 40000, 1)
    assert "runs past its 32 KiB block" in (_check(tmp_path, bytes(data)) or "")
