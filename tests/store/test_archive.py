"""Memory archive: the acceptance tests of durability.md 4-14, adapted, each with its control.

Every fault-injection test also runs (or asserts) an unperturbed control, so a harness
that cannot see the fault fails instead of passing vacuously.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

import blake3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from svit import Process
from svit.store import ProcessStore
from svit.store import archive as archive_module
from svit.store.archive import (
    EXPORT_OUTCOMES,
    RESTORE_OUTCOMES,
    ArchiveConfigError,
    ArchiveRestoreFailed,
    Entry,
    InvalidArchive,
    MemoryArchive,
    clamp_interval,
    clamp_stop_timeout,
    decode_generation,
    decode_marker,
    dominates,
    durability_statement,
    encode_marker,
    join,
    normalize_restore_mode,
    open_store_with_archive,
)
from svit.store.faults import FailingWrites
from svit.store.fsshim import FaultyFileSystem, InjectedFault
from tests.conftest import wipe_location
from tests.store import pg_cluster

HERE = os.path.dirname(os.path.abspath(__file__))
DRILL = "svit://local/archive/drill"
A = "svit://local/archive/a"
B = "svit://local/archive/b"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(HERE))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


def make(address: str, **memory) -> Process:
    builder = Process.builder(address)
    for key, value in memory.items():
        builder = builder.memory(key, value)
    return builder.build()


@pytest.fixture
def paths(tmp_path, store_location):
    """The store (a directory or its own PostgreSQL schema: each test runs on both) and the archive."""
    archive_path = str(tmp_path / "archive")
    return store_location, archive_path


@pytest.fixture
def populated(paths):
    """A store with two addresses (A at version 2) and an archive with one good generation."""
    store_path, archive_path = paths
    store = ProcessStore.open(store_path)
    h = store.create(make(A, x=0))
    h.write("/memory/x", 1)
    h.write("/memory/tail", "sentinel-" + "z" * 200)
    store.create(make(B, y="b"))
    archive = MemoryArchive(archive_path)
    assert archive.export(store).outcome == "written"
    yield store, archive, store_path, archive_path
    store.close()


@pytest.fixture
def second_location(engine_kind, tmp_path, request):
    """Another empty store beside the test's own (a directory, or a second schema)."""
    if engine_kind == "postgresql":
        server = request.getfixturevalue("postgresql_server")
        schema, url = pg_cluster.create_schema(server)
        request.addfinalizer(lambda: pg_cluster.drop_schema(server, schema))
        return url
    return str(tmp_path / "store-fresh")


def files_of(directory: str) -> dict[str, bytes]:
    return {name: open(os.path.join(directory, name), "rb").read() for name in sorted(os.listdir(directory))}


def generation_files(directory: str) -> dict[str, bytes]:
    return {k: v for k, v in files_of(directory).items() if k.startswith("generation-")}


def wipe(store: ProcessStore, store_path: str) -> ProcessStore:
    store.close()
    wipe_location(store_path)
    return ProcessStore.open(store_path)


# ---------------------------------------------------------------------- 14: telemetry at zero
def test_counters_pre_initialised_at_zero(paths):
    archive = MemoryArchive(paths[1])
    metrics = archive.metrics()
    for outcome in EXPORT_OUTCOMES:
        assert metrics[f"export_{outcome}"] == 0
    for outcome in RESTORE_OUTCOMES:
        assert metrics[f"restore_{outcome}"] == 0
    assert metrics["last_export_time"] == 0 and metrics["last_export_records"] == 0
    assert metrics["last_export_digest"] == ""
    # control: one export moves exactly its series
    store = ProcessStore.open(paths[0])
    store.create(make(A, x=1))
    result = archive.export(store)
    assert archive.metrics()["export_written"] == 1 and archive.metrics()["last_export_records"] == 1
    assert archive.metrics()["last_export_digest"] == result.digest
    store.close()


# ---------------------------------------------------------------------- 12: where the archive lives
def test_archive_path_must_be_explicit_and_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for bad in ("archive", "./archive", "", None):
        with pytest.raises(ArchiveConfigError):
            MemoryArchive(bad)  # type: ignore[arg-type]
    assert not os.path.exists(tmp_path / "archive")
    assert MemoryArchive(str(tmp_path / "archive")).directory == os.path.realpath(tmp_path / "archive")


