"""One host OS process of the drills: serves the relay handler of every address under a
prefix and reports its counters to a JSON file (rewritten atomically ~10 times a second).

Usage: python -m tests.host.drill_host STORE PREFIX STATS_FILE [--workers N] [--ttl SECONDS] [--dwell SECONDS]
       [--hold FILE]

``--dwell`` makes every handled item take that long before its commit (as a handler
waiting on a slow port would), so a pause of this host almost surely lands mid-slot.
``--hold FILE``: once FILE exists, the next handled item removes it, writes its address
to ``FILE.held`` and stops this whole process (SIGSTOP) before its commit, so the pause
certainly lands mid-slot: the lease was renewed for the slot and its commit, carrying
that lease as its fence, is still to come. SIGCONT resumes it there.

STORE is a RocksDB directory or a postgresql:// URL. SIGTERM stops the host with a drain
and writes the final counters; SIGKILL is what the drill uses to crash it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from svit.errors import PersistenceUnavailable
from svit.host import Host, HostTimeout
from svit.store import DurableProcess, ProcessStore


def write_stats(path: str, host: Host, idle: bool, final: bool) -> None:
    stats = host.stats()
    record = {
        "pid": os.getpid(), "owner": host.owner, "idle": idle, "final": final, "turns": stats.turns,
        "delivered": stats.delivered, "undeliverable": stats.undeliverable, "failures": stats.failures,
        "stale_refusals": stats.stale_refusals, "conflicts": stats.conflicts, "open_handles": stats.open_handles,
        "last_error": host.last_error,
    }
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as out:
        json.dump(record, out)
    os.replace(temporary, path)


def hold_mid_slot(trigger: str, address: str) -> None:
    """Stop this process here when the drill asked for it (``trigger`` exists; see above)."""
    try:
        os.unlink(trigger)  # exactly one handler takes the request
    except FileNotFoundError:
        return
    held = trigger + ".held"
    with open(held + ".tmp", "w", encoding="utf-8") as out:
        out.write(address)
    os.replace(held + ".tmp", held)
    os.kill(os.getpid(), signal.SIGSTOP)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("prefix")
    parser.add_argument("stats")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument("--dwell", type=float, default=0.0)
    parser.add_argument("--hold", default=None)
    args = parser.parse_args()
    if args.dwell > 0 or args.hold:
        handle_item = DurableProcess.exec_inbox_item

        def slow_handle_item(self: DurableProcess, path: str, item: Any) -> Any:
            if args.hold:
                hold_mid_slot(args.hold, self.address)
            time.sleep(args.dwell)
            return handle_item(self, path, item)

        setattr(DurableProcess, "exec_inbox_item", slow_handle_item)  # noqa: B010 - the drill's slow handler
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stopping.set())
    store = ProcessStore.open(args.store)
    host = Host(store, workers=args.workers, poll_interval=0.1, lease_ttl=args.ttl)
    host.handle(args.prefix, script="/lib/on_message").start()
    print("ready", flush=True)
    while not stopping.is_set():
        try:
            host.idle(timeout=0.5)
            idle = True
        except HostTimeout:
            idle = False
        except PersistenceUnavailable:  # the store went terminal: this host is done
            write_stats(args.stats, host, idle=False, final=True)
            host.stop(drain=False)
            sys.exit(3)
        write_stats(args.stats, host, idle, final=False)
        if idle:
            stopping.wait(0.05)
    host.stop(drain=True)
    write_stats(args.stats, host, idle=False, final=True)
    store.close()


if __name__ == "__main__":
    main()
