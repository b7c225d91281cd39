"""A host with many idle processes and some busy ones: the busy ones' turns proceed, and
the host's thread count and memory stay bounded.

Builds ``--idle`` idle processes (default 10,000) and ``--busy`` busy ones (default 100,
each with ``--items`` inbox items for a script handler) in one RocksDB store, then runs
a :class:`svit.host.Host` until every item is handled. The baseline, measured in the
same run, is the same busy processes in a store of their own with no idle ones: the
printed ratio is turns per second with the idle crowd vs without it. Thread count and
resident memory (RSS) are printed before the host starts, at its peak, and after.

Run: python benchmarks/host.py [--idle N] [--busy N] [--items N] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from svit import Process
from svit.host import Host
from svit.store import ProcessStore

HANDLER = '(define (main item) (do (write "/memory/count" (+ (read "/memory/count") 1)) 0))'


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def populate(store: ProcessStore, prefix: str, count: int, items: int) -> None:
    """``count`` processes, each with ``items`` inbox items (created from 8 threads, so the
    store's group commit shares the syncs)."""
    def make(index: int) -> None:
        handle = store.create(Process.builder(f"{prefix}{index:05}").memory("count", 0)
                              .library("on_message", HANDLER).build())
        for n in range(items):
            handle.enqueue_inbox({"kind": "message", "body": n})
        handle.close()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(make, range(count)))


def run(store: ProcessStore, busy_prefix: str, turns: int, workers: int) -> dict[str, float]:
    threads_before, rss_before = threading.active_count(), rss_mb()
    peak = {"threads": threads_before, "rss": rss_before}
    host = Host(store, workers=workers, poll_interval=0.02, open_handles=256)
    host.handle(busy_prefix, script="/lib/on_message")
    start = time.perf_counter()
    host.start()
    while host.stats().turns < turns:
        peak["threads"] = max(peak["threads"], threading.active_count())
        peak["rss"] = max(peak["rss"], rss_mb())
        time.sleep(0.05)
    elapsed = time.perf_counter() - start
    stats = host.stats()
    host.stop()
    return {"rate": turns / elapsed, "threads_before": threads_before, "threads_peak": peak["threads"],
            "rss_before": rss_before, "rss_peak": peak["rss"], "rss_after": rss_mb(),
            "open_handles": stats.open_handles, "elapsed": elapsed}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--idle", type=int, default=10_000)
    parser.add_argument("--busy", type=int, default=100)
    parser.add_argument("--items", type=int, default=10)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="svit-bench-host-")
    turns = args.busy * args.items
    try:
        with ProcessStore.open(os.path.join(directory, "alone")) as store:
            populate(store, "svit://local/busy/p", args.busy, args.items)
            alone = run(store, "svit://local/busy/", turns, args.workers)
        with ProcessStore.open(os.path.join(directory, "crowd")) as store:
            began = time.perf_counter()
            populate(store, "svit://local/idle/p", args.idle, 0)
            built = time.perf_counter() - began
            populate(store, "svit://local/busy/p", args.busy, args.items)
            crowd = run(store, "svit://local/busy/", turns, args.workers)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"{args.idle} idle processes created in {built:.1f} s; {args.busy} busy x {args.items} items, "
          f"{args.workers} workers")
    print(f"busy turns/s with {args.idle} idle: {crowd['rate']:.0f}/s vs alone {alone['rate']:.0f}/s "
          f"-> {crowd['rate'] / alone['rate']:.2f}x")
    print(f"threads: before {crowd['threads_before']:.0f}, peak {crowd['threads_peak']:.0f} "
          f"(alone: peak {alone['threads_peak']:.0f})")
    print(f"RSS MB: before {crowd['rss_before']:.0f}, peak {crowd['rss_peak']:.0f}, after {crowd['rss_after']:.0f} "
          f"(alone: peak {alone['rss_peak']:.0f}); open handles at the end {crowd['open_handles']:.0f}")


if __name__ == "__main__":
    main()
