"""A durable counter: every activation is synced to the store before it is acknowledged;
reopening the store resumes the process (its history is verified, no code re-runs).

Run: python examples/durable_counter.py [STORE_DIR]
"""

import sys
import tempfile

from svit import Process
from svit.store import ProcessStore

COUNTER = """
(define (main input)
  (let ((next (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" next) next)))
"""

directory = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="svit-store-")
address = "svit://local/examples/durable-counter"

with ProcessStore.open(directory) as store:
    if address in store.addresses():
        counter = store.resume(address)
    else:
        counter = store.create(Process.builder(address).memory("count", 0).library("counter", COUNTER).build())
    counter.exec("/lib/counter", {"by": 2})
    counter.exec("/lib/counter", {"by": 3})

with ProcessStore.open(directory) as store:  # a new session: resume, verify, continue
    counter = store.resume(address)
    resumed_at = counter.version
    counter.exec("/lib/counter", {"by": 5})
    history = counter.query(path_prefix="/memory")
    print(f"durable-counter: resumed_at={resumed_at} count={counter.read('/memory/count')} transactions={len(history)}")
