"""Durable store costs, side by side in one run (medians, printed as ratios).

1. Durable counter activations per second vs raw rocksdict synced write batches of
   10 small keys per second (the floor every durable commit pays), single writer.
   Target ratio >= 0.7. Also printed: the same raw batches written and then synced with
   SyncWAL, the two calls the store makes (so the ratio against the method is visible).
1c. Where one durable commit's wall time goes: medians per phase (the activation, the
   store's preparation of the batch, the group's coordination, building the native batch,
   the unsynced write, the log sync, the acknowledgement), beside a raw synced batch.
1a. The store's own cost: CPU microseconds a durable counter activation adds to the
   in-memory one when the log sync is left out (alternating rounds, medians). Printed.
1d. The same three rows for a store whose writer reuses its write-ahead logs
   (``reuse_logs=True``, opt-in: readers follow such a writer by reopening): a log sync then
   overwrites an old log's bytes instead of appending, which ext4 syncs without a
   metadata journal commit. Reuse starts only once logs have rolled over, so this store
   is aged first: commits until its log rolled over onto a reused file twice (about
   8,000 counter commits; the count is printed). Its ratio is printed against raw
   batches on a default rocksdict, as in row 1 (aged by as many batches), and on a
   rocksdict opened with the store's own options and column families (so the same log
   reuse), aged the same way (until its log was reused twice). The 8-writer row of 1b is
   repeated for it (its ratio is relative to this faster single writer).
1b. Group commit: 8 processes committing counter activations from 8 threads, total
   activations per second vs the single-writer rate of row 1 (measured in alternating
   rounds). Target >= 2.5x. The synced engine writes are counted (each acknowledged
   commit returned after the write carrying it): fewer writes than commits shows the
   syncs were shared.
1e. The ceiling of row 1b: the same 8 threads and one thread with the log sync left out
   (alternating rounds), so nothing waits on the disk: the most 8 threads of this
   interpreter commit here, printed beside the rate 1b's target asks for.
2. Resume of a process with 1,000 retained transactions (full validation: every hash,
   every mutation replayed, root re-validated, head nodes verified) vs Process.restore
   of its snapshot. Printed, no target.
3. Durable fork of a process with ~100,000 tree nodes vs a tiny one. Target <= 2.

Run: python benchmarks/store.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time

import rocksdict
from common import build, median_time

from svit import Process
from svit.store import ProcessStore
from svit.store.keys import COLUMN_FAMILIES
from svit.store.rocksdb import REUSED_LOG_BYTES, store_options


def median_rate(fn, count: int, repeat: int) -> float:
    rates = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(count):
            fn()
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates)


def raw_batch_writer(path: str, sync_wal: bool = False, store_like: bool = False):
    """One raw synced WriteBatch of 10 small keys per call (the floor of a durable commit):
    written with ``sync=True``, or (``sync_wal``) written and then synced with SyncWAL,
    the two calls the store makes. ``store_like``: the database is opened with the options
    and column families of a store whose writer reuses its logs (the keys go to the
    default family), so its log is capped and reused the same way."""
    if store_like:
        families = {name: store_options(reuse_logs=True) for name in COLUMN_FAMILIES if name != "default"}
        db = rocksdict.Rdict(path, store_options(reuse_logs=True), column_families=families)
    else:
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        db = rocksdict.Rdict(path, options)
    write_options = rocksdict.WriteOptions()
    write_options.sync = not sync_wal
    counter = [0]

    def one() -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        n = counter[0] = counter[0] + 1
        for j in range(10):
            batch.put(b"key-%d-%d" % (n, j), b"value-%032d" % n)
        db.write(batch, write_options)
        if sync_wal:
            db.flush_wal(True)

    return db, one


def age_until_logs_reused(fn, path: str, times: int = 2, limit: int = 100_000) -> int:
    """Call ``fn`` until the database at ``path`` rolled its log over onto a reused file
    ``times`` times (a new log name whose file already holds far more than one write: an
    old log's bytes); the number of calls. Reuse starts only once a log became obsolete."""
    def logs() -> dict[str, int]:
        return {name: os.path.getsize(os.path.join(path, name)) for name in os.listdir(path) if name.endswith(".log")}

    before, reused = logs(), 0
    for calls in range(1, limit + 1):
        fn()
        now = logs()
        if now.keys() != before.keys() and now[max(now)] > REUSED_LOG_BYTES // 2:
            reused += 1
            if reused == times:
                return calls
        before = now
    raise RuntimeError(f"{path}: the log was not reused {times} times in {limit} writes")


class SyncCounter:
    """Counts the store's synced writes (wraps the engine's one write path)."""

    def __init__(self, store: ProcessStore) -> None:
        self.engine = store.engine
        self.original = self.engine.writer
        self.writes = 0
        self.engine.writer = self

    def __call__(self, batch) -> None:
        self.writes += 1
        self.original(batch)

    def close(self) -> None:
        self.engine.writer = self.original


class _UnsyncedLog:
    """A RocksDB handle whose log sync does nothing (this benchmark only: the durable
    path timed without the sync, to see what the store itself costs)."""

    def __init__(self, db) -> None:
        self._db = db

    def flush_wal(self, sync: bool) -> None:
        pass

    def __getattr__(self, name: str):
        return getattr(self._db, name)


def store_cost(path: str, repeat: int) -> tuple[float, float, str]:
    """(median CPU us a durable counter activation adds, with the log sync left out, to
    the in-memory one; median CPU us of the in-memory one, in alternating rounds; the
    wall-time phases of one such commit)."""
    store = ProcessStore.open(path)
    store.engine._db = _UnsyncedLog(store.engine._db)
    durable = store.create(build("svit://local/bench/nosync"))
    memory = build("svit://local/bench/memory")

    def cpu_us(fn, count: int = 200) -> float:
        start = time.thread_time_ns()
        for _ in range(count):
            fn()
        return (time.thread_time_ns() - start) / count / 1000

    for _ in range(200):
        durable.exec("/lib/counter")
        memory.exec("/lib/counter")
    durable_us, memory_us = [], []
    for _ in range(max(repeat, 5)):
        durable_us.append(cpu_us(lambda: durable.exec("/lib/counter")))
        memory_us.append(cpu_us(lambda: memory.exec("/lib/counter")))
    clock = PhaseClock(store)
    for _ in range(max(repeat, 5) * 50):
        clock.run(lambda: durable.exec("/lib/counter"))
    clock.close()
    store.close()
    in_memory = statistics.median(memory_us)
    return statistics.median(durable_us) - in_memory, in_memory, clock.line()


class PhaseClock:
    """Wall-clock marks around each phase of one durable commit (this benchmark only):
    wraps the store's commit, the group wait, the engine's writer and the RocksDB handle's
    two calls, so one activation's wall time splits into where it went."""

    PHASES = ("activation", "store preparation", "group coordination", "native batch", "unsynced write",
              "log sync", "acknowledgement")

    def __init__(self, store: ProcessStore) -> None:
        self.marks: dict[str, int] = {}
        self.samples: dict[str, list[int]] = {phase: [] for phase in self.PHASES}
        self.samples["total"] = []
        engine, lock, clock, marks = store.engine, store.engine.lock, time.perf_counter_ns, self.marks
        commit, wait, writer, db = store.commit, lock.wait, engine.writer, engine._db

        def timed(name, fn):
            def call(*args):
                marks[name + "<"] = clock()
                try:
                    return fn(*args)
                finally:
                    marks[name + ">"] = clock()
            return call

        class Handle:
            write = staticmethod(timed("write", db.write))
            flush_wal = staticmethod(timed("sync", db.flush_wal))

            def __getattr__(self, name: str):
                return getattr(db, name)

        self._restore = (store, writer, db)
        store.commit = timed("commit", commit)
        lock.wait = timed("wait", wait)
        engine.writer = timed("writer", writer)
        engine._db = Handle()

    def close(self) -> None:
        store, writer, db = self._restore
        del store.commit, store.engine.lock.wait
        store.engine.writer = writer
        store.engine._db = db

    def run(self, fn) -> None:
        m = self.marks
        m.clear()
        m["exec<"] = time.perf_counter_ns()
        fn()
        m["exec>"] = time.perf_counter_ns()
        sync = m["sync>"] - m["sync<"]
        spans = {
            "activation": m["commit<"] - m["exec<"] + m["exec>"] - m["commit>"],
            "store preparation": m["wait<"] - m["commit<"],
            "group coordination": m["writer<"] - m["wait<"] + m["wait>"] - m["writer>"] + m["writer>"] - m["sync>"],
            "native batch": m["write<"] - m["writer<"],
            "unsynced write": m["write>"] - m["write<"],
            "log sync": sync,
            "acknowledgement": m["commit>"] - m["wait>"],
            "total": m["exec>"] - m["exec<"],
        }
        for phase, ns in spans.items():
            self.samples[phase].append(ns)

    def line(self) -> str:
        medians = {phase: statistics.median(ns) / 1000 for phase, ns in self.samples.items()}
        return " | ".join(f"{phase} {medians[phase]:.0f}" for phase in (*self.PHASES, "total"))


def concurrent_rate(handles: list, per_thread: int) -> float:
    """Total activations/s of one thread per handle, each running ``per_thread`` activations."""
    barrier = threading.Barrier(len(handles) + 1)

    def run(handle) -> None:
        barrier.wait()
        for _ in range(per_thread):
            handle.exec("/lib/counter")

    threads = [threading.Thread(target=run, args=(h,)) for h in handles]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    return len(handles) * per_thread / (time.perf_counter() - start)


def ceiling_row(path: str, repeat: int, single_synced: float) -> None:
    """Row 1e: durable counter activations with the log sync left out, one thread vs 8
    threads over 8 processes (alternating rounds), against the rate row 1b's target asks
    of 8 synced writers. With no sync to wait for, the 8 threads show the most this
    interpreter commits from 8 threads at all: one interpreter lock runs their Python one
    at a time, and every hand-over between threads costs more than a wait."""
    store = ProcessStore.open(path)
    store.engine._db = _UnsyncedLog(store.engine._db)
    try:
        one = store.create(build("svit://local/bench/ceiling"))
        eight = [store.create(build(f"svit://local/bench/ceiling{n}")) for n in range(8)]
        for _ in range(200):
            one.exec("/lib/counter")
        single_rates, group_rates = [], []
        for _ in range(max(repeat, 5)):
            single_rates.append(median_rate(lambda: one.exec("/lib/counter"), 400, 1))
            group_rates.append(concurrent_rate(eight, 100))
    finally:
        store.close()
    single, together = statistics.median(single_rates), statistics.median(group_rates)
    print(f"  the log sync left out (no disk wait at all): 8 processes x 8 threads {together:.0f}/s vs one "
          f"thread {single:.0f}/s -> ratio {together / single:.2f}; row 1b's target asks 8 synced writers for "
          f"{2.5 * single_synced:.0f}/s, {2.5 * single_synced / together:.2f}x what 8 threads commit here with "
          "no sync (printed, no target)")


def reuse_rows(work: str, repeat: int) -> None:
    """Rows 1, 1c and 1b for a store opened with ``reuse_logs=True``, each side aged until
    its log was reused twice (see the module docstring, 1d)."""
    store = ProcessStore.open(f"{work}/reuse", reuse_logs=True)
    handle = store.create(build("svit://local/bench/reuse"))
    raw_db, raw_one = raw_batch_writer(f"{work}/reuse-raw")
    same_db, same_one = raw_batch_writer(f"{work}/reuse-raw-same", store_like=True)
    store_aged = age_until_logs_reused(lambda: handle.exec("/lib/counter"), f"{work}/reuse")
    same_aged = age_until_logs_reused(same_one, f"{work}/reuse-raw-same")
    for _ in range(store_aged):
        raw_one()
    durable_rates, raw_rates, same_rates = [], [], []
    for _ in range(repeat):
        durable_rates.append(median_rate(lambda: handle.exec("/lib/counter"), 100, 1))
        raw_rates.append(median_rate(raw_one, 100, 1))
        same_rates.append(median_rate(same_one, 100, 1))
    durable, raw, same = (statistics.median(rates) for rates in (durable_rates, raw_rates, same_rates))
    print(f"reuse_logs store (aged {store_aged} commits, until its log was reused twice): durable counter "
          f"activations {durable:.0f}/s vs raw synced 10-key batches (default rocksdict, aged {store_aged} batches) "
          f"{raw:.0f}/s -> ratio {durable / raw:.2f} (target >= 0.7); vs raw batches on a rocksdict with the "
          f"store's log options (reused logs, aged {same_aged} batches, until reused twice) {same:.0f}/s "
          f"-> ratio {durable / same:.2f}")

    clock = PhaseClock(store)
    raw_times, same_times = [], []
    for _ in range(repeat):
        for _ in range(50):
            clock.run(lambda: handle.exec("/lib/counter"))
        for one, times in ((raw_one, raw_times), (same_one, same_times)):
            for _ in range(50):
                began = time.perf_counter_ns()
                one()
                times.append(time.perf_counter_ns() - began)
    clock.close()
    raw_db.close()
    same_db.close()
    print(f"  one reuse_logs commit, wall us by phase (medians): {clock.line()}; raw synced batch "
          f"{statistics.median(raw_times) / 1000:.0f} (default), {statistics.median(same_times) / 1000:.0f} "
          "(same log options)")

    group = [store.create(build(f"svit://local/bench/reuse-group{n}")) for n in range(8)]
    single_rates, group_rates = [], []
    for _ in range(repeat):
        single_rates.append(median_rate(lambda: handle.exec("/lib/counter"), 100, 1))
        group_rates.append(concurrent_rate(group, 25))
    single, together = statistics.median(single_rates), statistics.median(group_rates)
    print(f"  reuse_logs group commit, 8 processes x 8 threads: {together:.0f}/s vs its single writer {single:.0f}/s "
          f"-> ratio {together / single:.2f} (target >= 2.5)")
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=11)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="svit-store-bench-")
    try:
        store = ProcessStore.open(f"{work}/store")

        # 1. durable activations vs raw synced batches (interleaved for fairness)
        # Rounds alternate so both sides see the same disk conditions (fsync time varies).
        handle = store.create(build("svit://local/bench/counter"))
        raw_db, raw_one = raw_batch_writer(f"{work}/raw")
        wal_db, wal_one = raw_batch_writer(f"{work}/raw-syncwal", sync_wal=True)
        durable_rates, raw_rates, wal_rates = [], [], []
        for _ in range(args.repeat):
            durable_rates.append(median_rate(lambda: handle.exec("/lib/counter"), 100, 1))
            raw_rates.append(median_rate(raw_one, 100, 1))
            wal_rates.append(median_rate(wal_one, 100, 1))
        raw_db.close()
        wal_db.close()
        durable, raw = statistics.median(durable_rates), statistics.median(raw_rates)
        wal = statistics.median(wal_rates)
        print(f"durable counter activations: {durable:.0f}/s vs raw synced 10-key batches {raw:.0f}/s "
              f"-> ratio {durable / raw:.2f} (target >= 0.7); raw batches written then synced with SyncWAL "
              f"(as the store does): {wal:.0f}/s -> ratio {durable / wal:.2f}")

        # 1c. where one durable commit's wall time goes, phase by phase, beside a raw synced batch
        clock = PhaseClock(store)
        raw_db, raw_one = raw_batch_writer(f"{work}/raw-phases")
        raw_times = []
        for _ in range(args.repeat):
            for _ in range(50):
                clock.run(lambda: handle.exec("/lib/counter"))
            for _ in range(50):
                began = time.perf_counter_ns()
                raw_one()
                raw_times.append(time.perf_counter_ns() - began)
        raw_db.close()
        clock.close()
        print(f"one durable commit, wall us by phase (medians): {clock.line()}; raw synced batch "
              f"{statistics.median(raw_times) / 1000:.0f}")

        # 1a. what the store itself adds to an activation, the log sync left out
        added, in_memory, unsynced_phases = store_cost(f"{work}/nosync", args.repeat)
        print(f"store's own cost per durable counter activation (log sync left out, CPU time): {added:.1f} us "
              f"on top of the in-memory activation's {in_memory:.1f} us (printed, no target)")
        print(f"  the same commit's phases with the log sync left out, wall us: {unsynced_phases} (after a sync "
              "the same work runs slower: while the log synced the core idled or ran other work, and its caches "
              "went cold)")

        # 1b. 8 processes from 8 threads vs one writer (alternating rounds), syncs counted
        group = [store.create(build(f"svit://local/bench/group{n}")) for n in range(8)]
        single_rates, group_rates = [], []
        counter_writes = SyncCounter(store)
        single_commits = group_commits = single_syncs = group_syncs = 0
        for _ in range(args.repeat):
            before = counter_writes.writes
            single_rates.append(median_rate(lambda: handle.exec("/lib/counter"), 100, 1))
            single_syncs += counter_writes.writes - before
            single_commits += 100
            before = counter_writes.writes
            group_rates.append(concurrent_rate(group, 25))
            group_syncs += counter_writes.writes - before
            group_commits += 8 * 25
        counter_writes.close()
        single, together = statistics.median(single_rates), statistics.median(group_rates)
        print(f"group commit, 8 processes x 8 threads: {together:.0f}/s vs single writer {single:.0f}/s "
              f"-> ratio {together / single:.2f} (target >= 2.5); synced writes: {group_syncs} for {group_commits} "
              f"commits ({group_commits / group_syncs:.1f} per sync; single writer {single_syncs} for "
              f"{single_commits})")

        # 1e. what 8 threads of this interpreter can commit at all: the log sync left out
        ceiling_row(f"{work}/ceiling", args.repeat, single)

        # 1d. the same, for a store whose writer reuses its write-ahead logs, aged until it does
        reuse_rows(work, args.repeat)

        # 2. resume with 1,000 retained transactions vs Process.restore of its snapshot
        history = store.create(build("svit://local/bench/history"))
        for _ in range(1000):
            history.exec("/lib/counter")
        snapshot = history.process.snapshot()
        resume = median_time(lambda: store.resume("svit://local/bench/history"), args.repeat)
        restore = median_time(lambda: Process.restore(snapshot), args.repeat)
        print(f"resume (1,000 transactions): {resume * 1e3:.1f} ms vs Process.restore {restore * 1e3:.2f} ms "
              f"-> ratio {resume / restore:.1f} (printed, no target)")

        # 3. durable fork of a ~100,000-node process vs a tiny one
        big = build("svit://local/bench/big", {f"r{i:05d}": {f"f{j}": j for j in range(9)} for i in range(10_000)})
        print(f"  (big process: {big.root.count} tree nodes)")
        store.create(big)
        store.create(build("svit://local/bench/tiny"))
        counter = [0]

        def fork(parent: str) -> None:
            counter[0] += 1
            store.fork(parent, f"svit://local/bench/child{counter[0]}")

        big_fork = median_time(lambda: fork("svit://local/bench/big"), args.repeat * 3)
        tiny_fork = median_time(lambda: fork("svit://local/bench/tiny"), args.repeat * 3)
        print(f"durable fork: 100k-node {big_fork * 1e3:.2f} ms vs tiny {tiny_fork * 1e3:.2f} ms "
              f"-> ratio {big_fork / tiny_fork:.2f} (target <= 2)")
        store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
