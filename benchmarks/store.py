"""Durable store costs, side by side in one run (medians, printed as ratios).

1. Durable counter activations per second vs raw rocksdict synced write batches of
   10 small keys per second (the floor every durable commit pays). Target ratio >= 0.4.
2. Resume of a process with 1,000 retained transactions (full validation: every hash,
   every mutation replayed, root re-validated, head nodes verified) vs Process.restore
   of its snapshot. Printed, no target.
3. Durable fork of a process with ~100,000 tree nodes vs a tiny one. Target <= 2.

Run: python benchmarks/store.py [--repeat N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

import rocksdict
from common import build, median_time

from svit import Process
from svit.store import ProcessStore


def median_rate(fn, count: int, repeat: int) -> float:
    rates = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(count):
            fn()
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates)


def raw_batch_writer(path: str):
    """One raw synced WriteBatch of 10 small keys per call (the floor of a durable commit)."""
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    db = rocksdict.Rdict(path, options)
    write_options = rocksdict.WriteOptions()
    write_options.sync = True
    counter = [0]

    def one() -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        n = counter[0] = counter[0] + 1
        for j in range(10):
            batch.put(b"key-%d-%d" % (n, j), b"value-%032d" % n)
        db.write(batch, write_options)

    return db, one


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
        durable_rates, raw_rates = [], []
        for _ in range(args.repeat):
            durable_rates.append(median_rate(lambda: handle.exec("/lib/counter"), 100, 1))
            raw_rates.append(median_rate(raw_one, 100, 1))
        raw_db.close()
        durable, raw = statistics.median(durable_rates), statistics.median(raw_rates)
        print(f"durable counter activations: {durable:.0f}/s vs raw synced 10-key batches {raw:.0f}/s "
              f"-> ratio {durable / raw:.2f} (target >= 0.4)")

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
