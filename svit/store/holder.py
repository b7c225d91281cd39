"""Who holds an embedded store: a small record the writer keeps beside the data.

RocksDB's lock only says that a store directory is held, not by whom. So a writer that
has opened a store directory (and so holds its lock) writes ``holder.json`` there: its
pid, what it is (``svit serve``, ``svit chat``, or the program's name) and when it
opened the store; it removes the file before letting go of the lock. A second writer
that the lock refuses reads the file to say who holds the store. A record whose pid is
no longer running is stale (its writer died without closing the store); it is reported
as such, and the next writer to open the store replaces it.

The record is advisory: it is written after the lock is taken and only ever read to
explain a refusal, so a missing or damaged file changes nothing but the message.
Readers (``ProcessStore.open(..., read_only=True)``) never write it.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from dataclasses import dataclass

__all__ = ["HOLDER_FILE", "Holder", "default_command", "describe_in_use", "read_holder", "release_holder", "write_holder"]

#: The record's name inside a store directory (RocksDB ignores files it does not name).
HOLDER_FILE = "holder.json"
#: A record larger than this is not one this module wrote.
_MAX_BYTES = 4096
_MAX_COMMAND = 200


def _printable(text: str) -> str:
    cleaned = "".join(ch if ch.isprintable() else " " for ch in text).strip()
    return cleaned[:_MAX_COMMAND] or "unknown"


def default_command() -> str:
    """What this process is, for the record: the program's name (never its arguments,
    which may hold paths or secrets)."""
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if program in ("", "-c", "-m", "__main__.py"):
        program = os.path.basename(sys.executable or "python")
    return _printable(program)


@dataclass(frozen=True)
class Holder:
    """One holder record: who opened the store for writing, and since when."""

    pid: int
    command: str
    since: float

    def running(self) -> bool:
        """Whether a process with this pid exists (a stale record names one that does not)."""
        if self.pid <= 0:
            return False
        if self.pid == os.getpid():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # it exists, under another user
        except OSError:
            return False
        return True

    def when(self) -> str:
        """The opening time in UTC; a time no clock can show (a damaged record) is "an unknown time"."""
        try:
            return datetime.datetime.fromtimestamp(self.since, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        except (ValueError, OverflowError, OSError):
            return "an unknown time"

    def describe(self) -> str:
        """``pid 1234 (svit serve, since 2026-01-01T00:00:00Z)``."""
        return f"pid {self.pid} ({self.command}, since {self.when()})"


def write_holder(directory: str, command: str | None = None) -> Holder | None:
    """Record this process as the store's holder (call holding the store's lock).

    Written to a temporary name and renamed, so a reader never sees half a record.
    Best effort: a failure leaves only a less helpful message for a refused writer.
    """
    holder = Holder(os.getpid(), _printable(command) if command else default_command(), time.time())
    target = os.path.join(directory, HOLDER_FILE)
    temporary = f"{target}.{holder.pid}.tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump({"command": holder.command, "pid": holder.pid, "since": holder.since}, handle)
        os.replace(temporary, target)
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        return None
    return holder


def read_holder(directory: str) -> Holder | None:
    """The holder record of the store at ``directory``, or None when absent or not one."""
    try:
        with open(os.path.join(directory, HOLDER_FILE), "rb") as handle:
            raw = handle.read(_MAX_BYTES + 1)
    except OSError:
        return None
    if len(raw) > _MAX_BYTES:
        return None
    try:
        record = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(record, dict):
        return None
    pid, command, since = record.get("pid"), record.get("command"), record.get("since")
    if type(pid) is not int or not isinstance(command, str) or not isinstance(since, (int, float)) \
            or isinstance(since, bool):
        return None
    return Holder(pid, _printable(command), float(since))


def release_holder(directory: str, holder: Holder | None) -> None:
    """Remove the record ``holder`` wrote, if it is still the one there (call before
    letting go of the lock, so the next writer's record is never the one removed)."""
    if holder is None:
        return
    if read_holder(directory) != holder:
        return
    try:
        os.unlink(os.path.join(directory, HOLDER_FILE))
    except OSError:
        pass


def describe_in_use(directory: str) -> str:
    """Why a writer could not open the store at ``directory``: who holds it, as far as known."""
    holder = read_holder(directory)
    reading = "reading commands (read, discover, stat, log, tree, ls, status, events) still work alongside it"
    if holder is None:
        return f"store is in use by another process (it left no holder record); {reading}"
    if holder.pid == os.getpid():
        return f"store is in use by another open handle of this process: {holder.describe()}; close that store first"
    if holder.running():
        return f"store is in use by another process: held by {holder.describe()}; {reading}"
    return (f"store is in use by another process; its holder record names {holder.describe()}, which is no longer "
            f"running (a stale record left by a writer that did not close the store); {reading}")
