"""Crash-test worker for message delivery: sends, delivers and settles in rounds, printing
each acknowledged step, until it is killed (or kills itself after a chosen step).

Usage: python mail_crash_worker.py STORE_DIR [--die-after sent|delivered|settled]

Each round: the sender's activation sends two messages (``sent <id> <id>``), the target
takes what waits as one delivery (``delivered <id> ...``), the sender's outbox is settled
(``settled <version>``). ``--die-after STEP`` sends this process SIGKILL right after the
first acknowledgement of that step, so the kill falls between two steps.
"""

from __future__ import annotations

import os
import signal
import sys

from svit import Process
from svit.errors import PersistenceNotFound
from svit.store import DurableProcess, ProcessStore

SENDER = "svit://local/crash/sender"
TARGET = "svit://local/crash/target"
SEND = f"""
(define (main input)
  (let ((n (+ (read "/memory/n") 1)))
    (do (write "/memory/n" n) (send! "{TARGET}" n) (send! "{TARGET}" (value-map "n" n)) n)))
"""


def open_or_create(store: ProcessStore, process: Process) -> DurableProcess:
    try:
        return store.resume(process.address)
    except PersistenceNotFound:
        return store.create(process)


def main() -> None:
    store = ProcessStore.open(sys.argv[1])
    die_after = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--die-after" else None
    sender = open_or_create(store, Process.builder(SENDER).memory("n", 0).library("send", SEND).build())
    target = open_or_create(store, Process.builder(TARGET).build())
    print("ready", flush=True)

    def acknowledged(step: str, detail: str) -> None:
        print(f"{step} {detail}", flush=True)
        if step == die_after:
            os.kill(os.getpid(), signal.SIGKILL)

    while True:
        activation = sender.exec("/lib/send")
        acknowledged("sent", " ".join(message["message_id"] for message in activation.messages))
        delivery = store.mailbox.deliver(target)
        acknowledged("delivered", " ".join(delivery.delivered))
        change = store.mailbox.settle(sender)
        acknowledged("settled", str(None if change is None else change.version))


if __name__ == "__main__":
    main()
