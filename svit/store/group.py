"""Group commit: concurrent commits share one synced write batch, and the store lock that waits for them.

A commit prepares its batch under the store lock (compare-and-swap on its head, records,
nodes), queues it with :meth:`GroupCommit.submit` and leaves the lock; the sync happens
outside it, so other commits can prepare and queue while a sync is in progress. Then
:meth:`GroupCommit.wait`: the first waiter that finds no write in progress becomes the
**leader**, takes every queued batch, writes them as one synced batch and wakes the
others (the **followers**); each commit is acknowledged only once the write holding it
has returned. Each waiting committer sleeps on a lock of its own, released only by
the write holding its batch or to make it lead the next one: a write wakes its own
committers and at most one more, never every waiter (with eight committers, waking all
of them at each write cost more of the one interpreter lock than the commits).
A lone committer leads at once: nobody waits for company. A leader whose
group is smaller than the last one waits, once and briefly (at most the last write's
duration, never over :data:`GATHER_SECONDS`), for the last group's committers to queue
again, so concurrent committers keep sharing syncs instead of alternating between a
sync of one and a sync of the rest.

A failed write fails every commit in its group, and the write function makes the store
terminal, so the batches queued after it fail too; nothing of a failed group is ever
reported as written. A batch whose expectation fails (see
:meth:`svit.store.engine.WriteBatch.expect`) fails alone with the conflict the write
function reports for it; the rest of its group is written.

Every other holder of the store lock (reads, cuts, forks, exports, the thread log)
enters it through :meth:`GroupCommit.__enter__`, which waits until no queued or
in-progress batch is left: such an operation sees a store in which every accepted
commit is durable (or the store is terminal), exactly as when each commit held the lock
through its own sync. Only :meth:`committing` enters without waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar

from ..errors import PersistenceUnavailable

__all__ = ["Ticket", "GroupCommit", "GATHER_SECONDS"]

#: The longest a leader waits for the committers of the last group to queue again.
GATHER_SECONDS = 0.002

B = TypeVar("B")


class Ticket(Generic[B]):
    """One queued batch: done once the write holding it returned, with the error if it failed."""

    __slots__ = ("batch", "done", "error", "waker")

    def __init__(self, batch: B) -> None:
        self.batch = batch
        self.done = False
        self.error: BaseException | None = None
        #: The lock its committer sleeps on (held; released to wake it), while it sleeps.
        self.waker: threading.Lock | None = None


class GroupCommit(Generic[B]):
    """The store lock (reentrant) plus a leader/follower queue of synced write batches.

    ``write_group`` writes a list of batches as ONE synced write, or raises; it returns
    one entry per batch, None when written or the error of a batch left out of the write
    (a failed expectation). It is called by one leader at a time, never under the store
    lock's wait.
    """

    def __init__(self, write_group: Callable[[list[B]], list[BaseException | None]]) -> None:
        self._write_group = write_group
        self._lock = threading.RLock()
        #: The queue's lock (reentrant only so that its owner can be asked: a leader
        #: interrupted while settling its write must know whether it holds it).
        self._state = threading.RLock()
        self._queue: list[Ticket[B]] = []
        self._in_flight = 0
        self._leading = False
        #: Queued committers waiting for company before they lead, and threads waiting
        #: for the queue to empty (:meth:`drain`): woken by a submit or a write.
        self._gatherers: list[Ticket[B]] = []
        self._drainers: list[Ticket[Any]] = []
        #: Leaders waiting for company, and the size of the last group and how long its
        #: write took (seconds).
        self._gathering = 0
        self._last_group = 0
        self._last_write = 0.0
        #: Synced group writes made, and the batches they carried (for benchmarks and tests).
        self.writes = 0
        self.batches = 0

    @property
    def pending(self) -> int:
        """Batches queued or being written right now."""
        return self._in_flight

    # ------------------------------------------------------------------ the store lock
    # CPython runs a pending signal's handler as a C call returns, so a KeyboardInterrupt
    # may be raised just after the lock's acquire() returned: entering takes it inside a
    # ``try`` that gives back what this call took (the lock's count for the calling thread
    # says whether it took it), and leaving is the release alone.
    def __enter__(self) -> GroupCommit[B]:
        lock = self._lock
        held = self._count()
        try:
            lock.acquire()
            self.drain()
        except BaseException:
            if self._count() > held:
                lock.release()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Enter the lock as ``with`` does, like ``RLock.acquire``: with a ``timeout`` (or
        ``blocking=False``), give up (False) when the lock or the queued batches are not
        done in time; a write already in progress is never abandoned."""
        deadline = None if timeout < 0 else time.monotonic() + timeout
        lock = self._lock
        held = self._count()
        try:
            if not lock.acquire(blocking, timeout):
                return False
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self.drain(left if blocking else 0.0):
                return True
            lock.release()
        except BaseException:
            if self._count() > held:
                lock.release()
            raise
        return False

    def release(self) -> None:
        self._lock.release()

    def owned(self) -> bool:
        """True when the calling thread holds the store lock."""
        return self._count() > 0

    def _count(self) -> int:
        """How many times the calling thread holds the lock: the count the lock keeps itself
        (CPython's reentrant lock, since 3.11), so it is right whatever was interrupted."""
        return int(self._lock._recursion_count())  # type: ignore[attr-defined]  # noqa: SLF001

    def committing(self) -> AbstractContextManager[Any]:
        """Hold the store lock without waiting for queued batches (a commit's preparation):
        the lock itself, whose ``with`` statement takes it with no gap before its block."""
        return self._lock

    # ------------------------------------------------------------------ the queue
    def submit(self, batch: B) -> Ticket[B]:
        """Queue ``batch`` (call while holding the lock, after its compare-and-swap)."""
        ticket = Ticket(batch)
        with self._state:
            queue = self._queue
            queue.append(ticket)
            self._in_flight += 1
            if self._gatherers and len(queue) >= self._last_group:
                for gatherer in self._gatherers:
                    self._wake(gatherer)
        return ticket

    def wait(self, ticket: Ticket[B]) -> None:
        """Return once ``ticket``'s batch is durable; raise its group's error if it failed.

        A thread about to lead a group smaller than the last one first waits for the
        others to queue again (the committers of the last group are typically running
        their next activations), until the group is as large as the last one, at most as
        long as the last group write took (and :data:`GATHER_SECONDS`), once: they then
        share its sync, instead of one committer being synced alone while the others
        queue for the sync after it. A lone committer (the last group was its own commit)
        leads at once; so does a thread holding the store lock (no one else could queue).
        One committer at a time waits for company: those that queue meanwhile sleep
        until the write carrying them (a wait each would only wake them all at once).

        Each sleeping committer is woken alone, by the write holding its batch or to lead
        the next one: no committer wakes for another's write."""
        gathered = False
        state = self._state
        with state:  # a with statement: no gap between taking it and its block
            try:
                while not ticket.done:
                    if self._leading or not self._queue or (self._gatherers and not gathered):
                        # A write in progress, or a committer already gathering company: this
                        # batch goes with its group (one gatherer; the others sleep until written).
                        self._sleep(ticket, None)
                    elif (not gathered and len(self._queue) < self._last_group and self._last_write
                          and not self.owned()):
                        gathered = True
                        self._gatherers.append(ticket)
                        self._gathering += 1
                        try:
                            self._sleep(ticket, min(self._last_write, GATHER_SECONDS))
                        finally:
                            self._gathering -= 1
                            self._gatherers.remove(ticket)
                            if ticket.done and not self._leading:
                                # Another write carried its batch: the committers that slept
                                # behind it while it gathered need a leader now.
                                self._wake_next_leader()
                    else:
                        self._lead()
            except BaseException:
                # Interrupted (it may have been woken to lead): another queued committer leads.
                if not self._leading:
                    self._wake_next_leader()
                raise
        error = ticket.error
        if error is None:
            return
        if isinstance(error, PersistenceUnavailable):
            # One exception object per waiting thread (a raised object collects its traceback).
            raise PersistenceUnavailable(error.detail, reason=error.reason) from None
        raise error

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until no batch is queued or being written (leading a write if none is);
        False if ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        state = self._state
        with state:  # a with statement: no gap between taking it and its block
            while self._in_flight:
                if not self._leading and self._queue:
                    self._lead()
                    continue
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                drainer: Ticket[B] = Ticket(None)  # type: ignore[arg-type]
                self._drainers.append(drainer)
                try:
                    self._sleep(drainer, left)
                finally:
                    self._drainers.remove(drainer)
        return True

    def _sleep(self, ticket: Ticket[Any], timeout: float | None) -> None:
        """Sleep (``_state`` held, released meanwhile) until :meth:`_wake` wakes
        ``ticket``'s thread or ``timeout`` seconds passed."""
        waker = threading.Lock()
        waker.acquire()
        ticket.waker = waker
        try:
            self._state.release()  # inside the try: a signal's exception raised as it returns takes it back
            waker.acquire(True, -1 if timeout is None else max(timeout, 0.0))
        finally:
            self._state.acquire()
            ticket.waker = None

    @staticmethod
    def _wake(ticket: Ticket[Any]) -> None:
        """Wake ``ticket``'s sleeping thread, if it sleeps (``_state`` held)."""
        waker = ticket.waker
        if waker is not None:
            ticket.waker = None
            waker.release()

    def _lead(self) -> None:
        """Write every queued batch as one synced write (called holding ``_state``)."""
        began = time.monotonic()  # before the queue is taken: an interrupt here changes nothing
        results: list[BaseException | None] = [None] * len(self._queue)
        group, self._queue = self._queue, []
        self._leading = True
        error: BaseException | None = None
        try:
            self._state.release()  # inside the try: a signal's exception raised as it returns takes it back
            results = self._write_group([ticket.batch for ticket in group])
        except BaseException as exc:
            error = exc
        finally:
            self._settle(group, results, error, began)

    def _settle(self, group: list[Ticket[B]], results: list[BaseException | None], error: BaseException | None,
                began: float) -> None:
        """Record a finished write and wake whom it concerns, taking ``_state`` again.

        Every committer of the group, the next leader and the drainers wait on this, so a
        KeyboardInterrupt (a signal's handler runs as any call returns) landing part way
        does not end it: each step is safe to repeat, the settling starts over until it
        is complete, and the interrupt is raised again afterwards."""
        interrupt: BaseException | None = None
        settled = False
        while not settled:
            try:
                if not self._state._is_owned():  # type: ignore[attr-defined]  # noqa: SLF001
                    self._state.acquire()
                if self._leading:
                    elapsed, count = time.monotonic() - began, len(group)
                    # One assignment with no call in it (a signal's handler runs only as a
                    # call returns): the write is counted once, whatever interrupts.
                    (self._last_write, self._last_group, self.writes, self.batches, self._in_flight,
                     self._leading) = (elapsed, count, self.writes + 1, self.batches + count,
                                       self._in_flight - count, False)
                for ticket, result in zip(group, results):
                    if not ticket.done:
                        ticket.error = error if error is not None else result
                        ticket.done = True
                    self._wake(ticket)
                if self._queue:
                    self._wake_next_leader()
                for drainer in self._drainers:
                    self._wake(drainer)
                settled = True
            except BaseException as exc:
                interrupt = exc
        if interrupt is not None:
            raise interrupt

    def _wake_next_leader(self) -> None:
        """Batches queued with no write in progress need a leader: wake the first of their
        committers already asleep (one still on its way to wait leads when it arrives)."""
        for ticket in self._queue:
            if ticket.waker is not None:
                self._wake(ticket)
                return