def test_location_flags(tmp_path):
    store_path = str(tmp_path / "store")
    os.makedirs(store_path)
    plain = MemoryArchive(str(tmp_path / "archive"))
    assert plain.location_flags(store_path) == {
        "archive_inside_store": False, "shares_device": True, "in_git_worktree": False, "worktree": None}
    inside = MemoryArchive(os.path.join(store_path, "archive"))
    assert inside.location_flags(store_path)["archive_inside_store"] is True
    # a symlink outside the store that resolves inside it is still inside
    os.symlink(os.path.join(store_path, "archive"), str(tmp_path / "link"))
    linked = MemoryArchive(str(tmp_path / "link"))
    assert linked.directory == os.path.realpath(os.path.join(store_path, "archive"))
    assert linked.location_flags(store_path)["archive_inside_store"] is True
    # a git work tree (real `git init`, and a linked worktree's `.git` file)
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    in_repo = MemoryArchive(str(repo / "deep" / "archive"))
    assert in_repo.location_flags(store_path)["in_git_worktree"] is True
    assert in_repo.location_flags(store_path)["worktree"] == str(repo)
    worktree = tmp_path / "wt"
    os.makedirs(worktree)
    (worktree / ".git").write_text("gitdir: /elsewhere/.git/worktrees/wt\n")
    assert MemoryArchive(str(worktree / "a")).location_flags(store_path)["in_git_worktree"] is True
    # a different device (faked through the shim's stat)
    other = MemoryArchive(str(tmp_path / "archive2"), fs=FaultyFileSystem(devices={str(tmp_path / "archive2"): 4242}))
    assert other.location_flags(store_path)["shares_device"] is False
    assert other.warnings(store_path) == []
    assert len(inside.warnings(store_path)) == 2 and len(in_repo.warnings(store_path)) == 2


GOLDEN_NO_ARCHIVE = """svit durability statement
state of record: {store} (RocksDB; each acknowledged commit is one synced write batch; WAL recovery point_in_time)
rebuildable: path index, fork-child index and ready index (ProcessStore.reset_index)
memory archive: disabled
protects: acknowledged commits survive a process crash or power loss (synced WAL)
does not protect: loss, wipe or corruption of the store directory (no copy exists elsewhere)
RPO: unbounded on store loss (no archive)
WARNING: no memory archive is configured: a lost store directory is unrecoverable
"""

GOLDEN_ARCHIVE_HEAD = """svit durability statement
state of record: {store} (RocksDB; each acknowledged commit is one synced write batch; WAL recovery point_in_time)
rebuildable: path index, fork-child index and ready index (ProcessStore.reset_index)
memory archive: {archive} (3 verified generations, export every 300 s by svit-archive-exporter, final export on shutdown within 20 s, restore mode auto)
protects: acknowledged commits survive a crash (synced WAL); a lost or wiped store is restored from the newest verified generation at open
does not protect: state written since the last good export (a SIGKILL or host crash skips the final export), loss of the archive's own volume, fork lineage and history (restored addresses come back as imported processes)
RPO: 300 s (export interval) on store loss; 0 on crash
"""

GOLDEN_SEPARATE = GOLDEN_ARCHIVE_HEAD + """flags: archive_inside_store=False shares_device=False in_git_worktree=False
"""

GOLDEN_SAME_DEVICE = GOLDEN_ARCHIVE_HEAD + """flags: archive_inside_store=False shares_device=True in_git_worktree=False
WARNING: the archive is on the same device as the store: losing that volume loses both
"""

GOLDEN_INSIDE_WORKTREE = GOLDEN_ARCHIVE_HEAD + """flags: archive_inside_store=True shares_device=True in_git_worktree=True
WARNING: the archive is inside the store directory: it dies with the store and protects nothing
WARNING: the archive is on the same device as the store: losing that volume loses both
WARNING: the archive is inside a git work tree ({worktree}): removing or cleaning that work tree deletes it
"""


def test_statement_golden_text(tmp_path):
    store = str(tmp_path / "store")
    os.makedirs(store)
    assert durability_statement(store, None)["text"] == GOLDEN_NO_ARCHIVE.format(store=store)
    separate = str(tmp_path / "archive")
    archive = MemoryArchive(separate, fs=FaultyFileSystem(devices={separate: 4242}))
    assert archive.statement(store)["text"] == GOLDEN_SEPARATE.format(store=store, archive=separate)
    assert archive.statement(store)["rpo_seconds"] == 300
    same = MemoryArchive(str(tmp_path / "archive3"))
    assert same.statement(store)["text"] == GOLDEN_SAME_DEVICE.format(store=store, archive=same.directory)
    os.makedirs(os.path.join(store, ".git"))  # the store itself sits in a work tree
    bad = MemoryArchive(os.path.join(store, "archive"))
    statement = bad.statement(store)
    assert statement["text"] == GOLDEN_INSIDE_WORKTREE.format(store=store, archive=bad.directory, worktree=store)
    assert statement["flags"]["archive_inside_store"] and statement["flags"]["in_git_worktree"]


