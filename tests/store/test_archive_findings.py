"""Memory archive: what a durability drill found, one test (or more) per finding.

A new archive directory's own entry is fsynced; a generation's sealed header, not its
file name, says which generation it is; exports refuse to publish another store's or an
older store's state without an explicit override; a restore that fell back says so; and
a store found below the archive's record at open is reported, never silently used.
"""

# RocksDB only: these findings copy, roll back and damage store directories and their WAL files.

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

import pytest

from svit import Process
from svit.store import ProcessStore
from svit.store.archive import (
    MemoryArchive,
    Rollback,
    SkippedGeneration,
    StoreRolledBack,
    decode_generation,
    generation_name,
    open_store_with_archive,
)
from svit.store.fsshim import FaultyFileSystem

A = "svit://local/archive/a"
B = "svit://local/archive/b"


def make(address: str, **memory: object) -> Process:
    builder = Process.builder(address)
    for key, value in memory.items():
        builder = builder.memory(key, value)
    return builder.build()


def generation_files(directory: str) -> dict[str, bytes]:
    return {name: open(os.path.join(directory, name), "rb").read()
            for name in sorted(os.listdir(directory)) if name.startswith("generation-")}


def write_a(store: ProcessStore, times: int, tag: str = "") -> int:
    handle = store.resume(A)
    for _ in range(times):
        handle.write("/memory/x", f"{tag}{handle.version + 1}")
    return handle.version


@pytest.fixture
def paths(tmp_path):
    return str(tmp_path / "store"), str(tmp_path / "archive")


@pytest.fixture
def exported(paths):
    """A store holding A (version 2) and B, and an archive with generation 1 of it."""
    store_path, archive_path = paths
    store = ProcessStore.open(store_path)
    store.create(make(A, x=0))
    write_a(store, 2)
    store.create(make(B, y="b"))
    assert MemoryArchive(archive_path).export(store).outcome == "written"
    yield store
    if not store.closed:
        store.close()


# ---------------------------------------------------------------------- a new archive directory is durable
def test_a_new_archive_directory_entry_is_fsynced_before_the_first_written(tmp_path, store):
    store.create(make(A, x=1))
    volume = os.path.realpath(tmp_path / "volume")
    os.makedirs(volume)
    directory = os.path.join(volume, "svit", "archive")  # two levels that do not exist yet
    fs = FaultyFileSystem()
    archive = MemoryArchive(directory, fs=fs)
    assert [c for c in fs.calls if c[0] == "dir_fsync"] == []  # nothing is promised before an export
    assert archive.export(store).outcome == "written"
    syncs = [path for name, path in fs.calls if name == "dir_fsync"]
    # the directory (its new generation entry), then each new level's entry in its parent, top-down
    assert syncs == [directory, volume, os.path.join(volume, "svit")]
    fs.calls.clear()
    assert archive.export(store).outcome == "written"
    assert [path for name, path in fs.calls if name == "dir_fsync"] == [directory]  # once is enough


def test_an_existing_archive_directory_gets_its_parent_fsynced_once(tmp_path, store):
    store.create(make(A, x=1))
    directory = os.path.realpath(tmp_path / "made-by-mkdir")
    os.makedirs(directory)  # created by someone else: its entry may not be durable either
    fs = FaultyFileSystem()
    assert MemoryArchive(directory, fs=fs).export(store).outcome == "written"
    assert [path for name, path in fs.calls if name == "dir_fsync"] == [directory, os.path.dirname(directory)]


def test_a_failed_parent_fsync_is_not_written_and_is_retried(tmp_path, store):
    store.create(make(A, x=1))
    directory = os.path.join(os.path.realpath(tmp_path), "new-archive")
    fs = FaultyFileSystem(fail={"dir_fsync": 2})  # the parent's fsync, right after the directory's
    archive = MemoryArchive(directory, fs=fs)
    result = archive.export(store)
    assert fs.failed == ["dir_fsync"] and result.outcome == "failed"
    assert "directory fsync" in result.message
    fs.calls.clear()
    assert archive.export(store).outcome == "written"  # control: the next export fsyncs the parent again
    assert [path for name, path in fs.calls if name == "dir_fsync"] == [directory, os.path.realpath(tmp_path)]


