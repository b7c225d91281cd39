"""The memory archive's filesystem layer, injectable so tests can fail, hold or kill any step.

Every file operation the archive performs goes through a :class:`FileSystem`. Each
operation first calls :meth:`FileSystem.step` with its step name, so a
:class:`FaultyFileSystem` can raise there, block there until released, or SIGKILL
the whole process there (crash drills in subprocesses: a same-process test cannot
show what survives a crash, because the page cache hides a missing fsync).

Step names, in the order one export uses them: ``sweep`` (unlink a stale temp file),
``open`` (O_EXCL create of the temp file), ``write``, ``fsync``, ``close``,
``reread`` (read-back verify), ``replace`` (``os.replace`` to the generation name),
``dir_fsync``, ``prune`` (unlink an old generation). Reads use ``read`` and ``list``.
A generation file is read with :meth:`FileSystem.read` and a byte bound: only a regular
file is opened (a symbolic link, a FIFO or a device in its place is refused without
waiting on it or reading it), and one longer than the bound is refused before a byte of
it is read, so whatever sits in the archive directory costs a bounded read.
Creating a directory durably (:meth:`FileSystem.create_directories`, which the store's
open uses) is ``mkdir`` followed by one ``dir_fsync`` per synced directory.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import threading
from typing import Callable

__all__ = [
    "STEPS",
    "FileSystem",
    "NotARegularFile",
    "FileTooLarge",
    "InjectedFault",
    "FaultyFileSystem",
]

STEPS = ("sweep", "open", "write", "fsync", "close", "reread", "replace", "dir_fsync", "prune")


class NotARegularFile(OSError):
    """A path read as a file names a symbolic link, a FIFO, a device or a directory."""

    def __init__(self) -> None:
        super().__init__("not a regular file (a symbolic link, a FIFO, a device or a directory)")


class FileTooLarge(OSError):
    """A file is longer than the bound its reader gave (nothing of it was kept)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"file is larger than the limit ({size} bytes, limit {limit})")
        self.size = size
        self.limit = limit


class FileSystem:
    """Plain POSIX operations (the production layer)."""

    def step(self, name: str, path: str) -> None:
        """Hook before every operation; the production layer does nothing here."""

    def open_exclusive(self, path: str) -> int:
        self.step("open", path)
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)

    def write(self, fd: int, data: bytes, path: str = "") -> None:
        self.step("write", path)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def fsync(self, fd: int, path: str = "") -> None:
        self.step("fsync", path)
        os.fsync(fd)

    def close(self, fd: int, path: str = "") -> None:
        self.step("close", path)
        os.close(fd)

    def read(self, path: str, step: str = "read", max_bytes: int | None = None) -> bytes:
        """The bytes of the regular file ``path``, at most ``max_bytes`` of them.

        Opened without following a symbolic link and without blocking (a FIFO would
        wait for a writer forever, a device such as ``/dev/zero`` never ends); anything
        but a regular file is :class:`NotARegularFile`, and a file longer than
        ``max_bytes`` (by its size, or by what a read finds should it grow meanwhile) is
        :class:`FileTooLarge`.
        """
        self.step(step, path)
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link
                raise NotARegularFile() from None
            raise
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise NotARegularFile()
            if max_bytes is not None and info.st_size > max_bytes:
                raise FileTooLarge(info.st_size, max_bytes)
            chunks: list[bytes] = []
            total = 0
            while True:
                want = 1 << 20 if max_bytes is None else min(1 << 20, max_bytes + 1 - total)
                chunk = os.read(fd, want)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
                total += len(chunk)
                if max_bytes is not None and total > max_bytes:
                    raise FileTooLarge(total, max_bytes)
        finally:
            os.close(fd)

    def replace(self, source: str, target: str) -> None:
        self.step("replace", target)
        os.replace(source, target)

    def fsync_dir(self, path: str) -> None:
        self.step("dir_fsync", path)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def unlink(self, path: str, step: str) -> None:
        self.step(step, path)
        os.unlink(path)

    def listdir(self, path: str) -> list[str]:
        self.step("list", path)
        return sorted(os.listdir(path))

    def makedirs(self, path: str) -> None:
        os.makedirs(path, mode=0o700, exist_ok=True)

    def create_directories(self, path: str, mode: int = 0o777) -> list[str]:
        """Create ``path`` and its missing parents durably; return the ones created, outermost first.

        A new directory's entry lives in its parent, so under strict POSIX it survives a
        power loss only once the parent is fsynced: each created directory's parent is
        (``dir_fsync``), and then the innermost new directory itself, before this returns.
        A directory another process creates meanwhile counts as created here (and is
        synced the same way).
        """
        missing: list[str] = []
        current = os.path.abspath(path)
        while not os.path.lexists(current):
            missing.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        missing.reverse()
        if missing:
            self.step("mkdir", missing[-1])
        os.makedirs(path, mode=mode, exist_ok=True)
        for directory in missing:
            self.fsync_dir(os.path.dirname(directory))
        if missing:
            self.fsync_dir(missing[-1])
        return missing

    def stat(self, path: str) -> os.stat_result:
        return os.stat(path)

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)


class InjectedFault(OSError):
    """The error a :class:`FaultyFileSystem` raises at a failing step."""


class FaultyFileSystem(FileSystem):
    """A :class:`FileSystem` that records steps and can fail, hold or kill at chosen ones.

    ``fail``: step name -> 1-based occurrence that raises :class:`InjectedFault`.
    ``hold``: step names that block until :attr:`release` is set (:attr:`holding` is
    set while blocked). ``kill``: step name -> occurrence that SIGKILLs this process.
    ``devices``: path prefix -> fake ``st_dev`` (location-check fixtures).
    """

    def __init__(
        self,
        *,
        fail: dict[str, int] | None = None,
        hold: tuple[str, ...] = (),
        kill: dict[str, int] | None = None,
        devices: dict[str, int] | None = None,
        on_step: Callable[[str, str], None] | None = None,
    ) -> None:
        self.fail = dict(fail or {})
        self.hold = tuple(hold)
        self.kill = dict(kill or {})
        self.devices = dict(devices or {})
        self.on_step = on_step
        self.calls: list[tuple[str, str]] = []
        self.counts: dict[str, int] = {}
        self.failed: list[str] = []
        self.holding = threading.Event()
        self.release = threading.Event()

    def step(self, name: str, path: str) -> None:
        self.calls.append((name, path))
        count = self.counts[name] = self.counts.get(name, 0) + 1
        if self.on_step is not None:
            self.on_step(name, path)
        if self.kill.get(name) == count:
            os.kill(os.getpid(), signal.SIGKILL)
        if name in self.hold:
            self.holding.set()
            self.release.wait()
        if self.fail.get(name) == count:
            self.failed.append(name)
            raise InjectedFault(f"injected failure at step {name}")

    def stat(self, path: str) -> os.stat_result:
        result = os.stat(path)
        for prefix, device in sorted(self.devices.items(), key=lambda item: -len(item[0])):
            if path == prefix or path.startswith(prefix.rstrip(os.sep) + os.sep):
                values = list(result)
                values[2] = device  # st_dev
                return os.stat_result(values)
        return result