# ---------------------------------------------------------------------- 11: clamps
def test_interval_and_budget_clamps(paths, caplog):
    assert clamp_interval(1) == (30.0, "interval 1 s raised to 30 s")
    assert clamp_interval(10**9)[0] == archive_module.MAX_INTERVAL
    for bad in (0, -5, float("nan"), float("inf"), "300", None, True):
        assert clamp_interval(bad)[0] == 300.0
    assert clamp_interval(45) == (45.0, None)
    assert clamp_stop_timeout(0.1)[0] == 1.0 and clamp_stop_timeout(600)[0] == 60.0
    assert clamp_stop_timeout(-1)[0] == 20.0 and clamp_stop_timeout(5) == (5.0, None)
    assert normalize_restore_mode("on-empty")[0] == "auto" and normalize_restore_mode("none")[0] == "off"
    assert normalize_restore_mode("bogus") == ("auto", "restore mode 'bogus' is unknown; using auto")
    with caplog.at_level(logging.WARNING, logger="svit.store.archive"):
        archive = MemoryArchive(paths[1], interval_seconds=5, stop_timeout_seconds=0, generations=1)
    assert (archive.interval_seconds, archive.stop_timeout_seconds, archive.generations) == (30.0, 20.0, 3)
    assert "interval 5 s raised to 30 s" in caplog.text
    assert archive.statement(paths[0])["interval_seconds"] == 30.0


# ---------------------------------------------------------------------- 4: the format
def _sample_generation(populated) -> bytes:
    _, archive, _, archive_path = populated
    (name, data), = generation_files(archive_path).items()
    return data


def test_generation_round_trip_carries_every_process(populated):
    store, archive, _, _ = populated
    g = decode_generation(_sample_generation(populated))
    assert sorted(g.processes) == [A, B] and g.tombstones == {}
    assert g.store_id == store.store_id() and g.generation == 1 and g.sequence > 0
    restored = Process.restore(g.processes[A].process_snapshot)
    assert restored.read("/memory/tail") == "sentinel-" + "z" * 200  # content, through the production decoder
    assert restored.version == store.resume(A).version == 2


def test_every_truncation_and_bit_flip_is_rejected_and_nothing_reaches_the_store(populated, tmp_path):
    data = _sample_generation(populated)
    target = ProcessStore.open(str(tmp_path / "target"))
    probe_dir = str(tmp_path / "probe")
    probe = MemoryArchive(probe_dir)
    path = os.path.join(probe_dir, archive_module.generation_name(1))

    def restore_from(blob: bytes) -> str:
        with open(path, "wb") as handle:
            handle.write(blob)
        return probe.restore(target, mode="always").outcome

    for offset in range(len(data)):
        with pytest.raises(InvalidArchive):
            decode_generation(data[:offset])
        assert restore_from(data[:offset]) == "failed"
    rng = random.Random(4)
    for _ in range(300):
        flipped = bytearray(data)
        index = rng.randrange(len(data))
        flipped[index] ^= 1 << rng.randrange(8)
        with pytest.raises(InvalidArchive):
            decode_generation(bytes(flipped))
    assert restore_from(bytes(flipped)) == "failed"
    assert target.addresses() == [] and target.read_restore_marker() is None  # zero records, no marker
    # control: the intact file restores both addresses
    assert restore_from(data) == "restored"
    assert target.addresses() == [A, B]
    target.close()


def _reseal(body: bytes) -> bytes:
    return body + blake3.blake3(body).digest()