# ---------------------------------------------------------------------- the header, not the name
def test_an_old_generation_copied_under_a_newer_name_is_refused(exported, paths, tmp_path):
    store_path, archive_path = paths
    archive = MemoryArchive(archive_path)
    write_a(exported, 1)
    assert archive.export(exported).outcome == "written"  # generation 2: A at version 3
    newest_version = write_a(exported, 1)
    assert archive.export(exported).outcome == "written"  # generation 3: A at version 4
    shutil.copyfile(os.path.join(archive_path, generation_name(1)), os.path.join(archive_path, generation_name(4)))
    # the copy is intact as a file: only its name lies
    assert decode_generation(open(os.path.join(archive_path, generation_name(4)), "rb").read()).generation == 1

    target = ProcessStore.open(str(tmp_path / "target"))
    result = archive.restore(target)
    assert result.outcome == "restored" and result.generation == 3
    assert target.resume(A).version == newest_version == 4  # the genuinely newest, not generation 1's 2
    assert result.fell_back and len(result.skipped) == 1 and result.skipped[0].number == 4
    assert "file name says generation 4 but its sealed header says generation 1" in result.skipped[0].reason
    assert "fell back to generation 3" in result.message
    status = {g["number"]: g for g in archive.status()["generations"]}
    assert status[4]["valid"] is False and "sealed header says generation 1" in status[4]["error"]
    assert status[3]["valid"] is True and status[3]["store_id"] == exported.store_id()
    target.close()
    # control: without the copy the same restore takes generation 3 and falls back from nothing
    os.unlink(os.path.join(archive_path, generation_name(4)))
    control = ProcessStore.open(str(tmp_path / "control"))
    clean = archive.restore(control)
    assert (clean.outcome, clean.generation, clean.skipped, clean.fell_back) == ("restored", 3, (), False)
    assert control.resume(A).version == 4
    control.close()


def test_a_misnamed_file_does_not_push_good_generations_out(exported, paths):
    _, archive_path = paths
    archive = MemoryArchive(archive_path)
    for _ in range(2):
        write_a(exported, 1)
        assert archive.export(exported).outcome == "written"  # generations 2 and 3
    shutil.copyfile(os.path.join(archive_path, generation_name(1)), os.path.join(archive_path, generation_name(4)))
    write_a(exported, 1)
    assert archive.export(exported).outcome == "written"  # generation 5
    names = sorted(generation_files(archive_path))
    # three good generations (2, 3, 5) are kept, and the misnamed 4 as evidence; only 1 is pruned
    assert names == [generation_name(n) for n in (2, 3, 4, 5)]
    assert [g.valid for g in archive.list_generations()] == [True, True, False, True]


# ---------------------------------------------------------------------- store id and versions
def test_a_second_store_exporting_into_the_same_archive_is_refused(exported, paths, tmp_path):
    _, archive_path = paths
    good = generation_files(archive_path)
    other = ProcessStore.open(str(tmp_path / "other"))
    other.create(make(A, x="another store"))
    other.create(make(B, y="another store"))
    archive = MemoryArchive(archive_path)
    result = archive.export(other)
    assert result.outcome == "refused_foreign" and archive.metrics()["export_refused_foreign"] == 1
    assert exported.store_id() in result.message and other.store_id() in result.message
    assert "exists only in the live store" in result.message
    assert generation_files(archive_path) == good
    # control: the archive's own store still exports
    assert archive.export(exported).outcome == "written"
    # the explicit override publishes, and the other store's lineage then owns the archive
    forced = archive.export(other, supersede=True)
    assert forced.outcome == "written"
    assert decode_generation(open(forced.path or "", "rb").read()).store_id == other.store_id()
    assert archive.export(exported).outcome == "refused_foreign"
    other.close()


