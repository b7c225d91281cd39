"""SIGTERM drill: open a store with an archive, write a value, then wait for SIGTERM.

Usage: python archive_sigterm.py STORE ARCHIVE VALUE [--stall]

The SIGTERM handler runs the final export within a 1 s budget and exits 143. With
``--stall`` every fsync of the final export blocks forever, so the handler must give
up at the budget, warn, and leave the old generation intact.
"""

from __future__ import annotations

import logging
import sys
import time

from svit import Process
from svit.errors import PersistenceNotFound
from svit.store.archive import MemoryArchive, install_sigterm_handler, open_store_with_archive
from svit.store.fsshim import FaultyFileSystem

ADDRESS = "svit://local/archive/drill"


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    store_path, archive_path, value = sys.argv[1:4]
    archive = MemoryArchive(archive_path, stop_timeout_seconds=1)
    store, _ = open_store_with_archive(store_path, archive)
    try:
        handle = store.resume(ADDRESS)
    except PersistenceNotFound:
        handle = store.create(Process.builder(ADDRESS).memory("x", "start").build())
    handle.write("/memory/x", value)
    if "--stall" in sys.argv[4:]:
        archive.fs = FaultyFileSystem(hold=("fsync",))
    install_sigterm_handler(archive, store)
    print("ready", flush=True)
    while True:
        time.sleep(0.05)


if __name__ == "__main__":
    main()