def test_specific_rejections(populated):
    data = _sample_generation(populated)
    body = data[:-32]
    with pytest.raises(InvalidArchive, match="bad magic"):
        decode_generation(_reseal(b"XXXXXXXX" + body[8:]))
    with pytest.raises(InvalidArchive, match="unknown major version 4"):
        decode_generation(_reseal(body[:8] + struct.pack(">H", 4) + body[10:]))
    with pytest.raises(InvalidArchive, match="unknown major version 2 .*file name, not its sealed header"):
        decode_generation(_reseal(body[:8] + struct.pack(">H", 2) + body[10:]))  # before the header was trusted
    with pytest.raises(InvalidArchive, match="missing trailer"):
        decode_generation(data[:-48] + b"\x00" * 48)
    count_at = len(body) - 8
    with pytest.raises(InvalidArchive, match="count mismatch"):
        decode_generation(_reseal(body[:count_at] + struct.pack(">Q", 3)))
    with pytest.raises(InvalidArchive, match="digest mismatch"):
        decode_generation(data[:-1] + bytes([data[-1] ^ 1]))
    # a truncation that falls exactly on a record boundary, resealed with a count that
    # matches, is only possible for someone who recomputes the digest: it then decodes
    # as a smaller generation, which is why the shrink guard exists (test below)
    newer_minor = _reseal(body[:10] + struct.pack(">H", 7) + body[12:])
    assert decode_generation(newer_minor).minor == 7  # a newer minor decodes


# ---------------------------------------------------------------------- 6: atomic publication
WRITE_STEPS = ("open", "write", "fsync", "close", "reread", "replace", "dir_fsync")


def _newest_valid_number(archive_path: str) -> int | None:
    generation, _ = MemoryArchive(archive_path).newest_valid()
    return None if generation is None else generation.generation


@pytest.mark.parametrize("step", WRITE_STEPS)
def test_injected_exception_at_each_write_step(populated, step):
    store, _, _, archive_path = populated
    store.resume(A).write("/memory/x", "changed")
    before = generation_files(archive_path)
    archive = MemoryArchive(archive_path, fs=FaultyFileSystem(fail={step: 1}))
    result = archive.export(store)
    assert archive.fs.failed == [step]  # the perturbation happened
    assert result.outcome == "failed" and archive.metrics()["export_failed"] == 1
    assert "exists only in the live store" in result.message
    after = generation_files(archive_path)
    for name, content in before.items():
        assert after[name] == content  # older files byte-identical
    newest = _newest_valid_number(archive_path)
    assert newest in (1, 2)
    assert newest == (2 if step == "dir_fsync" else 1)
    assert not [n for n in os.listdir(archive_path) if n.startswith(".tmp")]
    # control: the same export without a fault publishes generation 2 (or 3)
    assert MemoryArchive(archive_path).export(store).outcome == "written"


def test_sigkill_at_each_write_step(populated):
    store, _, store_path, archive_path = populated
    store.create(make(DRILL, x="pre"))
    for _ in range(3):  # fill N=3 generations so pruning is exercised too
        store.resume(A).write("/memory/x", "pre")
        assert MemoryArchive(archive_path).export(store).outcome == "written"
    store.close()
    outcomes = {}
    for value, step in enumerate(WRITE_STEPS + ("prune", "none")):
        before = generation_files(archive_path)
        old_newest = max(int(n[11:31]) for n in before)
        proc = subprocess.run([sys.executable, os.path.join(HERE, "archive_crash_export.py"), store_path,
                               archive_path, step, f"v{value}"], capture_output=True, text=True, env=_env(),
                              timeout=60)
        outcomes[step] = proc.returncode
        assert proc.returncode == (0 if step == "none" else -signal.SIGKILL), (step, proc.stderr)
        newest = MemoryArchive(archive_path).newest_valid()[0]
        assert newest is not None and newest.generation in (old_newest, old_newest + 1), step
        if newest.generation == old_newest + 1:
            assert Process.restore(newest.processes[DRILL].process_snapshot).read("/memory/x") == f"v{value}"
        after = generation_files(archive_path)
        for name, content in before.items():
            if name in after:
                assert after[name] == content, (step, name)
        pruned = [n for n in before if n not in after]
        assert all(p < min(after) for p in pruned)  # only pruning removes, oldest first
        assert len(after) >= 3  # N generations are always kept
        if step in ("open", "write", "fsync", "close", "reread", "replace"):
            assert newest.generation == old_newest, step
        if step in ("dir_fsync", "prune", "none"):
            assert newest.generation == old_newest + 1, step
    assert all(outcomes[s] == -signal.SIGKILL for s in WRITE_STEPS + ("prune",)), outcomes
    assert outcomes["none"] == 0  # control: the harness can tell a killed export from a finished one
    # the next export sweeps stale temp files left by the kills
    reopened = ProcessStore.open(store_path)
    assert MemoryArchive(archive_path).export(reopened).outcome == "written"
    assert not [n for n in os.listdir(archive_path) if n.startswith(".tmp")]
    assert len(generation_files(archive_path)) == 3
    reopened.close()


