"""SIGTERM drill: open a store with an archive, write a value, then wait for SIGTERM.

Usage: python archive_sigterm.py STORE ARCHIVE VALUE [--stall | --busy]
       python archive_sigterm.py --runs N ROOT SEED

The SIGTERM handler runs the final export within a 1 s budget and exits 143. With
``--stall`` every fsync of the final export blocks forever, so the handler must give
up at the budget, warn, and leave the old generation intact. With ``--busy`` the main
thread commits in a tight loop after ``ready`` and prints ``ack <version>`` after each
commit returns, so the signal usually lands inside a commit that holds the store lock.

``--runs`` repeats the busy drill N times without paying for an interpreter start each
time: this process imports everything once, then forks one child per run (it starts no
thread itself, so forking is safe). Child i works on ``ROOT/run<i>/store`` and
``ROOT/run<i>/archive``, writes its stdout (``ready``, the acks) to ``ROOT/run<i>/out``
and its stderr to ``ROOT/run<i>/err``; the parent sends SIGTERM after a random delay
and prints one line per run: ``run <i> <exit code>`` (``-9`` when it had to kill it).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
import time

from svit import Process
from svit.errors import PersistenceNotFound
from svit.store.archive import MemoryArchive, install_sigterm_handler, open_store_with_archive
from svit.store.fsshim import FaultyFileSystem

ADDRESS = "svit://local/archive/drill"


def drill(store_path: str, archive_path: str, value: str, stall: bool, busy: bool) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    archive = MemoryArchive(archive_path, stop_timeout_seconds=1)
    store, _ = open_store_with_archive(store_path, archive)
    try:
        handle = store.resume(ADDRESS)
    except PersistenceNotFound:
        handle = store.create(Process.builder(ADDRESS).memory("x", "start").build())
    handle.write("/memory/x", value)
    if stall:
        archive.fs = FaultyFileSystem(hold=("fsync",))
    install_sigterm_handler(archive, store)
    print("ready", flush=True)
    if busy:
        count = 0
        while True:
            count += 1
            handle.write("/memory/x", f"{value}-{count}")
            print(f"ack {handle.version}", flush=True)
    while True:
        time.sleep(0.05)


def _child(directory: str, index: int) -> None:
    out = os.open(os.path.join(directory, "out"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(os.path.join(directory, "err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(err, 2)
    try:
        drill(os.path.join(directory, "store"), os.path.join(directory, "archive"), f"run{index}", False, True)
    finally:
        os._exit(1)


def _ready(directory: str, deadline: float) -> bool:
    path = os.path.join(directory, "out")
    while time.monotonic() < deadline:
        try:
            with open(path) as handle:
                if handle.readline() == "ready\n":
                    return True
        except FileNotFoundError:
            pass
        time.sleep(0.005)
    return False


def _wait(pid: int, deadline: float) -> int:
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return -9


def runs(count: int, root: str, seed: int) -> None:
    rng = random.Random(seed)
    for index in range(count):
        directory = os.path.join(root, f"run{index}")
        os.makedirs(directory)
        delay = rng.uniform(0.0, 0.1)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            _child(directory, index)
        if _ready(directory, time.monotonic() + 30):
            time.sleep(delay)
            os.kill(pid, signal.SIGTERM)
        else:
            os.kill(pid, signal.SIGKILL)
        print(f"run {index} {_wait(pid, time.monotonic() + 10)}", flush=True)


def main() -> None:
    if sys.argv[1] == "--runs":
        runs(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
        return
    store_path, archive_path, value = sys.argv[1:4]
    drill(store_path, archive_path, value, "--stall" in sys.argv[4:], "--busy" in sys.argv[4:])


if __name__ == "__main__":
    main()
