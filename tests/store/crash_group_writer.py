"""Crash-test writer with concurrent committers: one thread per address, each printing
``<address index> <version>`` after every acknowledged commit (after ``exec`` returned).

Usage: python crash_group_writer.py STORE_DIR THREADS [--ack-early]

``--ack-early`` is the deliberately broken control: each thread prints its next version
BEFORE committing (and dawdles), so a kill in that window must show as a lost
acknowledgement; the drill uses it to prove it can see a loss at all.
"""

from __future__ import annotations

import sys
import threading
import time

from svit import Process
from svit.errors import PersistenceNotFound
from svit.store import ProcessStore

COUNTER = """
(define (main input)
  (let ((next (+ (read "/memory/count") 1)))
    (do (write "/memory/count" next) next)))
"""


def address(n: int) -> str:
    return f"svit://local/crash/group{n}"


def main() -> None:
    store = ProcessStore.open(sys.argv[1])
    threads = int(sys.argv[2])
    early = "--ack-early" in sys.argv[3:]
    handles = []
    for n in range(threads):
        try:
            handles.append(store.resume(address(n)))
        except PersistenceNotFound:
            handles.append(store.create(Process.builder(address(n)).memory("count", 0)
                                        .library("counter", COUNTER).build()))
    out = threading.Lock()

    def say(line: str) -> None:
        with out:  # whole lines only
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def run(n: int) -> None:
        handle = handles[n]
        while True:
            if early:
                say(f"{n} {handle.version + 1}")
                time.sleep(0.02)
            activation = handle.exec("/lib/counter")
            if not early:
                say(f"{n} {activation.version}")

    for n in range(threads):
        threading.Thread(target=run, args=(n,), daemon=True).start()
    say("ready")
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