def test_a_stale_copy_of_the_store_cannot_publish_older_state(exported, paths, caplog):
    store_path, archive_path = paths
    exported.close()
    stale_path = store_path + "-stale"
    shutil.copytree(store_path, stale_path)  # A at version 2
    live = ProcessStore.open(store_path)
    archive = MemoryArchive(archive_path)
    write_a(live, 3)  # A at version 5
    assert archive.export(live).outcome == "written"
    live.close()
    good = generation_files(archive_path)
    stale = ProcessStore.open(stale_path)
    assert decode_generation(good[generation_name(2)]).store_id == stale.store_id()  # a copy keeps the id
    with caplog.at_level(logging.WARNING, logger="svit.store.archive"):
        result = archive.export(stale)
    assert result.outcome == "refused_older" and archive.metrics()["export_refused_older"] == 1
    assert result.behind == (Rollback(A, 2, 5, 2),)
    assert "the store holds version 2, archive generation 2 holds version 5" in result.message
    assert "refused_older" in caplog.text
    assert generation_files(archive_path) == good
    # the same version with other contents is behind too (two copies that diverged)
    write_a(stale, 3, "stale-")  # the stale copy reaches version 5 on its own
    diverged = archive.export(stale)
    assert diverged.outcome == "refused_older" and diverged.behind == (Rollback(A, 5, 5, 2),)
    assert "other contents" in diverged.message
    # control: once ahead, it is not older (and the override exists for the same-version case)
    write_a(stale, 1)
    assert archive.export(stale).outcome == "written"
    stale.close()


def test_a_restored_store_continues_the_archive_and_a_recreated_address_is_not_older(exported, paths):
    store_path, archive_path = paths
    old_id = exported.store_id()
    exported.close()
    shutil.rmtree(store_path)
    restored, decision = open_store_with_archive(store_path, MemoryArchive(archive_path), start=False)
    assert decision.outcome == "restored" and restored.store_id() != old_id  # a new store id
    archive = MemoryArchive(archive_path)
    assert archive.export(restored).outcome == "written"  # it continues the archive: no override needed
    # remove and re-create A: version 0 < archived 2, but the removal explains it
    restored.remove(A)
    restored.create(make(A, x="again"))
    assert archive.export(restored).outcome == "written"
    restored.close()


# ---------------------------------------------------------------------- a fallback says so
def test_a_restore_that_falls_back_says_from_which_generation_and_why(exported, paths, tmp_path, caplog):
    _, archive_path = paths
    archive = MemoryArchive(archive_path)
    write_a(exported, 1)
    assert archive.export(exported).outcome == "written"  # generation 2
    path = os.path.join(archive_path, generation_name(2))
    with open(path, "r+b") as handle:
        handle.seek(60)
        byte = handle.read(1)
        handle.seek(60)
        handle.write(bytes([byte[0] ^ 0x10]))
    target = str(tmp_path / "target")
    with caplog.at_level(logging.WARNING, logger="svit.store.archive"):
        store, result = open_store_with_archive(target, archive, start=False)
    assert result.outcome == "restored" and result.generation == 1
    assert result.fell_back and result.skipped == (SkippedGeneration(2, "digest mismatch"),)
    assert result.skipped[0].reason == "digest mismatch"
    assert result.message.startswith("fell back to generation 1, newer ones failed verification "
                                     "(generation 2: digest mismatch)")
    assert result.as_dict()["fell_back"] is True and list(result.as_dict()["skipped"]) == [
        {"number": 2, "reason": "digest mismatch"}]
    assert any(r.levelno == logging.ERROR and "fell back" in r.getMessage() for r in caplog.records)
    assert store.resume(A).version == 2  # generation 1's state
    store.close()
    # control: an intact newest generation is not a fallback
    os.unlink(path)
    write_a(exported, 1)
    assert archive.export(exported).outcome == "written"
    store, clean = open_store_with_archive(str(tmp_path / "clean"), archive, start=False)
    assert clean.outcome == "restored" and not clean.fell_back and clean.skipped == ()
    assert "fell back" not in clean.message
    store.close()


