"""Messages delivered per second between two processes, on each engine side by side.

A sender commits a burst of ``--burst`` send! intents in one activation; the receiver's
mailbox is then delivered (``mailbox.deliver``, up to 64 per commit) and the sender's
outbox settled, until nothing waits. Printed per engine: the median over ``--repeat``
bursts of messages delivered per second, (1) by the mailbox calls alone and (2) end to
end through a :class:`svit.host.Host` whose handler consumes each message (one commit
per message). PostgreSQL runs in a throwaway cluster (``initdb`` into a temporary
directory, 127.0.0.1, stopped at exit; ``tests/store/pg_cluster.py``) unless
``--postgresql URL`` names one.

Run: python benchmarks/messages.py [--repeat N] [--burst N] [--postgresql URL]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator

from svit import Limits, Process
from svit.host import Host
from svit.store import ProcessStore
from tests.store.pg_cluster import Cluster

CONSUME = '(define (main item) (do (write "/memory/count" (+ (read "/memory/count") 1)) 0))'


def burst_limits(count: int) -> Limits:
    """Limits that let one activation send ``count`` messages (the default allows 128)."""
    return Limits(max_messages=max(Limits().max_messages, count))


def burst_source(target: str, count: int) -> str:
    return (f'(define (go k) (if (> k 0) (do (send! "{target}" k) (go (- k 1))) ()))'
            f'(define (main input) (do (go {count}) {count}))')


@contextlib.contextmanager
def throwaway_postgresql() -> Iterator[str]:
    """A PostgreSQL cluster of its own for the run (the test suite's throwaway cluster)."""
    cluster = Cluster.start()
    try:
        yield cluster.url
    finally:
        cluster.stop()


def mailbox_rate(store: ProcessStore, burst: int, repeat: int) -> float:
    """Median messages per second delivered by mailbox.deliver + settle alone."""
    tag = uuid.uuid4().hex[:8]
    receiver = store.create(Process.builder(f"svit://local/bench-{tag}/receiver").build())
    sender = store.create(Process.builder(f"svit://local/bench-{tag}/sender")
                          .library("burst", burst_source(receiver.address, burst)).limits(burst_limits(burst)).build())
    rates = []
    for _ in range(repeat):
        sender.exec("/lib/burst")
        start = time.perf_counter()
        delivered = 0
        while delivered < burst:
            delivered += len(store.mailbox.deliver(receiver, limit=64).delivered)
        while store.mailbox.settle(sender) is not None:
            pass
        rates.append(burst / (time.perf_counter() - start))
        while receiver.inbox_front() is not None:  # empty the inbox between bursts (untimed)
            receiver.acknowledge_inbox(receiver.inbox_front())
    return statistics.median(rates)


def host_rate(store: ProcessStore, burst: int, repeat: int) -> float:
    """Median messages per second end to end: a host runs the sender's burst (its handler,
    woken by host.send), delivers the mail and runs the receiver's handler per message."""
    tag = uuid.uuid4().hex[:8]
    prefix = f"svit://local/bench-{tag}/"
    receiver = prefix + "receiver"
    store.create(Process.builder(receiver).memory("count", 0).library("on_message", CONSUME).build()).close()
    store.create(Process.builder(prefix + "sender").library("on_message", burst_source(receiver, burst))
                 .limits(burst_limits(burst)).build()).close()
    host = Host(store, workers=2, poll_interval=0.005).handle(prefix, script="/lib/on_message").start()
    rates = []
    try:
        for _ in range(repeat):
            start = time.perf_counter()
            host.send(prefix + "sender", "go")
            host.idle(timeout=300)
            rates.append(burst / (time.perf_counter() - start))
    finally:
        host.stop()
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--postgresql", default=None)
    args = parser.parse_args()
    results: dict[str, tuple[float, float]] = {}
    directory = tempfile.mkdtemp(prefix="svit-bench-")
    try:
        with ProcessStore.open(os.path.join(directory, "store")) as store:
            results["rocksdb"] = (mailbox_rate(store, args.burst, args.repeat), host_rate(store, args.burst, args.repeat))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    with contextlib.ExitStack() as stack:
        url = args.postgresql or stack.enter_context(throwaway_postgresql())
        with ProcessStore.open(url) as store:
            results["postgresql"] = (mailbox_rate(store, args.burst, args.repeat),
                                     host_rate(store, args.burst, args.repeat))
    rocks, pg = results["rocksdb"], results["postgresql"]
    print(f"messages delivered/s, burst of {args.burst}, median of {args.repeat}:")
    print(f"  mailbox deliver+settle: rocksdb {rocks[0]:8.0f}/s | postgresql {pg[0]:8.0f}/s "
          f"-> postgresql/rocksdb {pg[0] / rocks[0]:.2f}x")
    print(f"  host, handler per msg:  rocksdb {rocks[1]:8.0f}/s | postgresql {pg[1]:8.0f}/s "
          f"-> postgresql/rocksdb {pg[1] / rocks[1]:.2f}x")


if __name__ == "__main__":
    main()
