"""Many idle processes cost the host nothing: the busy ones' turns proceed while the
thread count stays at the pool plus the scheduler (and the lease keeper on a shared
store) and the open handles stay bounded
(benchmarks/host.py runs the 10,000-process version and prints the numbers)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from svit import Process
from svit.host import Host
from svit.store import ProcessStore

HANDLER = '(define (main item) (do (write "/memory/count" (+ (read "/memory/count") 1)) 0))'
IDLE = 400
BUSY = 20
ITEMS = 5


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def make(store: ProcessStore, address: str, items: int) -> None:
    handle = store.create(Process.builder(address).memory("count", 0).library("on_message", HANDLER).build())
    for n in range(items):
        handle.enqueue_inbox({"kind": "message", "body": n})
    handle.close()


def test_idle_processes_cost_nothing_and_busy_ones_proceed(store: ProcessStore) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: make(store, f"svit://local/idle/p{i:04}", 0), range(IDLE)))
        list(pool.map(lambda i: make(store, f"svit://local/busy/p{i:02}", ITEMS), range(BUSY)))
    threads_before, rss_before = threading.active_count(), rss_mb()
    host = Host(store, workers=4, poll_interval=0.02, open_handles=16)
    host.handle("svit://local/", script="/lib/on_message")  # the idle ones are routed too
    host.start()
    peak_threads = threads_before
    try:
        deadline = time.monotonic() + 60
        while host.stats().turns < BUSY * ITEMS and time.monotonic() < deadline:
            peak_threads = max(peak_threads, threading.active_count())
            time.sleep(0.02)
        host.idle(timeout=30)
        stats = host.stats()
    finally:
        host.stop()
    rss_after = rss_mb()
    print(f"{IDLE} idle + {BUSY} busy: threads {threads_before} -> peak {peak_threads}; "
          f"RSS {rss_before:.0f} -> {rss_after:.0f} MB; open handles {stats.open_handles}")
    assert stats.turns == BUSY * ITEMS
    own = 4 + 1 + (1 if store.engine.shared else 0)  # the pool, the scheduler, the lease keeper
    assert peak_threads <= threads_before + own  # nothing per process
    assert stats.open_handles <= 16
    assert rss_after - rss_before < 200
    for i in range(BUSY):
        assert store.resume(f"svit://local/busy/p{i:02}").read("/memory/count") == ITEMS
