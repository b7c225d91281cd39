"""Crash-test writer that reuses its write-ahead logs (``reuse_logs``): large commits, each acknowledged version printed.

Usage: python log_roll_writer.py STORE_DIR [PAUSE_SECONDS]

Prints ``ready VERSION``, then each acknowledged version on its own line, and ``reused``
whenever the log has just rolled over onto a reused file (the newest log is far larger
than what was written to it since): the parent kills it once the store is writing over
old log contents, so recovery meets a live log followed by stale bytes. With PAUSE_SECONDS it
waits that long after each commit (a reader following it then meets a store of bounded size).
"""

from __future__ import annotations

import os
import sys
import time

from svit import Process
from svit.errors import PersistenceNotFound
from svit.store import ProcessStore
from svit.store.rocksdb import REUSED_LOG_BYTES, RocksDBEngine

ADDRESS = "svit://local/logs/blob"


def blob(version: int) -> str:
    """The text committed as version ``version`` (about 60 KB, so the log fills in tens of commits)."""
    return f"{version:08d}" * 7500


def log_files(path: str) -> dict[str, int]:
    return {name: os.path.getsize(os.path.join(path, name)) for name in os.listdir(path) if name.endswith(".log")}


def main() -> None:
    path = sys.argv[1]
    pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    store = ProcessStore.over(RocksDBEngine.open(path, reuse_logs=True))
    try:
        handle = store.resume(ADDRESS)
    except PersistenceNotFound:
        handle = store.create(Process.builder(ADDRESS).memory("blob", "").build())
    print(f"ready {handle.version}", flush=True)
    logs = log_files(path)
    while True:
        handle.write("/memory/blob", blob(handle.version + 1))
        print(handle.version, flush=True)
        now = log_files(path)
        if now.keys() != logs.keys() and now[max(now)] > REUSED_LOG_BYTES // 2:
            print("reused", flush=True)
        logs = now
        if pause:
            time.sleep(pause)


if __name__ == "__main__":
    main()