# ---------------------------------------------------------------------- a rollback is loud
def test_an_older_copy_of_the_store_is_reported_as_a_rollback_at_open(exported, paths, caplog):
    store_path, archive_path = paths
    exported.close()
    older = store_path + "-older"
    shutil.copytree(store_path, older)  # A at version 2, B at version 0
    store, decision = open_store_with_archive(store_path, MemoryArchive(archive_path), start=False)
    assert decision.rollbacks == ()  # control: the intact store is not behind
    write_a(store, 4)  # A at version 6, acknowledged
    store.create(make("svit://local/archive/c", z=1))
    assert MemoryArchive(archive_path).export(store).outcome == "written"  # generation 2
    store.close()
    shutil.rmtree(store_path)
    shutil.copytree(older, store_path)  # the older copy put back: acknowledged commits are gone
    with caplog.at_level(logging.ERROR, logger="svit.store.archive"):
        with pytest.raises(StoreRolledBack) as info:
            open_store_with_archive(store_path, MemoryArchive(archive_path), start=False)
    assert info.value.code == "store_rolled_back"
    assert info.value.rollbacks == (Rollback(A, 2, 6, 2), Rollback("svit://local/archive/c", None, 0, 2))
    assert "svit://local/archive/a: the store holds version 2, archive generation 2 holds version 6" in \
        info.value.message
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("rolled back" in e and A in e and "version 2" in e and "version 6" in e for e in errors)
    # fail-closed: nothing was written and the store was closed (it opens again)
    probe = ProcessStore.open(store_path)
    assert probe.resume(A).version == 2 and probe.read_restore_marker() is None
    probe.close()
    # "continue" hands the store back with the finding in the result
    store, decision = open_store_with_archive(store_path, MemoryArchive(archive_path), start=False,
                                              on_rollback="continue")
    assert decision.outcome == "not_attempted" and decision.rollbacks == info.value.rollbacks
    # the documented repair: join the archive back in (the archived versions win)
    assert MemoryArchive(archive_path).restore(store, mode="always").outcome == "restored"
    assert store.resume(A).version == 6
    assert MemoryArchive(archive_path).check_rollback(store) == ()
    store.close()


WAL_WRITER = """
import os, signal, sys
from svit import Process
from svit.store.archive import MemoryArchive, open_store_with_archive
archive = MemoryArchive(sys.argv[2])
store, _ = open_store_with_archive(sys.argv[1], archive, start=False)
handle = store.create(Process.builder("svit://local/archive/a").memory("x", 0).build())
for i in range(40):
    handle.write("/memory/x", i)
assert archive.export(store).outcome == "written"
print(handle.version, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no close: the commits are only in the write-ahead log
"""


def test_a_flipped_bit_in_the_wal_tail_is_reported_not_silent(paths, tmp_path):
    store_path, archive_path = paths
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", WAL_WRITER, store_path, archive_path], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == -9, proc.stderr
    acknowledged = int(proc.stdout.split()[0])
    (wal,) = [name for name in os.listdir(store_path) if name.endswith(".log")]
    original = open(os.path.join(store_path, wal), "rb").read()
    for fraction in (0.5, 0.75, 0.9):
        damaged = str(tmp_path / f"damaged-{fraction}")
        shutil.copytree(store_path, damaged)
        data = bytearray(original)
        data[int(len(data) * fraction)] ^= 0x04  # one bit
        open(os.path.join(damaged, wal), "wb").write(bytes(data))
        with pytest.raises(StoreRolledBack) as info:
            open_store_with_archive(damaged, MemoryArchive(archive_path), start=False)
        (rollback,) = info.value.rollbacks
        assert rollback.address == A and rollback.archived_version == acknowledged, fraction
        assert rollback.store_version is not None and rollback.store_version < acknowledged, fraction
        assert f"archive generation 1 holds version {acknowledged}" in info.value.message
    # control: the same store without a flip opens with no finding and every acknowledged version
    store, decision = open_store_with_archive(store_path, MemoryArchive(archive_path), start=False)
    assert decision.rollbacks == () and store.resume(A).version == acknowledged
    store.close()


def test_a_rollback_is_reported_even_when_the_store_id_was_lost_too(exported, paths, caplog):
    store_path, archive_path = paths
    exported.close()
    shutil.rmtree(store_path)
    other = ProcessStore.open(store_path)  # same addresses, a new store id, below the archive
    other.create(make(A, x="lower"))
    other.create(make(B, y="b"))
    with caplog.at_level(logging.ERROR, logger="svit.store.archive"):
        rollbacks = MemoryArchive(archive_path).check_rollback(other)
    assert rollbacks == (Rollback(A, 0, 2, 1),)
    assert f"this store is {other.store_id()}" in caplog.text
    other.close()
