"""Bounded, independent observers for the outbox and the runtime event stream.

Each observer keeps at most ``capacity`` undelivered items. When a slow observer
overflows, its oldest items are dropped and its next receive raises :class:`Lagged`
with the number lost, so loss is always reported, never silent. Publishing never blocks
the loop.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable, Generic, TypeVar

from .errors import Closed, Empty, Lagged

T = TypeVar("T")
CAPACITY = 64


class Observer(Generic[T]):
    """One subscriber's queue; receive with :meth:`recv` or :meth:`try_recv`."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._items: deque[T] = deque()
        self._missed = 0
        self._closed = False
        self._cond = threading.Condition()
        self._listeners: tuple[Callable[[], None], ...] = ()

    def listen(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the publishing thread, without blocking) after every
        push and on close, so a waiter that cannot block on the condition (an event
        loop) learns when to look again. The item is queued before the call."""
        with self._cond:
            self._listeners += (callback,)

    def push(self, item: T) -> None:
        with self._cond:
            if self._closed:
                return
            if len(self._items) >= self._capacity:
                self._items.popleft()
                self._missed += 1
            self._items.append(item)
            self._cond.notify_all()
            listeners = self._listeners
        for listener in listeners:
            listener()

    def end(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            listeners = self._listeners
        for listener in listeners:
            listener()

    def _take(self) -> T:
        if self._missed:
            missed, self._missed = self._missed, 0
            raise Lagged(missed)
        if self._items:
            return self._items.popleft()
        if self._closed:
            raise Closed()
        raise Empty()

    def try_recv(self) -> T:
        """The next item now; :class:`Empty` if none, :class:`Closed` once drained and closed."""
        with self._cond:
            return self._take()

    def recv(self, timeout: float | None = None) -> T:
        """Wait up to ``timeout`` seconds (forever if None); :class:`Empty` on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not (self._items or self._missed or self._closed):
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise Empty()
                self._cond.wait(remaining)
            return self._take()

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def has_news(self) -> bool:
        """Whether an item or a loss report is waiting."""
        with self._cond:
            return bool(self._items or self._missed)


class Broadcast(Generic[T]):
    """Fan-out to every observer subscribed so far; late subscribers see only later items.

    With ``retain_unobserved``, items published while nobody is subscribed are kept (up
    to ``capacity``, with loss reported as :class:`Lagged`) and handed to the next
    subscriber, so ``send`` followed by ``outbox().recv()`` cannot miss a fast reply.
    """

    def __init__(self, capacity: int = CAPACITY, *, retain_unobserved: bool = False) -> None:
        self._capacity = capacity
        self._observers: list[Observer[T]] = []
        self._closed = False
        self._lock = threading.Lock()
        self._retain = retain_unobserved
        self._pending: Observer[T] = Observer(capacity)

    def subscribe(self) -> Observer[T]:
        with self._lock:
            held = self._pending
            if self._retain and held.has_news():
                observer, self._pending = held, Observer(self._capacity)
            else:
                observer = Observer(self._capacity)
            if self._closed:
                observer.end()
            else:
                self._observers.append(observer)
        return observer

    def publish(self, item: T) -> None:
        with self._lock:
            observers = list(self._observers)
            if not observers and self._retain and not self._closed:
                # Kept for the next subscriber: queued under the lock, so a subscribe
                # racing this publish either takes the item or comes after it.
                self._pending.push(item)
                return
        for observer in observers:
            observer.push(item)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            observers, self._observers = self._observers, []
        for observer in observers:
            observer.end()

    @property
    def closed(self) -> bool:
        return self._closed


__all__ = ["Broadcast", "Observer", "CAPACITY"]
