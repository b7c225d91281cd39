"""The asyncio surface of the reasoning loop: :class:`AsyncSvit` and async reasoners.

The loop itself stays what :mod:`svit.loop.svit` describes, one worker thread per Svit.
:class:`AsyncSvit` lets a host that lives on an asyncio event loop drive that thread
without ever blocking the event loop. Create it inside the running loop::

    agent = AsyncSvit(Svit.builder(address).reasoner(reasoner).build())
    replies = agent.outbox()          # subscribe before sending, as with Svit
    agent.start()
    await agent.send("Remember blue.")
    await agent.idle(timeout=30)      # everything sent so far is handled; the inbox stays open
    reply = await replies.recv()
    await agent.block(timeout=30)     # Svit.block: seal, drain, stop; TurnFailed if an item was set aside
    async for event in agent.events(): ...   # ends once the loop has stopped

``idle``, ``block`` and ``recv`` take an optional timeout and raise ``TimeoutError``
when it passes (the loop keeps running, as with ``Svit.block``). ``async for`` over an
observer ends when the loop stops and raises :class:`~svit.loop.errors.Lagged` if the
observer fell behind; iterating again continues after the loss.

Async reasoners (``async def complete(system_prompt, messages, tools) -> Reply``, see
:class:`svit.reasoners.AsyncReasoner`) are called by the loop thread like any reasoner;
the coroutine they return is handed to the event loop of the Svit's :class:`AsyncSvit`
and the loop thread waits for its result. A reasoner that raises or times out fails the
turn exactly as a synchronous one does (retried, then set aside); one whose task is
cancelled (the event loop shutting down) fails the turn with ``ReasonerFailed``. An
async reasoner without an :class:`AsyncSvit` on a running loop fails the turn with
``ReasonerUnavailable`` (not retryable: the item is set aside at once).

Hand-offs, and why nothing is lost on cancellation:

- Observers: items are only ever taken on the event loop, by a non-blocking
  ``try_recv``; the publishing thread merely schedules a wake-up
  (``call_soon_threadsafe``) after queueing an item. A cancelled ``recv`` or ``async
  for`` has taken nothing, so the next one receives every remaining item exactly once.
- ``idle``/``block``: the loop thread reports becoming idle or stopping through the same
  kind of wake-up; waiting holds no thread, so cancelling a wait leaves nothing behind.
- ``send`` commits to ``/inbox`` (a store write for a durable Svit, and a wait for the
  process lock while a tool runs) on the default executor; so do ``block``'s seal and a
  first start, which wait for a send in progress. Cancelled before such a call starts,
  it never runs; cancelled once it has started, it is awaited to its end (a send commits
  exactly one message, no worker is left running) and the cancellation is re-raised.

Never call the blocking ``Svit`` methods (``block``, ``Observer.recv``) from the event
loop an async reasoner runs on: the loop thread would wait for the event loop while the
event loop waits for the loop thread. Keep that event loop running until the turns it
serves are done (``await block()``); a call still pending when the event loop is closed
(cancelled by ``asyncio.run`` or not) fails that turn rather than leaving the loop thread
waiting.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Generic, TypeVar

from .errors import Closed, Empty, ReasonerFailed, ReasonerUnavailable, TurnFailed
from .messages import Message
from .observers import Observer

if TYPE_CHECKING:
    from ..process import Change
    from .events import SvitEvent
    from .svit import Svit

T = TypeVar("T")


# ---------------------------------------------------------------------- async reasoners


#: How often the loop thread checks, while an async reasoner runs, that its event loop
#: still exists.
_HOST_LOOP_CHECK_SECONDS = 0.25


def run_on_host_loop(loop: asyncio.AbstractEventLoop | None, awaitable: Awaitable[Any]) -> Any:
    """Run a reasoner's awaitable on the host's event loop and wait for its result.

    Called on the Svit's loop thread only; the reasoner's own exceptions propagate
    unchanged so the turn fails as it would for a synchronous reasoner.
    """
    if loop is None or loop.is_closed() or not loop.is_running():
        _discard(awaitable)
        raise ReasonerUnavailable("an async reasoner needs an AsyncSvit created on a running event loop")
    wrapper = _awaited(awaitable)
    try:
        future = asyncio.run_coroutine_threadsafe(wrapper, loop)
    except RuntimeError:  # the loop closed after the check
        wrapper.close()
        _discard(awaitable)
        raise ReasonerUnavailable("the event loop of the async reasoner is closed") from None
    # A host may close its event loop without cancelling the call (a plain
    # run_until_complete + close, or a call that arrived during shutdown): nothing would
    # ever resolve it then, so the wait looks again now and then instead of for good.
    # (Waiting on the future rather than on its result keeps a reasoner's own
    # TimeoutError apart from this check.)
    while not concurrent.futures.wait([future], timeout=_HOST_LOOP_CHECK_SECONDS).done:
        if loop.is_closed():  # (cancelling would only try to reach the closed loop)
            raise ReasonerFailed("the event loop of the async reasoner closed before it answered")
    try:
        return future.result()
    except concurrent.futures.CancelledError:
        raise ReasonerFailed("the async reasoner was cancelled on its event loop") from None


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _discard(awaitable: Awaitable[Any]) -> None:
    """Close a coroutine that will never run, so it is not reported as never awaited."""
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()


# ---------------------------------------------------------------------- observers


class AsyncObserver(Generic[T]):
    """An :class:`~svit.loop.observers.Observer` read from an event loop.

    Same capacity and reports (``Lagged`` on loss, ``Closed`` once drained and closed);
    ``async for`` ends at ``Closed``. Use it on the event loop it was created for.
    """

    def __init__(self, observer: Observer[T], loop: asyncio.AbstractEventLoop) -> None:
        self._observer = observer
        self._loop = loop
        self._ready = asyncio.Event()
        observer.listen(self._wake)

    def _wake(self) -> None:
        """Run by the publishing thread after an item is queued (or on close)."""
        try:
            self._loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:  # the event loop is closed: nobody can be waiting on it
            pass

    def try_recv(self) -> T:
        """The next item now; ``Empty`` if none, ``Closed`` once drained and closed."""
        return self._observer.try_recv()

    async def recv(self, timeout: float | None = None) -> T:
        """The next item, waiting without blocking the event loop; ``TimeoutError`` after
        ``timeout`` seconds. Cancelling the wait never consumes an item."""
        async with asyncio.timeout(timeout):
            while True:
                self._ready.clear()  # before looking, so a push after the look sets it again
                try:
                    return self._observer.try_recv()
                except Empty:
                    await self._ready.wait()

    def __aiter__(self) -> AsyncObserver[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.recv()
        except Closed:
            raise StopAsyncIteration from None

    def __len__(self) -> int:
        return len(self._observer)


# ---------------------------------------------------------------------- the facade


class AsyncSvit:
    """An asyncio facade over an existing :class:`~svit.loop.svit.Svit`.

    Bound to the event loop it is created on (which also runs the Svit's async
    reasoner); see the module docstring for the hand-offs.
    """

    def __init__(self, svit: Svit) -> None:
        loop = asyncio.get_running_loop()  # RuntimeError outside a running loop
        svit.worker.bind_host_loop(loop)
        self._svit = svit
        self._loop = loop

    @property
    def svit(self) -> Svit:
        """The wrapped Svit, for its synchronous (non-waiting) host API."""
        return self._svit

    def start(self) -> None:
        """Start the loop thread (once). ``idle`` and ``block`` start it too, off the
        event loop; this direct call may wait briefly for a send that is committing."""
        self._svit.start()

    async def send(self, message: Message | str) -> Change:
        """Commit ``message`` to ``/inbox`` off the event loop and wake the loop."""
        self._check_loop()
        return await _in_thread(self._loop, self._svit.inbox().send, message)

    async def idle(self, timeout: float | None = None) -> None:
        """Start the loop if needed and wait until it has handled everything in the inbox
        (or stopped); the inbox stays open. ``TurnFailed`` if an item was set aside (or a
        failure stopped the loop)."""
        await self._wait(("idle", "stopped"), timeout, "the Svit loop is still handling its inbox", seal=False)

    async def block(self, timeout: float | None = None) -> None:
        """``Svit.block`` without blocking: seal the inbox, drain it, wait for the loop to
        stop (observers closed). ``TurnFailed`` if an item was set aside."""
        await self._wait(("stopped",), timeout, "the Svit loop is still draining its inbox", seal=True)

    def outbox(self) -> AsyncObserver[Message]:
        """``Svit.outbox()`` (completed replies, retained while unobserved), read async."""
        return AsyncObserver(self._svit.outbox(), self._loop)

    def events(self) -> AsyncObserver[SvitEvent]:
        """``Svit.events()`` (Committed, CanonicalEvent, MessageEvent, Failed), read async."""
        return AsyncObserver(self._svit.events(), self._loop)

    # ------------------------------------------------------------------ internals
    def _check_loop(self) -> None:
        if asyncio.get_running_loop() is not self._loop:
            raise RuntimeError("this AsyncSvit belongs to another event loop")

    def _begin(self, seal: bool) -> None:
        """Off the event loop: sealing or a first start waits while a send commits."""
        if seal:
            self._svit.worker.seal()
            self._svit.worker.ensure_started()
        else:
            self._svit.start()

    async def _wait(self, states: tuple[str, ...], timeout: float | None, late: str, *, seal: bool) -> None:
        self._check_loop()
        ready = asyncio.Event()
        loop = self._loop

        def wake() -> None:  # loop thread, under the Svit's condition: must not block
            try:
                loop.call_soon_threadsafe(ready.set)
            except RuntimeError:
                pass

        self._svit.worker.watch(wake)
        try:
            async with asyncio.timeout(timeout):
                if seal or not self._svit.worker.started:
                    await _in_thread(self._loop, self._begin, seal)
                while True:
                    ready.clear()
                    if self._svit.worker.state in states:
                        break
                    await ready.wait()
        except TimeoutError:
            raise TimeoutError(late) from None
        finally:
            self._svit.worker.unwatch(wake)
        if self._svit.failure is not None:
            raise TurnFailed(self._svit.failure)


class _Job:
    """A blocking call that can be abandoned until it starts, never after."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._fn, self._args = fn, args
        self._lock = threading.Lock()
        self._state = "queued"

    def __call__(self) -> Any:
        with self._lock:
            if self._state == "abandoned":
                return None
            self._state = "running"
        return self._fn(*self._args)

    def abandon(self) -> bool:
        with self._lock:
            if self._state == "queued":
                self._state = "abandoned"
            return self._state == "abandoned"


async def _in_thread(loop: asyncio.AbstractEventLoop, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` on the default executor. If the caller is cancelled, the call either
    never starts or is awaited to its end before the cancellation propagates."""
    job = _Job(fn, args)
    future = loop.run_in_executor(None, job)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        if not job.abandon():
            while not future.done():
                try:
                    await asyncio.shield(future)
                except asyncio.CancelledError:
                    continue  # asked again: the effect still settles first
                except Exception:
                    break  # the call failed; the cancellation is what the caller sees
        raise


__all__ = ["AsyncObserver", "AsyncSvit", "run_on_host_loop"]
