"""Crash-test writer: durable counter activations, printing each acknowledged version.

Usage: python crash_writer.py STORE_DIR [--ack-early]

``--ack-early`` is the deliberately broken control: it prints the next version BEFORE
the commit (and dawdles), so a kill in that window must show as a lost acknowledgement;
the crash test uses it to prove that its harness can see a loss at all.
"""

from __future__ import annotations

import sys
import time

from svit import Process
from svit.errors import PersistenceNotFound
from svit.store import ProcessStore

ADDRESS = "svit://local/crash/counter"
COUNTER = """
(define (main input)
  (let ((next (+ (read "/memory/count") 1)))
    (do (write "/memory/count" next) next)))
"""


def main() -> None:
    store = ProcessStore.open(sys.argv[1])
    early = "--ack-early" in sys.argv[2:]
    try:
        handle = store.resume(ADDRESS)
    except PersistenceNotFound:
        handle = store.create(Process.builder(ADDRESS).memory("count", 0).library("counter", COUNTER).build())
    print(f"ready {handle.version}", flush=True)
    while True:
        if early:
            print(handle.version + 1, flush=True)
            time.sleep(0.02)
        activation = handle.exec("/lib/counter")
        if not early:
            print(activation.version, flush=True)


if __name__ == "__main__":
    main()
