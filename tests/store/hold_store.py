"""Hold a store open until stdin closes (a second process for lock tests): ``hold_store.py DIR``."""

import sys

from svit.store import ProcessStore

store = ProcessStore.open(sys.argv[1])
print("ready", flush=True)
sys.stdin.read()
store.close()