# ---------------------------------------------------------------------- 7: shrink and disappearance
def test_wiped_store_export_is_refused(populated, caplog):
    store, archive, store_path, archive_path = populated
    good = generation_files(archive_path)
    store = wipe(store, store_path)
    with caplog.at_level(logging.WARNING, logger="svit.store.archive"):
        result = archive.export(store)
    assert result.outcome == "refused_empty" and archive.metrics()["export_refused_empty"] == 1
    assert "refused_empty" in caplog.text
    assert generation_files(archive_path) == good
    store.close()


def test_g5_wipe_then_one_process_is_refused_twice(populated, second_location):
    store, archive, store_path, archive_path = populated
    good = generation_files(archive_path)
    store = wipe(store, store_path)
    store.create(make(A, x="fresh"))
    for _ in range(2):
        result = archive.export(store)
        assert result.outcome == "refused_shrink" and result.missing == (B,)
    assert archive.metrics()["export_refused_shrink"] == 2
    assert generation_files(archive_path) == good  # the good generation survives
    store.close()
    fresh_path = second_location
    fresh, decision = open_store_with_archive(fresh_path, MemoryArchive(archive_path), start=False)
    assert decision.outcome == "restored" and fresh.resume(A).read("/memory/x") == 1
    fresh.close()


def test_remove_exports_a_tombstone_and_stays_removed(populated, second_location):
    store, archive, store_path, archive_path = populated
    store.remove(B)
    result = archive.export(store)
    assert result.outcome == "written"
    g = archive.newest_valid()[0]
    assert list(g.processes) == [A] and list(g.tombstones) == [B]
    # the tombstone carries forward into the next generation
    store.resume(A).write("/memory/x", 5)
    assert archive.export(store).outcome == "written"
    assert list(archive.newest_valid()[0].tombstones) == [B]
    # restore `always` onto the store: B stays deleted (G4)
    assert archive.restore(store, mode="always").outcome == "restored"
    assert store.addresses() == [A]
    # the store's own tombstone also holds against an older generation that still has B
    store.close()
    for name in sorted(generation_files(archive_path))[1:]:
        os.unlink(os.path.join(archive_path, name))
    other = ProcessStore.open(store_path)
    assert MemoryArchive(archive_path).restore(other, mode="always").outcome == "restored"
    assert other.addresses() == [A]
    other.close()
    # control: a store that never saw the removal gets B back from that generation
    fresh = ProcessStore.open(second_location)
    assert MemoryArchive(archive_path).restore(fresh, mode="always").written == (A, B)
    fresh.close()


def test_unreadable_previous_generation_counts_as_non_empty(populated):
    store, archive, store_path, archive_path = populated
    name = sorted(generation_files(archive_path))[-1]
    with open(os.path.join(archive_path, name), "r+b") as handle:
        handle.seek(40)
        handle.write(b"\xff")
    store = wipe(store, store_path)
    assert archive.export(store).outcome == "refused_empty"
    # control: a wiped store over an empty archive directory may publish its first generation
    empty_archive = MemoryArchive(archive_path + "-new")
    assert empty_archive.export(store).outcome == "written"
    store.close()


# ---------------------------------------------------------------------- 13: empty is not unreadable
class _BrokenScan:
    def __init__(self, store: ProcessStore, after: int) -> None:
        self.original = store._scan
        self.after = after

    def __call__(self, *args, **kwargs):
        for index, item in enumerate(self.original(*args, **kwargs)):
            if index >= self.after:
                from svit.errors import PersistenceUnavailable
                raise PersistenceUnavailable("scan failed: injected iterator error")
            yield item


def test_iterator_error_makes_export_incomplete_and_restore_failed(populated, monkeypatch):
    store, archive, _, archive_path = populated
    good = generation_files(archive_path)
    monkeypatch.setattr(store, "_scan", _BrokenScan(store, 1))
    result = archive.export(store)
    assert result.outcome == "incomplete" and "exists only in the live store" in result.message
    assert archive.metrics()["export_incomplete"] == 1 and archive.metrics()["export_refused_empty"] == 0
    decision = archive.restore(store, mode="auto")
    assert decision.outcome == "failed" and "not an empty one" in decision.message
    assert generation_files(archive_path) == good
    monkeypatch.undo()
    # control: the same store exports and declines restore normally
    assert archive.export(store).outcome == "written"
    assert archive.restore(store).outcome == "not_attempted"


