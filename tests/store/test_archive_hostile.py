"""Memory archive: hostile or stray files in the archive directory, and a stale store's tombstones.

Whatever sits in a generation file's place (a FIFO, a symbolic link to a device, a
sparse file of many gigabytes, a name carrying the last generation number) costs a
bounded read and is passed over like any other file that does not verify; an export
never raises, and a stale copy of the store cannot publish an old removal over a newer
archived incarnation of the address. Every test has its unperturbed control.
"""

# RocksDB only: these tests damage the archive directory and copy store directories.

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

from svit import Process
from svit.store import ProcessStore
from svit.store.archive import ArchiveConfigError, ArchiveError, MemoryArchive, generation_name

HERE = os.path.dirname(os.path.abspath(__file__))
A = "svit://local/archive/a"
B = "svit://local/archive/b"


def make(address: str, **memory: object) -> Process:
    builder = Process.builder(address)
    for key, value in memory.items():
        builder = builder.memory(key, value)
    return builder.build()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(HERE))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SVIT_DEBUG", None)
    return env


@pytest.fixture
def paths(tmp_path):
    return str(tmp_path / "store"), str(tmp_path / "archive")


@pytest.fixture
def wiped(paths):
    """Generation 1 holds A; the store directory is then deleted (a restore is due)."""
    store_path, archive_path = paths
    store = ProcessStore.open(store_path)
    store.create(make(A, x="kept"))
    assert MemoryArchive(archive_path).export(store).outcome == "written"
    store.close()
    shutil.rmtree(store_path)
    return store_path, archive_path


