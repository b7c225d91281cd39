"""Crash drill: a startup restore that SIGKILLs itself before its N-th record install.

Usage: python archive_crash_restore.py STORE ARCHIVE N

N counts installs 1-based; N larger than the number of records kills after the last
install, just before verification (the marker still reads partial).
"""

from __future__ import annotations

import os
import signal
import sys

from svit.store import ProcessStore
from svit.store.archive import MemoryArchive


def main() -> None:
    store_path, archive_path, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = ProcessStore.open(store_path)
    original = store.install_archived
    calls = [0]

    def install(process):  # type: ignore[no-untyped-def]
        calls[0] += 1
        if calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(process)

    store.install_archived = install  # type: ignore[method-assign]
    archive = MemoryArchive(archive_path)
    result = archive.restore(store, before_verify=lambda s: os.kill(os.getpid(), signal.SIGKILL))
    print(result.outcome, flush=True)


if __name__ == "__main__":
    main()