# ---------------------------------------------------------------------- 5: point-in-time export
def test_export_under_concurrent_writers_is_a_consistent_cut(populated):
    store, archive, _, _ = populated
    handles = [store.resume(A), store.resume(B)]
    stop = threading.Event()

    def writer(handle):
        i = 0
        while not stop.is_set():
            i += 1
            handle.write("/memory/n", i)  # invariant: /memory/n == number of writes so far

    threads = [threading.Thread(target=writer, args=(h,)) for h in handles]
    base = {h.address: h.version for h in handles}
    for t in threads:
        t.start()
    try:
        results = [archive.export(store) for _ in range(3)]
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert [r.outcome for r in results] == ["written"] * 3
    sequences = []
    for number in (2, 3, 4):
        path = os.path.join(archive.directory, archive_module.generation_name(number))
        if not os.path.exists(path):
            continue
        g = decode_generation(open(path, "rb").read())
        sequences.append(g.sequence)
        for address, record in g.processes.items():
            p = Process.restore(record.process_snapshot)
            writes = p.version - base[address]
            assert (p.read("/memory/n") or 0) == writes  # each record is one committed state
    assert sequences == sorted(sequences)
    assert all(h.version > base[h.address] for h in handles)  # control: the writers really ran


# ---------------------------------------------------------------------- 8: the join
entries = st.one_of(st.none(), st.builds(Entry, st.booleans(), st.integers(0, 4),
                                         st.sampled_from(["a" * 64, "b" * 64])))


@settings(max_examples=300, deadline=None)
@given(entries, entries, entries)
def test_join_is_a_semilattice(a, b, c):
    assert join(a, b) == join(b, a)
    assert join(join(a, b), c) == join(a, join(b, c))
    assert join(a, a) == a


def test_join_rules():
    live1, live2 = Entry(True, 1, "a" * 64), Entry(True, 2, "a" * 64)
    assert join(live1, live2) == live2  # higher version wins
    assert join(Entry(True, 1, "b" * 64), live1) == Entry(True, 1, "b" * 64)  # deterministic tie-break
    assert join(Entry(False, 9, "a" * 64), live1) == live1  # a tombstone never deletes live state
    assert dominates(None, Entry(False, 3, "a" * 64))  # an absent address satisfies a tombstone
    assert not dominates(None, live1) and not dominates(live1, live2) and dominates(live2, live1)
    # "remove the fix": a join that let a later tombstone win would delete live state
    naive = lambda x, y: max(x, y, key=lambda e: (e.version, e.live))
    assert naive(Entry(False, 9, "a" * 64), live1).live is False


def test_restore_follows_the_join(populated):
    store, archive, store_path, _ = populated
    store = wipe(store, store_path)
    # The restore marker records the restore's whole second; a fixed clock keeps a second
    # restore that lands in the next second from rewriting it, so every record can be compared.
    archive.clock = lambda: 1_800_000_000.0
    low = store.create(make(A, x="recreated"))  # version 0 < archived 2: the archive wins
    high = store.create(make(B, y="new"))
    for i in range(3):
        high.write("/memory/y", i)  # version 3 > archived 0: the store wins
    result = archive.restore(store, mode="always")
    assert result.outcome == "restored" and result.written == (A,)
    assert store.resume(A).read("/memory/x") == 1 and store.resume(B).read("/memory/y") == 2
    digests = store.record_digests()
    again = archive.restore(store, mode="always")
    assert again.outcome == "restored" and again.written == ()  # idempotent
    assert store.record_digests() == digests
    store.close()
    del low


# ---------------------------------------------------------------------- 9 and 10: restore decision
def test_restore_decisions(populated):
    store, archive, store_path, archive_path = populated
    assert archive.restore(store).outcome == "not_attempted"  # populated, no marker
    store.write_restore_marker(b"\xffgarbage")
    assert decode_marker(store.read_restore_marker()) is None
    assert archive.restore(store).outcome == "not_attempted"  # garbage marker counts as absent
    store.write_restore_marker(encode_marker("restored", 1, None, 0))
    assert archive.restore(store).outcome == "not_attempted"
    assert archive.restore(store, mode="off").outcome == "not_attempted"
    # control: a partial marker on the same populated store does restore
    store.write_restore_marker(encode_marker("partial", 1, None, 0))
    assert archive.restore(store).outcome == "restored"
    assert decode_marker(store.read_restore_marker()) == "restored"
    store = wipe(store, store_path)
    assert archive.restore(store, mode="off").outcome == "not_attempted"
    assert archive.restore(store).outcome == "restored"  # empty store under auto
    metrics = archive.metrics()
    assert metrics["restore_not_attempted"] == 5 and metrics["restore_restored"] == 2
    store = wipe(store, store_path)
    assert MemoryArchive(archive_path + "-empty").restore(store).outcome == "nothing_to_restore"
    store.close()