def generation_bytes(directory: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.startswith("generation-") and os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as handle:
                out[name] = handle.read(1 << 20)
    return out


# ---------------------------------------------------------------------- what sits in a generation's place
def test_a_fifo_named_as_the_newest_generation_is_skipped_not_waited_on(wiped):
    store_path, archive_path = wiped
    fifo = os.path.join(archive_path, generation_name(2))
    os.mkfifo(fifo)
    box: list = []
    store = ProcessStore.open(store_path)
    worker = threading.Thread(target=lambda: box.append(MemoryArchive(archive_path).restore(store)), daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive():  # it opened the FIFO and waits for a writer: give it one, so the test ends
        with open(fifo, "wb"):
            pass
        worker.join(60)
    try:
        assert box, "the restore did not finish"
        result = box[0]
        assert worker.is_alive() is False
        assert (result.outcome, result.generation, result.fell_back) == ("restored", 1, True), result.message
        assert "not a regular file" in result.skipped[0].reason
        assert store.resume(A).read("/memory/x") == "kept"
    finally:
        store.close()


HOSTILE = r"""
import json, os, resource, sys
from svit.store import ProcessStore
from svit.store.archive import MemoryArchive
store_path, archive_path = sys.argv[1], sys.argv[2]
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # a runaway read ends in MemoryError, not the OOM killer
store = ProcessStore.open(store_path)
result = MemoryArchive(archive_path).restore(store)
print(json.dumps(result.as_dict()))
store.close()
"""


@pytest.mark.parametrize("kind", ["dev_zero_link", "sparse_64_gib", "control"])
def test_a_device_link_or_a_huge_file_as_the_newest_generation_costs_a_bounded_read(wiped, kind):
    store_path, archive_path = wiped
    target = os.path.join(archive_path, generation_name(2))
    if kind == "dev_zero_link":
        os.symlink("/dev/zero", target)
    elif kind == "sparse_64_gib":
        with open(target, "wb") as handle:
            handle.truncate(64 << 30)
    run = subprocess.run([sys.executable, "-c", HOSTILE, store_path, archive_path], capture_output=True, text=True,
                         env=_env(), timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert result["outcome"] == "restored", result["message"]
    if kind == "control":  # the harness sees a plain restore of generation 1
        assert (result["generation"], result["fell_back"], result["skipped"]) == (1, False, [])
        return
    assert (result["generation"], result["fell_back"]) == (1, True)
    reason = result["skipped"][0]["reason"]
    assert reason.startswith({"dev_zero_link": "not a regular file", "sparse_64_gib": "file is larger"}[kind]), reason
    assert archive_path not in result["message"]


def test_an_export_larger_than_the_limit_is_not_written_and_a_larger_file_is_not_read(paths):
    store_path, archive_path = paths
    store = ProcessStore.open(store_path)
    store.create(make(A, x="a" * 4096))
    assert MemoryArchive(archive_path).export(store).outcome == "written"
    before = generation_bytes(archive_path)
    size = os.path.getsize(os.path.join(archive_path, generation_name(1)))
    small = MemoryArchive(archive_path, max_generation_bytes=size - 1)
    result = small.export(store)
    assert result.outcome == "failed" and "limit" in result.message, result
    assert generation_bytes(archive_path) == before
    assert [(g.number, g.valid) for g in small.list_generations()] == [(1, False)]
    assert [(g.number, g.valid) for g in MemoryArchive(archive_path, max_generation_bytes=size).list_generations()] \
        == [(1, True)]
    store.close()


# ---------------------------------------------------------------------- stray generation names
def test_a_stray_file_with_the_last_generation_number_fails_the_export_without_raising(paths):
    store_path, archive_path = paths
    store = ProcessStore.open(store_path)
    store.create(make(A, x=1))
    archive = MemoryArchive(archive_path)
    assert archive.export(store).outcome == "written"
    assert archive.export(store).outcome == "written"  # control: numbering goes on
    with open(os.path.join(archive_path, generation_name(2**64 - 1)), "wb") as handle:
        handle.write(b"stray")
    before = generation_bytes(archive_path)
    result = archive.export(store)
    assert result.outcome == "failed" and str(2**64 - 1) in result.message, result
    assert generation_bytes(archive_path) == before
    assert archive.counters["export_failed"] == 1
    store.close()


@pytest.mark.parametrize("name", [generation_name(5) + "\n", "generation-" + "\u0660" * 19 + "\u0665.svarc"])
def test_only_ascii_generation_names_count(paths, name):
    store_path, archive_path = paths
    store = ProcessStore.open(store_path)
    store.create(make(A, x=1))
    archive = MemoryArchive(archive_path)
    assert archive.export(store).outcome == "written"
    first = os.path.join(archive_path, generation_name(1))
    shutil.copyfile(first, os.path.join(archive_path, name))
    assert [g.number for g in archive.list_generations()] == [1]
    assert archive.export(store).generation == 2
    store.close()


# ---------------------------------------------------------------------- a stale store's tombstones
def test_a_stale_store_cannot_publish_an_old_removal_over_a_newer_incarnation(paths, tmp_path):
    store_path, archive_path = paths
    store = ProcessStore.open(store_path)
    store.store_id()
    store.create(make(B, y=1))
    handle = store.create(make(A, x=0))
    for i in range(5):
        handle.write("/memory/x", i)
    store.remove(A)  # the first incarnation, removed at version 5
    store.close()
    stale = str(tmp_path / "stale")
    shutil.copytree(store_path, stale)
    store = ProcessStore.open(store_path)
    handle = store.create(make(A, x=100))
    for i in range(9):
        handle.write("/memory/x", 101 + i)  # the second incarnation, version 9
    archive = MemoryArchive(archive_path)
    assert archive.export(store).outcome == "written"
    assert archive.export(store).outcome == "written"  # control: the live store exports
    store.close()
    shutil.rmtree(store_path)
    shutil.copytree(stale, store_path)  # the stale copy comes back: A absent, an old tombstone
    before = generation_bytes(archive_path)
    store = ProcessStore.open(store_path)
    try:
        result = archive.export(store)
        assert result.outcome == "refused_older", result
        assert [(b.address, b.store_version, b.archived_version) for b in result.behind] == [(A, None, 9)]
        assert generation_bytes(archive_path) == before
        forced = archive.export(store, supersede=True)  # the operator's explicit override still works
        assert forced.outcome == "written"
    finally:
        store.close()


# ---------------------------------------------------------------------- an unusable archive directory
def test_an_archive_path_that_is_a_file_is_a_configuration_error_naming_no_host_path(tmp_path):
    path = tmp_path / "a-file"
    path.write_bytes(b"")
    for directory in (path, path / "below"):
        with pytest.raises(ArchiveConfigError) as caught:
            MemoryArchive(str(directory))
        assert str(tmp_path) not in caught.value.message


def test_an_archive_directory_that_went_away_is_an_archive_error_not_an_os_error(paths):
    store_path, archive_path = paths
    store = ProcessStore.open(store_path)
    store.create(make(A, x=1))
    archive = MemoryArchive(archive_path)
    assert archive.export(store).outcome == "written"
    shutil.rmtree(archive_path)
    with open(archive_path, "wb"):
        pass
    try:
        for call in (archive.status, archive.list_generations, lambda: archive.check_rollback(store)):
            with pytest.raises(ArchiveError) as caught:
                call()
            assert archive_path not in caught.value.message
        assert archive.export(store).outcome == "failed"
    finally:
        store.close()


def test_the_cli_reports_an_unusable_archive_without_a_traceback(tmp_path):
    path = tmp_path / "a-file"
    path.write_bytes(b"")
    env = {**_env(), "SVIT_STORE": str(tmp_path / "store")}
    for command in ("status", "export", "restore"):
        run = subprocess.run([sys.executable, "-m", "svit.cli", "archive", command, "--archive", str(path)],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
        assert run.returncode == 1, run.stderr
        assert "Traceback" not in run.stderr and str(tmp_path) not in run.stderr, run.stderr
        assert run.stderr.startswith("svit: invalid_archive_config:"), run.stderr


# ---------------------------------------------------------------------- a removed incarnation stays removed
def test_a_restore_never_replaces_a_recreated_address_with_the_removed_incarnation(paths, tmp_path):
    store_path, archive_path = paths
    store = ProcessStore.open(store_path)
    handle = store.create(make(A, x="old"))
    for i in range(5):
        handle.write("/memory/x", f"old{i}")
    archive = MemoryArchive(archive_path)
    assert archive.export(store).outcome == "written"  # A's first incarnation, version 5
    store.remove(A)
    handle = store.create(make(A, x="new"))
    handle.write("/memory/x", "new1")  # the second incarnation, version 1, acknowledged
    try:
        assert archive.check_rollback(store) == ()
        result = archive.restore(store, mode="always")
        assert result.outcome == "restored" and result.written == (), result
        current = store.resume(A)
        assert (current.version, current.read("/memory/x")) == (1, "new1")
    finally:
        store.close()
    # control: the archive does hold the first incarnation, and an empty store takes it
    fresh = ProcessStore.open(str(tmp_path / "fresh"))
    try:
        assert archive.restore(fresh).written == (A,)
        assert fresh.resume(A).read("/memory/x") == "old4"
    finally:
        fresh.close()
