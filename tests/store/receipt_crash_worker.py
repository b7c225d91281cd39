"""Crash-drill worker: control requests through a durable controller, each announced first.

Usage: python receipt_crash_worker.py STORE FIRST [--kill-after-commit N] [--receipt-after]

Prints ``ready V``, then for ``k = FIRST, FIRST + 1, ...`` the line ``send k v`` (request
id ``req-k``, expected version ``v``) before executing the request and ``answer k
status`` after it, at most ``LIMIT`` requests, then idles until it is killed.

``--kill-after-commit N`` kills the worker with SIGKILL right after the synced write of
its N-th commit returned, before the controller answers (:class:`AfterWrite`).
``--receipt-after`` is the deliberately broken control: receipts kept in memory and
copied to the store by a second write after each commit, so a kill between the two
must show as a commit without its receipt.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from svit import Process
from svit.control import PROTOCOL, ProcessController, decode_request
from svit.errors import PersistenceNotFound
from svit.store import ProcessStore
from svit.store.faults import AfterWrite
from svit.values import to_tagged

ADDRESS = "svit://local/crash/receipts"
CLIENT = "drill"
RECEIPT_LIMIT = 4096
LIMIT = 80
COUNTER = """
(define (main input)
  (let ((next (+ (read "/memory/count") 1)))
    (do (write "/memory/count" next) (write "/memory/last" (value-get input "/k")) next)))
"""


def request(k: int, version: int) -> dict[str, object]:
    return {
        "protocol": PROTOCOL, "client_id": CLIENT, "request_id": f"req-{k}", "process_id": ADDRESS,
        "expected_version": version,
        "command": {"operation": "activate", "script": "counter", "input": to_tagged({"k": k})},
    }


def main() -> None:
    store = ProcessStore.open(sys.argv[1])
    first = int(sys.argv[2])
    options = sys.argv[3:]
    kill_after = int(options[options.index("--kill-after-commit") + 1]) if "--kill-after-commit" in options else None
    broken = "--receipt-after" in options
    try:
        handle = store.resume(ADDRESS)
    except PersistenceNotFound:
        handle = store.create(Process.builder(ADDRESS).memory("count", 0).memory("last", -1)
                              .library("counter", COUNTER).build())
    if broken:
        controller = ProcessController(handle, RECEIPT_LIMIT)
        book = store.receipts(ADDRESS, RECEIPT_LIMIT)
    else:
        controller = ProcessController.durable(handle, RECEIPT_LIMIT)
    print(f"ready {handle.version}", flush=True)
    if kill_after is not None:
        # Every write of the correct worker is a commit; the broken one writes a receipt after each.
        at = kill_after if not broken else 2 * kill_after - 1
        AfterWrite(store, lambda: os.kill(os.getpid(), signal.SIGKILL), at=at).__enter__()
    for k in range(first, first + LIMIT):
        version = controller.observe()["version"]
        print(f"send {k} {version}", flush=True)
        message = request(k, version)
        answer = controller.execute(message)
        if broken:
            parsed = decode_request(message)
            book.record(CLIENT, parsed.request_id, parsed.digest(), answer)
        print(f"answer {k} {answer.outcome.status}", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
