"""The host's run queue: round-robin over addresses with work, one worker per address.

An address is queued at most once; while a worker serves it, a new wake-up is kept as
"again" and the address goes to the back of the queue when the worker is done. Each
service is one slot (at most one inbox item), so a process that always has work waits
its turn behind every other ready process: no process can starve another.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque

__all__ = ["ReadyQueue", "Timers"]


class ReadyQueue:
    """Addresses waiting for a worker, in wake-up order, never two workers on one address."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._order: deque[str] = deque()
        self._queued: set[str] = set()
        self._busy: set[str] = set()
        self._again: set[str] = set()
        self._closed = False

    def wake(self, address: str) -> None:
        with self._cond:
            if address in self._busy:
                self._again.add(address)
            elif address not in self._queued:
                self._queued.add(address)
                self._order.append(address)
                self._cond.notify()

    def take(self, timeout: float) -> str | None:
        """The next address to serve (now marked busy), or None after ``timeout`` or once closed."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._order:
                remaining = deadline - time.monotonic()
                if self._closed or remaining <= 0:
                    return None
                self._cond.wait(remaining)
            if self._closed:
                return None
            address = self._order.popleft()
            self._queued.discard(address)
            self._busy.add(address)
            return address

    def done(self, address: str, again: bool) -> None:
        """The worker finished ``address``; it is queued again (at the back) when it asked
        to be or was woken meanwhile."""
        with self._cond:
            self._busy.discard(address)
            if (again or address in self._again) and address not in self._queued and not self._closed:
                self._queued.add(address)
                self._order.append(address)
                self._cond.notify()
            self._again.discard(address)
            self._cond.notify_all()

    def busy(self, address: str) -> bool:
        with self._cond:
            return address in self._busy

    def quiet(self) -> bool:
        """Nothing queued and nothing being served."""
        with self._cond:
            return not self._order and not self._busy

    def running(self) -> int:
        with self._cond:
            return len(self._busy)

    def wait_unbusy(self, timeout: float | None) -> bool:
        """Wait until no worker is serving an address; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._busy:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def close(self) -> None:
        """Hand out nothing more (what is queued stays undone; it is all still in the store)."""
        with self._cond:
            self._closed = True
            self._order.clear()
            self._queued.clear()
            self._cond.notify_all()


class Timers:
    """Wake-up times per address (an agent's retry, a failed handler's backoff)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heap: list[tuple[float, str]] = []
        self._when: dict[str, float] = {}

    def at(self, address: str, when: float) -> None:
        with self._lock:
            self._when[address] = when
            heapq.heappush(self._heap, (when, address))

    def clear(self, address: str) -> None:
        with self._lock:
            self._when.pop(address, None)

    def waiting(self, address: str, now: float) -> bool:
        """True while ``address`` has a wake-up time still in the future."""
        with self._lock:
            when = self._when.get(address)
            return when is not None and when > now

    def pending(self) -> set[str]:
        with self._lock:
            return set(self._when)

    def due(self, now: float) -> list[str]:
        """Addresses whose time has come (each removed)."""
        found = []
        with self._lock:
            while self._heap and self._heap[0][0] <= now:
                when, address = heapq.heappop(self._heap)
                if self._when.get(address) == when:
                    del self._when[address]
                    found.append(address)
        return found

    def next(self) -> float | None:
        with self._lock:
            while self._heap and self._when.get(self._heap[0][1]) != self._heap[0][0]:
                heapq.heappop(self._heap)
            return self._heap[0][0] if self._heap else None
