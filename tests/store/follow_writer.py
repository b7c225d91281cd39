"""A writer in its own OS process for the read-only tests: ``follow_writer.py DIR ADDRESS``.

Creates ADDRESS with ``/memory/n = 0``, then writes ``n = 1, 2, ...`` about every 50 ms,
printing ``committed VERSION N`` once each commit is acknowledged, until stdin closes.
"""

import sys
import threading

from svit import Process
from svit.store import ProcessStore

store = ProcessStore.open(sys.argv[1], holder="follow-writer")
handle = store.create(Process.builder(sys.argv[2]).memory("n", 0).build())
print(f"committed {handle.version} 0", flush=True)
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
n = 0
while not done.wait(0.05):
    n += 1
    change = handle.write("/memory/n", n)
    print(f"committed {change.version} {n}", flush=True)
store.close()
