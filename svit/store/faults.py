"""Fault injection for the store's one synced write path (tests and drills only).

Every acknowledged write batch goes through the engine's ``writer``
(:class:`~svit.store.engine.StorageEngine`). A :class:`FailingWrites` replaces it for a
``with`` block and raises at a chosen call, either before the batch reaches the
database (``apply=False``: a failed write) or after it (``apply=True``: the data landed
but the sync reported an error, as a lost fsync acknowledgement would). Either way the
engine must go terminal and the handle must not publish: that is what the tests assert,
with a no-fault control run beside them. It works the same against any engine.

An :class:`AfterWrite` runs an action right after a chosen synced write returned and
before its caller sees it: a crash drill kills the process there, between a durable
write and everything that follows it.

A :class:`FailingClose` does the same for closing: the engine's ``releaser`` lets go of
the database as usual and then raises, as RocksDB's final flush does on a full disk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .engine import StorageEngine, WriteBatch

__all__ = ["InjectedWriteError", "FailingWrites", "AfterWrite", "FailingClose"]


class InjectedWriteError(OSError):
    """The error a failing write raises (an I/O error, like a failed fsync)."""


class FailingWrites:
    """Make the ``fail_at``-th synced write (1-based) raise while the block is active.

    ``target`` is a storage engine or anything with an ``engine`` (a ``ProcessStore``).
    """

    def __init__(self, target: Any, fail_at: int = 1, *, apply: bool = False) -> None:
        self.engine: StorageEngine = target if isinstance(target, StorageEngine) else target.engine
        self.fail_at = fail_at
        self.apply = apply
        self.calls = 0
        self.failed = 0
        self._original: Callable[[WriteBatch], None] | None = None

    def __enter__(self) -> FailingWrites:
        original = self._original = self.engine.writer

        def writer(batch: WriteBatch) -> None:
            self.calls += 1
            if self.calls == self.fail_at:
                self.failed += 1
                if self.apply:
                    original(batch)
                raise InjectedWriteError("injected synced write failure")
            original(batch)

        self.engine.writer = writer
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._original is not None:
            self.engine.writer = self._original


class AfterWrite:
    """Run ``action`` right after the ``at``-th synced write (1-based) was made, while the
    block is active. ``target`` is a storage engine or anything with an ``engine``."""

    def __init__(self, target: Any, action: Callable[[], None], at: int = 1) -> None:
        self.engine: StorageEngine = target if isinstance(target, StorageEngine) else target.engine
        self.action = action
        self.at = at
        self.calls = 0
        self._original: Callable[[WriteBatch], None] | None = None

    def __enter__(self) -> AfterWrite:
        original = self._original = self.engine.writer

        def writer(batch: WriteBatch) -> None:
            original(batch)
            self.calls += 1
            if self.calls == self.at:
                self.action()

        self.engine.writer = writer
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._original is not None:
            self.engine.writer = self._original


class FailingClose:
    """Make closing raise ``error`` after the database was released, while the block is active.

    ``target`` is a storage engine or anything with an ``engine``. The release itself
    still happens (the lock is let go of), as with RocksDB, whose close reports a failed
    final flush only after closing. :attr:`released` counts the releases that ran.
    """

    def __init__(self, target: Any, error: BaseException) -> None:
        self.engine: StorageEngine = target if isinstance(target, StorageEngine) else target.engine
        self.error = error
        self.released = 0
        self._original: Callable[[], None] | None = None

    def __enter__(self) -> FailingClose:
        original = self._original = self.engine.releaser

        def releaser() -> None:
            original()
            self.released += 1
            raise self.error

        self.engine.releaser = releaser
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._original is not None:
            self.engine.releaser = self._original