def test_failed_marker_write_aborts_the_restore(populated):
    store, archive, store_path, _ = populated
    store = wipe(store, store_path)
    with FailingWrites(store, 1) as faults:
        result = archive.restore(store)
    assert faults.failed == 1 and result.outcome == "failed" and "restore aborted" in result.message
    store.close()
    store = ProcessStore.open(store_path)  # the terminal store is reopened
    assert store.addresses() == [] and store.read_restore_marker() is None
    assert archive.restore(store).outcome == "restored"  # control
    store.close()


def test_perturbed_verification_is_partial(populated, tmp_path):
    store, archive, store_path, _ = populated
    intact_store = ProcessStore.open(str(tmp_path / "intact"))
    intact = archive.restore(intact_store)
    perturbed_store = ProcessStore.open(str(tmp_path / "perturbed"))
    perturbed = archive.restore(perturbed_store, before_verify=lambda s: s.remove(B))
    assert intact.outcome == "restored"
    assert perturbed.outcome == "partial" and perturbed.missing == (B,) and perturbed.written == (A, B)
    assert perturbed.as_tuple() != intact.as_tuple()  # the check on the check
    assert decode_marker(perturbed_store.read_restore_marker()) == "partial"
    # an altered record (lower version at the same address) is also caught
    altered_store = ProcessStore.open(str(tmp_path / "altered"))

    def alter(s):
        s.install_archived(make(A, x="other"))

    altered = archive.restore(altered_store, before_verify=alter)
    assert altered.outcome == "partial" and altered.missing == (A,)
    # the next auto start heals the partial restore
    assert archive.restore(perturbed_store).outcome == "restored"
    for s in (intact_store, perturbed_store, altered_store):
        s.close()


def test_open_store_with_archive_is_fail_closed(populated, tmp_path):
    store, archive, _, archive_path = populated
    name = sorted(generation_files(archive_path))[-1]
    with open(os.path.join(archive_path, name), "r+b") as handle:
        handle.seek(30)
        handle.write(b"\x00\x00")
    with pytest.raises(ArchiveRestoreFailed) as info:
        open_store_with_archive(str(tmp_path / "new"), archive, start=False)
    assert info.value.result.outcome == "failed"
    # the store was closed: it opens again (RocksDB's lock is free) and is still empty
    again = ProcessStore.open(str(tmp_path / "new"))
    assert again.addresses() == []
    again.close()


def test_sigkill_during_restore_converges(populated, tmp_path):
    store, archive, _, archive_path = populated
    for i in range(4):
        store.create(make(f"svit://local/archive/p{i}", i=i))
    assert archive.export(store).outcome == "written"
    expected = store.archive_heads()
    store.close()
    total = len(expected)
    saw_nonempty_partial = False
    for kill_at in (1, 3, total, total + 1):
        target = str(tmp_path / f"restore-{kill_at}")
        proc = subprocess.run([sys.executable, os.path.join(HERE, "archive_crash_restore.py"), target,
                               archive_path, str(kill_at)], capture_output=True, text=True, env=_env(), timeout=60)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        probe = ProcessStore.open(target)
        landed = len(probe.addresses())
        assert decode_marker(probe.read_restore_marker()) == "partial"
        probe.close()
        saw_nonempty_partial |= landed > 0
        if 0 < landed < total:
            # control: without the partial marker, auto would decline this non-empty, incomplete store
            shutil.copytree(target, target + "-nomarker")
            control = ProcessStore.open(target + "-nomarker")
            control.write_restore_marker(b"garbage")
            assert MemoryArchive(archive_path).restore(control).outcome == "not_attempted"
            assert control.archive_heads() != expected
            control.close()
        reopened, decision = open_store_with_archive(target, MemoryArchive(archive_path), start=False)
        assert decision.outcome == "restored", decision
        assert reopened.archive_heads() == expected
        assert decode_marker(reopened.read_restore_marker()) == "restored"
        reopened.close()
    # check on the check: some kill left a non-empty store that only the marker could heal
    assert saw_nonempty_partial


