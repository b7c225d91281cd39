"""Fault injection for the store's one synced write path (tests and drills only).

The store sends every acknowledged write batch through ``store._writer``. A
:class:`FailingWrites` replaces it for a ``with`` block and raises at a chosen call,
either before the batch reaches RocksDB (``apply=False``: a failed write) or after it
(``apply=True``: the data landed but the sync reported an error, as a lost fsync
acknowledgement would). Either way the store must go terminal and the handle must not
publish: that is what the tests assert, with a no-fault control run beside them.
"""

from __future__ import annotations

from typing import Any, Callable


class InjectedWriteError(OSError):
    """The error a failing write raises (an I/O error, like a failed fsync)."""


class FailingWrites:
    """Make the ``fail_at``-th synced write (1-based) raise while the block is active."""

    def __init__(self, store: Any, fail_at: int = 1, *, apply: bool = False) -> None:
        self.store = store
        self.fail_at = fail_at
        self.apply = apply
        self.calls = 0
        self.failed = 0
        self._original: Callable[[Any], None] | None = None

    def __enter__(self) -> FailingWrites:
        self._original = self.store._writer
        original = self._original

        def writer(batch: Any) -> None:
            self.calls += 1
            if self.calls == self.fail_at:
                self.failed += 1
                if self.apply:
                    original(batch)
                raise InjectedWriteError("injected synced write failure")
            original(batch)

        self.store._writer = writer
        return self

    def __exit__(self, *exc: Any) -> None:
        self.store._writer = self._original
