"""Crash drill: one export that SIGKILLs itself at a chosen filesystem step.

Usage: python archive_crash_export.py STORE ARCHIVE STEP VALUE

Writes VALUE to /memory/x of the drill address (so the new generation differs from
the old), then exports through a FaultyFileSystem that kills this process at the
first occurrence of STEP ("none": no kill; prints the outcome).
"""

from __future__ import annotations

import sys

from svit.store import ProcessStore
from svit.store.archive import MemoryArchive
from svit.store.fsshim import FaultyFileSystem

ADDRESS = "svit://local/archive/drill"


def main() -> None:
    store_path, archive_path, step, value = sys.argv[1:5]
    store = ProcessStore.open(store_path)
    store.resume(ADDRESS).write("/memory/x", value)
    fs = FaultyFileSystem(kill={} if step == "none" else {step: 1})
    archive = MemoryArchive(archive_path, fs=fs)
    result = archive.export(store)
    print(result.outcome, flush=True)
    store.close()


if __name__ == "__main__":
    main()