# ---------------------------------------------------------------------- 11: final export and budget
def _start(script: str, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, script), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())
    line = proc.stdout.readline()
    assert line.strip() == "ready", proc.stderr.read()
    return proc


def test_sigterm_right_after_a_write_exports_it(paths):
    store_path, archive_path = paths
    proc = _start("archive_sigterm.py", store_path, archive_path, "written-before-sigterm")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    newest = MemoryArchive(archive_path).newest_valid()[0]
    assert Process.restore(newest.processes[DRILL].process_snapshot).read("/memory/x") == "written-before-sigterm"
    # control: a SIGKILL gets no final export, so the next write is not in the archive
    proc = _start("archive_sigterm.py", store_path, archive_path, "written-before-sigkill")
    proc.kill()
    proc.wait(timeout=30)
    newest = MemoryArchive(archive_path).newest_valid()[0]
    assert Process.restore(newest.processes[DRILL].process_snapshot).read("/memory/x") == "written-before-sigterm"


def test_stalled_final_export_returns_within_budget(paths):
    store_path, archive_path = paths
    proc = _start("archive_sigterm.py", store_path, archive_path, "first")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    good = generation_files(archive_path)
    proc = _start("archive_sigterm.py", store_path, archive_path, "second", "--stall")
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    elapsed = time.monotonic() - started
    stderr = proc.stderr.read()
    assert elapsed < 1.0 + 1.5, elapsed  # budget 1 s plus epsilon
    assert "final export did not finish within 1 s" in stderr and "exists only in the live store" in stderr
    assert generation_files(archive_path) == good
    assert elapsed >= 0.9  # control: the stall really held it for the budget


def test_stalled_export_in_process_is_cancelled_before_publishing(populated, caplog):
    store, _, _, archive_path = populated
    good = generation_files(archive_path)
    fs = FaultyFileSystem(hold=("fsync",))
    archive = MemoryArchive(archive_path, fs=fs, stop_timeout_seconds=1)
    store.resume(A).write("/memory/x", "late")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="svit.store.archive"):
        result = archive.close(store)
    assert time.monotonic() - started < 1.5 and fs.holding.is_set()
    assert result.outcome == "incomplete" and "final export did not finish" in caplog.text
    fs.release.set()  # the stalled export resumes, sees it was cancelled, publishes nothing
    deadline = time.monotonic() + 5
    while archive.metrics()["export_incomplete"] < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert archive.metrics()["export_incomplete"] == 2
    assert generation_files(archive_path) == good
    assert not [n for n in os.listdir(archive_path) if n.startswith(".tmp")]
    # control: a later export on the same archive publishes
    assert archive.export(store).outcome == "written"


def test_periodic_exporter_runs(populated):
    store, _, _, archive_path = populated
    archive = MemoryArchive(archive_path)
    archive.interval_seconds = 0.05  # test only: the public value is clamped to >= 30 s
    store.resume(A).write("/memory/x", "periodic")
    archive.start(store)
    deadline = time.monotonic() + 5
    while archive.metrics()["export_written"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    final = archive.close(store)
    assert archive.metrics()["export_written"] >= 2 and final.outcome == "written"
    g = archive.newest_valid()[0]
    assert Process.restore(g.processes[A].process_snapshot).read("/memory/x") == "periodic"
    assert len(generation_files(archive_path)) == 3  # pruned to N


def test_injected_fault_type_is_an_oserror():
    assert issubclass(InjectedFault, OSError)


# ---------------------------------------------------------------------- the operator's page
def test_operator_page_runs_verbatim(tmp_path):
    """Every ```python block of docs/durability.md, in order, in one fresh interpreter."""
    page = open(os.path.join(os.path.dirname(os.path.dirname(HERE)), "docs", "durability.md")).read()
    blocks = [part.split("```", 1)[0] for part in page.split("```python\n")[1:]]
    assert len(blocks) >= 5
    env = _env()
    env.update(SVIT_STORE_DIR=str(tmp_path / "store"), SVIT_ARCHIVE_DIR=str(tmp_path / "archive"))
    proc = subprocess.run([sys.executable, "-c", "\n".join(blocks)], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "restore decision: nothing_to_restore" in proc.stdout
    assert "restore: restored ('svit://local/ops/notes',)" in proc.stdout
    assert "export: written" in proc.stdout
