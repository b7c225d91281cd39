"""``svit.host.Host``: many processes of one store on a bounded pool of worker threads.

One scheduler thread finds work (the store's mailbox and non-empty inboxes, polled
every ``poll_interval``; plus every wake-up this host causes itself) and queues the
address; ``workers`` threads serve queued addresses round-robin, one address per
worker at a time. Serving an address is one slot:

1. settle its outbox (intents already delivered leave ``/system/outbox``),
2. deliver waiting mail into its ``/inbox`` (one commit, held back while the inbox is
   at ``inbox_limit``),
3. handle at most ONE inbox item: a script handler's activation that acknowledges the
   item in its own commit, or one reason/act turn of the loop (``run_next_turn``).

An address with more work goes to the back of the queue, so one busy process cannot
starve the others. An idle process costs nothing: no thread, and its durable handle is
open only while it sits in a bounded LRU (``open_handles``).

On a shared store (PostgreSQL) each address is served by the one host holding its lease
(:mod:`svit.host.leases`); every commit of the address carries the lease as a fence, so
a host that lost the lease (it paused past the TTL, another host took over) has its
commit refused; the host counts those refusals (:attr:`HostStats.stale_refusals`).
On the embedded store the one open store is the only writer and no lease is used.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import InvalidValue, PersistenceConflict, PersistenceNotFound, PersistenceUnavailable, SvitError
from ..loop.builders import LoopOptions
from ..loop.turns import run_next_turn
from ..paths import validate_address
from ..redact import redact
from ..store.mailbox import MAX_LIST_LIMIT
from ..thread import Message
from .leases import Lease, LeaseKeeper
from .schedule import ReadyQueue, Timers

if TYPE_CHECKING:
    from ..reasoners import Reasoner
    from ..store import DurableProcess, ProcessStore

__all__ = ["AddressFailure", "Host", "HostStats", "HostTimeout", "ReasonerFactory"]

_log = logging.getLogger("svit.host")

#: Why an address is woken (besides its inbox, which every slot looks at): mail may be
#: waiting for it, or delivery outcomes to settle in its outbox.
DELIVER = "deliver"
SETTLE = "settle"
EVERYTHING = frozenset({DELIVER, SETTLE})
#: An outbox longer than this is settled even while the inbox has items to handle.
SETTLE_AT = 32

#: Makes the reasoner of one agent address (called once per opened handle).
ReasonerFactory = Callable[[str], "Reasoner"]


class HostTimeout(SvitError, TimeoutError):
    """``Host.idle`` ran out of time with work still waiting or running."""

    code, prefix = "host_timeout", "host did not become idle in time"


@dataclass(frozen=True)
class AddressFailure:
    """Failed handler activations (or set-aside agent items) of one address."""

    count: int
    last_error: dict[str, Any]


@dataclass(frozen=True)
class HostStats:
    """Counters of one host since it was made."""

    turns: int
    delivered: int
    undeliverable: int
    failures: int
    stale_refusals: int
    conflicts: int
    open_handles: int
    leases: int
    workers: int


@dataclass
class _Route:
    prefix: str
    script: str | None = None
    reasoner: ReasonerFactory | None = None
    options: Any = None


@dataclass
class _Entry:
    """One open address: its durable handle, its lease (shared store) and its reasoner."""

    address: str
    handle: DurableProcess
    lease: Lease | None
    reasoner: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def _sender_of(message_id: str) -> str | None:
    """The sender address of an intent id ``<sender>:<version>:<index>``."""
    parts = message_id.rsplit(":", 2)
    return parts[0] if len(parts) == 3 else None


def _error_record(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, SvitError):
        return {"code": exc.code, "message": exc.message}
    return {"code": "host_error", "message": redact(f"{type(exc).__name__}: {exc}")}


class Host:
    """Runs the processes of one store: delivers their mail and handles their inboxes."""

    def __init__(
        self,
        store: ProcessStore,
        *,
        workers: int = 4,
        poll_interval: float = 0.05,
        inbox_limit: int | None = None,
        delivery_batch: int = 64,
        open_handles: int = 1024,
        lease_ttl: float = 5.0,
        owner: str | None = None,
        retry_backoff: tuple[float, float] = (0.05, 5.0),
        scan_limit: int = 1000,
        on_turn: Callable[[str, str], None] | None = None,
    ) -> None:
        """``workers`` threads serve the queued addresses; the mailbox is polled every
        ``poll_interval`` seconds (at most ``scan_limit`` addresses a scan); a delivery
        commits up to ``delivery_batch`` messages and none into an inbox holding
        ``inbox_limit`` items; at most ``open_handles`` durable handles stay open; on a
        shared store leases last ``lease_ttl`` seconds and name this host ``owner``
        (default: a fresh id); a failed handler waits ``retry_backoff`` = (first, most)
        seconds, doubling, before its item is tried again."""
        if type(workers) is not int or not 1 <= workers <= 1024:
            raise InvalidValue("workers must be an integer from 1 to 1024")
        if not isinstance(poll_interval, (int, float)) or not 0 < poll_interval <= 60:
            raise InvalidValue("poll_interval must be more than 0 and at most 60 seconds")
        # The mailbox takes counts of at most MAX_LIST_LIMIT: a larger one would fail every
        # delivery or poll, quietly, so it is refused here.
        if inbox_limit is not None and (type(inbox_limit) is not int or not 1 <= inbox_limit <= MAX_LIST_LIMIT):
            raise InvalidValue(f"inbox_limit must be an integer from 1 to {MAX_LIST_LIMIT}, or None")
        if type(delivery_batch) is not int or not 1 <= delivery_batch <= MAX_LIST_LIMIT:
            raise InvalidValue(f"delivery_batch must be an integer from 1 to {MAX_LIST_LIMIT}")
        if type(scan_limit) is not int or not 1 <= scan_limit <= MAX_LIST_LIMIT:
            raise InvalidValue(f"scan_limit must be an integer from 1 to {MAX_LIST_LIMIT}")
        if (not isinstance(retry_backoff, tuple) or len(retry_backoff) != 2
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in retry_backoff)
                or not 0 < retry_backoff[0] <= retry_backoff[1]):
            raise InvalidValue("retry_backoff must be (first, most) seconds with 0 < first <= most")
        if type(open_handles) is not int or open_handles < workers:
            raise InvalidValue("open_handles must be an integer of at least workers")
        if not isinstance(lease_ttl, (int, float)) or lease_ttl <= 0:
            raise InvalidValue("lease_ttl must be a positive number of seconds")
        self.store = store
        self.workers = workers
        self.poll_interval = float(poll_interval)
        self.inbox_limit = inbox_limit
        self.delivery_batch = delivery_batch
        self.open_handles = open_handles
        self.retry_backoff = retry_backoff
        self.scan_limit = scan_limit
        #: Called as ``on_turn(address, outcome)`` after each handled inbox item
        #: (``"handled"``, ``"done"``, ``"retry"``, ``"set_aside"``, ``"failed"``); for metrics.
        #: It runs once the slot let go of the address, so it may ``send`` to it.
        self.on_turn = on_turn
        self.owner = owner if owner is not None else f"host-{uuid.uuid4().hex}"
        self.shared = bool(getattr(store.engine, "shared", False))
        self.leases = LeaseKeeper(store.engine, self.owner, float(lease_ttl)) if self.shared else None
        self._routes: list[_Route] = []
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._entries_lock = threading.Lock()
        self._opening: dict[str, threading.Lock] = {}
        self._needs: dict[str, set[str]] = {}
        self._needs_lock = threading.Lock()
        #: Addresses another live host holds, with when its lease runs out (not polled till then).
        self._foreign: dict[str, float] = {}
        #: Where each mailbox listing goes on at the next poll (absent: from the start).
        self._cursors: dict[str, str] = {}
        self._queue = ReadyQueue()
        self._agent_due = Timers()
        self._parked = Timers()
        self._backoff: dict[str, float] = {}
        #: Slots in a row that held an address's mail back while its inbox had items.
        self._deferrals: dict[str, int] = {}
        self._failures: dict[str, AddressFailure] = {}
        self._counts = {"turns": 0, "delivered": 0, "undeliverable": 0, "failures": 0,
                        "stale_refusals": 0, "conflicts": 0}
        self._state = threading.Condition()
        self._progress = 0
        self._round = 0
        self._quiet_streak = 0
        self._last_error: dict[str, Any] | None = None
        #: Set once the store went terminal (a failed synced write): the host stops.
        self._broken: PersistenceUnavailable | None = None
        self._threads: list[threading.Thread] = []
        #: Per worker: the on_turn reports of the slot it runs (made after the slot).
        self._slot = threading.local()
        self._started = False
        self._stopped = False
        self._accepting = False
        self._stopping = threading.Event()
        self._wakeup = threading.Event()

    # ------------------------------------------------------------------ configuration
    def handle(self, prefix: str, *, script: str) -> Host:
        """Run ``script`` (a ``/lib/<name>`` path of each process) for every inbox item of
        the addresses starting with ``prefix``: ``main(item)``, the item acknowledged in
        the activation's own commit. A failed activation leaves the item in place."""
        if type(script) is not str or not script.startswith("/lib/"):
            raise InvalidValue("script must be a /lib/<name> path")
        self._add_route(_Route(self._check_prefix(prefix), script=script))
        return self

    def agents(self, prefix: str, *, reasoner: ReasonerFactory, options: LoopOptions | None = None) -> Host:
        """Run one reason/act turn of the loop per inbox item of the addresses starting
        with ``prefix``; ``reasoner(address)`` makes each agent's reasoner."""
        if not callable(reasoner):
            raise InvalidValue("reasoner must be a callable that makes a reasoner for an address")
        self._add_route(_Route(self._check_prefix(prefix), reasoner=reasoner, options=options))
        return self

    @staticmethod
    def _check_prefix(prefix: str) -> str:
        if type(prefix) is not str or not prefix.startswith("svit://"):
            raise InvalidValue("a route prefix must be text starting with svit://")
        return prefix

    def _add_route(self, route: _Route) -> None:
        if self._started:
            raise InvalidValue("routes are registered before the host starts")
        self._routes = sorted([r for r in self._routes if r.prefix != route.prefix] + [route],
                              key=lambda r: len(r.prefix), reverse=True)

    def _route(self, address: str) -> _Route | None:
        for route in self._routes:  # longest prefix first
            if address.startswith(route.prefix):
                return route
        return None

    # ------------------------------------------------------------------ observation
    def stats(self) -> HostStats:
        with self._state:
            counts = dict(self._counts)
        with self._entries_lock:
            opened = len(self._entries)
            leased = sum(1 for e in self._entries.values() if e.lease is not None)
        return HostStats(counts["turns"], counts["delivered"], counts["undeliverable"], counts["failures"],
                         counts["stale_refusals"], counts["conflicts"], opened, leased, self.workers)

    @property
    def stale_refusals(self) -> int:
        """Commits refused because this host's lease on the address had been taken over."""
        with self._state:
            return self._counts["stale_refusals"]

    def failures(self) -> dict[str, AddressFailure]:
        """Failed activations per address: how many, and the last error."""
        with self._state:
            return dict(self._failures)

    @property
    def last_error(self) -> dict[str, Any] | None:
        """The last unexpected failure of the host's own machinery (None when none)."""
        return self._last_error

    def owned(self) -> list[str]:
        """Addresses whose handle (and lease, on a shared store) this host holds now."""
        with self._entries_lock:
            return list(self._entries)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Host:
        """Start the scheduler and the worker pool (once)."""
        if self._started:
            raise InvalidValue("host already started")
        self._started = True
        self._accepting = True
        for index in range(self.workers):
            thread = threading.Thread(target=self._work, name=f"svit-host-worker-{index}", daemon=True)
            self._threads.append(thread)
        self._threads.append(threading.Thread(target=self._schedule, name="svit-host-scheduler", daemon=True))
        if self.leases is not None:
            self._threads.append(threading.Thread(target=self._keep_leases, name="svit-host-leases", daemon=True))
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, drain: bool = True, timeout: float | None = 30.0) -> None:
        """Take no new work; with ``drain`` wait for the running slots to finish (each is
        whole commits, so nothing is left half-done), then release leases and handles."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        self._accepting = False
        self._stopping.set()
        self._queue.close()
        self._wakeup.set()
        if drain:
            self._queue.wait_unbusy(timeout)
            for thread in self._threads:
                thread.join(timeout)
        with self._entries_lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for entry in entries:
            self._close(entry)
        with self._state:
            self._state.notify_all()

    def __enter__(self) -> Host:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def idle(self, timeout: float = 10.0) -> None:
        """Return once every mailbox this host can deliver is delivered and settled, no
        routed inbox has an item to handle, and no turn is running or due (an agent's
        retry counts as due; a failed handler's item waiting for its backoff does not).
        ``HostTimeout`` after ``timeout`` seconds."""
        if self._broken is not None:
            raise self._broken
        if not self._started or self._stopping.is_set():
            raise InvalidValue("idle needs a running host")
        deadline = time.monotonic() + timeout
        with self._state:
            start = self._round
            while not (self._round >= start + 2 and self._quiet_streak >= 2):
                remaining = deadline - time.monotonic()
                if self._broken is not None:
                    raise self._broken
                if remaining <= 0 or self._stopping.is_set():
                    raise HostTimeout(f"work still waiting after {timeout} seconds")
                self._state.wait(min(remaining, self.poll_interval))

    # ------------------------------------------------------------------ sending
    def send(self, address: str, message: Any) -> None:
        """Append ``message`` to ``address``'s ``/inbox`` (one commit) and wake it.

        A :class:`~svit.thread.Message` goes in as the loop's message record; any other
        value goes in as a message item ``{"kind", "message_id", "from", "body"}``
        from ``svit://host``. On a shared store the address's lease is taken first
        (``PersistenceConflict`` when another live host holds it).
        """
        validate_address(address)
        item = message.to_json() if isinstance(message, Message) else {
            "kind": "message", "message_id": f"svit://host:{uuid.uuid4().hex}:0", "from": "svit://host", "body": message}
        while True:
            entry = self._open(address)
            if entry is None:
                raise PersistenceConflict(f"{address} is held by another host")
            with entry.lock:
                if self._forgotten(entry):
                    continue  # evicted or dropped while we waited: open it again
                try:
                    entry.handle.enqueue_inbox(item)
                except PersistenceConflict:
                    self._refused(entry)
                    raise
                break
        self._progressed()
        self._wake(address)

    def _wake(self, address: str, *needs: str) -> None:
        if needs:
            with self._needs_lock:
                self._needs.setdefault(address, set()).update(needs)
        self._queue.wake(address)

    def _take_needs(self, address: str) -> set[str]:
        with self._needs_lock:
            return self._needs.pop(address, set())

    # ------------------------------------------------------------------ handles and leases
    def _open(self, address: str) -> _Entry | None:
        """The open entry of ``address`` (resumed and leased when needed), or None when
        another host holds it; raises ``PersistenceNotFound`` for an address not stored."""
        with self._entries_lock:
            entry = self._entries.get(address)
            if entry is not None:
                self._entries.move_to_end(address)
                return entry
            gate = self._opening.setdefault(address, threading.Lock())
        with gate:  # one opening per address: a second handle would make the first stale
            with self._entries_lock:
                entry = self._entries.get(address)
                if entry is not None:
                    return entry
            try:
                return self._open_new(address)
            finally:
                with self._entries_lock:
                    self._opening.pop(address, None)

    def _open_new(self, address: str) -> _Entry | None:
        lease = None
        if self.leases is not None:
            lease, theirs = self.leases.claim(address)
            if lease is None:
                if theirs is not None:
                    with self._entries_lock:
                        self._foreign[address] = theirs.expires
                return None
            with self._entries_lock:
                self._foreign.pop(address, None)
        try:
            handle = self.store.resume(address)
        except BaseException:
            if lease is not None and self.leases is not None:
                self.leases.release(lease)
            raise
        if lease is not None:
            handle.fences = [lease.fence]
        route = self._route(address)
        try:
            reasoner = route.reasoner(address) if route is not None and route.reasoner is not None else None
        except BaseException:  # the factory failed: nothing of this opening stays held
            handle.close()
            if lease is not None and self.leases is not None:
                self.leases.release(lease)
            raise
        entry = _Entry(address, handle, lease, reasoner)
        evicted: list[_Entry] = []
        with self._entries_lock:
            self._entries[address] = entry
            if len(self._entries) > self.open_handles:
                for other in list(self._entries.values()):
                    if len(self._entries) - len(evicted) <= self.open_handles:
                        break
                    if (other.address != address and not self._queue.busy(other.address)
                            and other.lock.acquire(blocking=False)):
                        evicted.append(other)  # held until closed: no send() can use it meanwhile
                for other in evicted:
                    del self._entries[other.address]
        for other in evicted:
            try:
                self._close(other)
            finally:
                other.lock.release()
        return entry

    def _close(self, entry: _Entry) -> None:
        try:
            entry.handle.close()
            if entry.lease is not None and self.leases is not None:
                self.leases.release(entry.lease)
        except SvitError as exc:
            self._last_error = _error_record(exc)

    def _forget(self, entry: _Entry) -> None:
        """Drop a stale entry (its lease lost or its head moved elsewhere)."""
        with self._entries_lock:
            if self._entries.get(entry.address) is entry:
                del self._entries[entry.address]
        entry.handle.close()

    def _renew(self, entry: _Entry) -> bool:
        """Keep the entry's lease fresh; False when it was lost."""
        if entry.lease is None or self.leases is None or not self.leases.needs_renewal(entry.lease):
            return True
        renewed = self.leases.renew(entry.lease)
        if renewed is None:
            return False
        entry.lease = renewed
        entry.handle.fences = [renewed.fence]
        return True

    def _keep_leases(self) -> None:
        """The lease thread (shared stores only): renews held leases on its own cadence, so
        a slow poll or a busy pool never lets them lapse."""
        assert self.leases is not None
        while not self._stopping.wait(self.leases.ttl / 8):
            with self._entries_lock:
                held = list(self._entries.values())
            self._renew_idle(held)

    def _renew_idle(self, held: list[_Entry]) -> None:
        """Renew the held leases that need it and that no slot is using, in one write (a
        slot in progress renews its own first, so its commits never carry a fence that
        moved); an entry whose lease was lost is dropped."""
        keeper = self.leases
        if keeper is None:
            return
        locked: list[_Entry] = []
        try:
            for entry in held:
                if entry.lease is not None and keeper.needs_renewal(entry.lease) and entry.lock.acquire(blocking=False):
                    locked.append(entry)
            current = [e for e in locked if e.lease is not None and not self._forgotten(e)]
            if not current:
                return
            try:
                renewed = keeper.renew_many([e.lease for e in current if e.lease is not None])
            except SvitError as exc:
                self._last_error = _error_record(exc)
                return
            for entry in current:
                lease = renewed.get(entry.address)
                if lease is None:
                    self._forget(entry)
                else:
                    entry.lease = lease
                    entry.handle.fences = [lease.fence]
        finally:
            for entry in locked:
                entry.lock.release()

    # ------------------------------------------------------------------ the scheduler
    def _schedule(self) -> None:
        next_poll = 0.0
        while not self._stopping.is_set():
            now = time.time()
            for address in self._agent_due.due(now) + self._parked.due(now):
                self._wake(address)
            if now >= next_poll:
                if not self._cursors:  # a round is a whole pass over the listings
                    self._quiet_check()
                try:
                    self._poll()
                except PersistenceUnavailable as exc:
                    self._store_failed(exc)
                except SvitError as exc:
                    self._last_error = _error_record(exc)
                    _log.warning("host poll failed: %s", exc.message)
                next_poll = time.time() + self.poll_interval
            wait = next_poll - time.time()
            upcoming = self._agent_due.next()
            if upcoming is not None:
                wait = min(wait, upcoming - time.time())
            parked = self._parked.next()
            if parked is not None:
                wait = min(wait, parked - time.time())
            if wait > 0:
                self._wakeup.wait(wait)
            self._wakeup.clear()

    def _poll(self) -> None:
        """Queue every address the store says has work for a host.

        Each listing takes at most ``scan_limit`` addresses a poll and the next poll goes
        on after the last one (back to the start after a short page), so addresses no
        slot can serve (unrouted inboxes, full inboxes, parked handlers, other hosts'
        addresses) never keep the ones after them from being found."""
        mailbox = self.store.mailbox
        now = time.time()
        with self._entries_lock:
            foreign = {a for a, expires in self._foreign.items() if expires > now}
            self._foreign = {a: self._foreign[a] for a in foreign}
        for target in self._page("targets", mailbox.targets):
            if target not in foreign:
                self._wake(target, DELIVER)
        for sender in self._page("unsettled", mailbox.unsettled):
            if sender not in foreign:
                self._wake(sender, SETTLE)
        for address in self._page("ready", mailbox.ready):
            if address not in foreign and self._route(address) is not None and not self._parked.waiting(address, now):
                self._wake(address)

    def _page(self, name: str, listing: Callable[..., list[str]]) -> list[str]:
        """The next page of one of the mailbox's listings; its cursor moves on."""
        found = listing(limit=self.scan_limit, after=self._cursors.get(name))
        if len(found) < self.scan_limit:
            self._cursors.pop(name, None)  # the end: the next poll starts again
        else:
            self._cursors[name] = found[-1]
        return found

    def _store_failed(self, exc: PersistenceUnavailable) -> None:
        """A closed or terminal store ends the host's work (reopen the store, start a new
        host); an unavailable one that is still sound (a commit that did not happen) is
        only recorded, the item stays and is tried again."""
        self._last_error = _error_record(exc)
        if not (self.store.terminal or self.store.closed):
            return
        with self._state:
            if self._broken is not None:
                return
            self._broken = exc
            self._state.notify_all()
        _log.error("host stops: %s", exc.message)
        self._accepting = False
        self._stopping.set()
        self._queue.close()
        self._wakeup.set()

    @property
    def failed(self) -> PersistenceUnavailable | None:
        """Why the host stopped on its own (its store went terminal or closed), or None."""
        return self._broken

    def _quiet_check(self) -> None:
        """One poll round: quiet when nothing ran or changed since the previous round's
        poll, nothing is queued or running, and no agent retry is due."""
        with self._state:
            quiet = (self._progress == 0 and self._queue.quiet() and not self._agent_due.pending())
            self._quiet_streak = self._quiet_streak + 1 if quiet else 0
            self._progress = 0
            self._round += 1
            self._state.notify_all()

    def _progressed(self) -> None:
        with self._state:
            self._progress += 1

    def _count(self, name: str, by: int = 1) -> None:
        with self._state:
            self._counts[name] += by

    # ------------------------------------------------------------------ the workers
    def _work(self) -> None:
        while not self._stopping.is_set():
            address = self._queue.take(timeout=0.2)
            if address is None:
                continue
            again = False
            self._slot.notes = []
            try:
                again = self._serve(address)
            except PersistenceUnavailable as exc:
                self._store_failed(exc)
            except BaseException as exc:  # a worker outlives whatever one slot raised
                # The host's own machinery, or a reasoner (or its factory) raising past the
                # loop (even SystemExit): recorded against the address, which waits a
                # backoff; the worker goes on serving the others.
                record = _error_record(exc)
                self._last_error = record
                _log.warning("host failed serving %s: %s", address, record["message"])
                self._fail(address, record)
                self._back_off(address)
            finally:
                notes, self._slot.notes = self._slot.notes, None
                for noted in notes:  # outside the address's lock: on_turn may send to it
                    self._call_on_turn(*noted)
                self._queue.done(address, again and self._accepting)

    def _serve(self, address: str) -> bool:
        """One slot for ``address``; True when it made progress (serve it again later)."""
        needs = self._take_needs(address)
        with self._entries_lock:
            fresh = address not in self._entries
        try:
            entry = self._open(address)
        except PersistenceNotFound:
            refused = self.store.mailbox.refuse_absent(address)
            if refused:
                self._count("undeliverable", len(refused))
                self._progressed()
                for message_id in refused:
                    _log.warning("message %s to %s is undeliverable: no such address", message_id, address)
                    sender = _sender_of(message_id)
                    if sender is not None:
                        self._wake(sender, SETTLE)
            return False
        if entry is None:
            return False
        with entry.lock:
            if self._forgotten(entry):
                return True
            try:
                return self._serve_entry(entry, EVERYTHING if fresh else needs)
            except PersistenceConflict:
                self._refused(entry)
                self._progressed()
                return True

    def _refused(self, entry: _Entry) -> None:
        """A commit of ``entry`` was refused: drop the stale handle, and count a stale-owner
        refusal when the lease it carried is no longer ours (else another writer moved the head)."""
        self._forget(entry)
        if entry.lease is not None and self.leases is not None and not self.leases.held_by_us(entry.lease):
            self._count("stale_refusals")
        else:
            self._count("conflicts")

    def _forgotten(self, entry: _Entry) -> bool:
        with self._entries_lock:
            return self._entries.get(entry.address) is not entry

    def _serve_entry(self, entry: _Entry, needs: set[str] | frozenset[str]) -> bool:
        """Settle, deliver (each only when there may be something to do: a fresh handle,
        or a wake-up that said so) and handle at most one inbox item."""
        if not self._renew(entry):
            self._forget(entry)  # taken over while we were away: nothing was committed with it
            return False
        handle = entry.handle
        mailbox = self.store.mailbox
        progressed = False
        route = self._route(entry.address)
        if route is not None and handle.inbox_front() is not None:
            # Items to handle first: mail and outcomes gather meanwhile and go in one commit
            # each once the inbox is empty (an outbox grown long is settled anyway).
            deferred = set(needs)
            if SETTLE in deferred and len(handle.message_intents()) > SETTLE_AT:
                deferred.discard(SETTLE)
                if mailbox.settle(handle) is not None:
                    progressed = True
            now_too: set[str] = set()
            now = time.time()
            if DELIVER in deferred and not (self._parked.waiting(entry.address, now)
                                            or self._agent_due.waiting(entry.address, now)):
                # Mail waits for the inbox to drain, but not for ever: items sent straight
                # to the inbox (host.send) may keep it from draining. (A head that is failing
                # counts no slots: its mail stays in the mailbox meanwhile.)
                waited = self._deferrals.get(entry.address, 0) + 1
                self._deferrals[entry.address] = waited
                if waited >= self.delivery_batch:
                    deferred.discard(DELIVER)
                    now_too.add(DELIVER)
            if deferred:
                with self._needs_lock:
                    self._needs.setdefault(entry.address, set()).update(deferred)
            needs = now_too
        if DELIVER in needs:
            self._deferrals.pop(entry.address, None)
        if SETTLE in needs and mailbox.settle(handle) is not None:
            progressed = True
        if DELIVER in needs:
            delivery = mailbox.deliver(handle, limit=self.delivery_batch, inbox_limit=self.inbox_limit)
            if delivery.delivered or delivery.undeliverable:
                progressed = True
                _log.debug("delivered %d message(s) to %s", len(delivery.delivered), entry.address)
                for message_id, reason in delivery.undeliverable:
                    _log.warning("message %s to %s is undeliverable: %s", message_id, entry.address, reason)
                self._count("delivered", len(delivery.delivered))
                self._count("undeliverable", len(delivery.undeliverable))
                senders = {_sender_of(mid) for mid in delivery.delivered}
                senders.update(_sender_of(mid) for mid, _reason in delivery.undeliverable)
                for sender in senders:
                    if sender is not None:
                        self._wake(sender, SETTLE)
                if len(delivery.delivered) + len(delivery.undeliverable) >= self.delivery_batch:
                    self._wake(entry.address, DELIVER)  # a full batch: more may wait
        if route is not None and self._accepting and self._turn(entry, route):
            progressed = True
            for intent in handle.message_intents():
                if "undeliverable" not in intent and isinstance(intent.get("to"), str):
                    self._wake(intent["to"], DELIVER)
        if progressed:
            self._progressed()
        return progressed

    def _turn(self, entry: _Entry, route: _Route) -> bool:
        """Handle at most one inbox item; True when something was committed."""
        now = time.time()
        address = entry.address
        if self._parked.waiting(address, now) or self._agent_due.waiting(address, now):
            return False
        handle = entry.handle
        if route.script is not None:
            item = handle.inbox_front()
            if item is None:
                return False
            try:
                handle.exec_inbox_item(route.script, item)
            except PersistenceConflict:
                raise
            except SvitError as exc:
                self._fail(address, _error_record(exc))
                self._notify(address, "failed")
                self._back_off(address)
                return False
            self._backoff.pop(address, None)
            self._count("turns")
            self._notify(address, "handled")
            return True
        return self._agent_turn(entry, route, now)

    def _back_off(self, address: str) -> None:
        """Park ``address``'s handling for its next backoff (doubling up to the cap)."""
        delay = min(self._backoff.get(address, self.retry_backoff[0] / 2) * 2, self.retry_backoff[1])
        self._backoff[address] = delay
        self._parked.at(address, time.time() + delay)
        self._wakeup.set()

    def _agent_turn(self, entry: _Entry, route: _Route, now: float) -> bool:
        options = route.options if route.options is not None else LoopOptions()
        outcome = run_next_turn(entry.handle, entry.reasoner, options, now=now)
        if outcome.kind == "empty":
            return False
        if outcome.kind == "retry" and outcome.retry_at is not None:
            self._agent_due.at(entry.address, outcome.retry_at)
            self._wakeup.set()
        elif outcome.kind == "set_aside":
            self._fail(entry.address, outcome.error or {"code": "set_aside", "message": "item set aside"})
        else:
            self._count("turns")
        self._backoff.pop(entry.address, None)
        self._notify(entry.address, outcome.kind)
        return True

    def _notify(self, address: str, outcome: str) -> None:
        """Report one handled item to ``on_turn`` once the slot let go of the address."""
        notes = getattr(self._slot, "notes", None)
        if notes is not None:
            notes.append((address, outcome))
        else:
            self._call_on_turn(address, outcome)

    def _call_on_turn(self, address: str, outcome: str) -> None:
        if self.on_turn is not None:
            try:
                self.on_turn(address, outcome)
            except BaseException as exc:  # an observer never stops the host (nor its worker)
                self._last_error = _error_record(exc)

    def _fail(self, address: str, error: dict[str, Any]) -> None:
        with self._state:
            previous = self._failures.get(address)
            self._failures[address] = AddressFailure((previous.count if previous else 0) + 1, error)
            self._counts["failures"] += 1
