"""Group commit: commits of different processes arriving together share one synced write.

Each commit is acknowledged only after the write holding it returned; compare-and-swap
per address stays exact inside a group; a failed write fails every member of its group
and makes the store terminal; operations that are not commits see every queued commit
written first. Writes are held or slowed through the engine's one writer (the same hook
fault injection uses), so the groups these tests build do not depend on disk timing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from svit import Process
from svit.errors import PersistenceConflict, PersistenceUnavailable
from svit.store import ProcessStore, keys
from svit.store import group as group_module
from svit.store.engine import WriteBatch
from svit.store.faults import FailingWrites
from tests.conftest import reopen

COUNTER = """
(define (main input)
  (let ((next (+ (read "/memory/count") 1)))
    (do (write "/memory/count" next) next)))
"""
THREADS = 8


def address(n: int) -> str:
    return f"svit://local/group/p{n}"


def counter(where: str) -> Process:
    return Process.builder(where).memory("count", 0).library("counter", COUNTER).build()


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the commits to queue"
        time.sleep(0.002)


class RecordingWriter:
    """Wraps the engine's writer: counts synced writes, logs which transactions each one
    carried once it returned, can hold the first write until released, or slow every one."""

    def __init__(self, store: ProcessStore, *, hold_first: bool = False, delay: float = 0.0) -> None:
        self.store = store
        self.engine = store.engine
        self.original = self.engine.writer
        self.release = threading.Event()
        if not hold_first:
            self.release.set()
        self.entered = threading.Event()
        self.delay = delay
        self.writes = 0
        #: ("written", transaction keys) and ("ack", transaction key), in the order they happened.
        self.log: list[tuple[str, Any]] = []
        self.log_lock = threading.Lock()

    def __enter__(self) -> RecordingWriter:
        self.engine.writer = self
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        self.engine.writer = self.original

    def __call__(self, batch: WriteBatch) -> None:
        self.writes += 1
        self.entered.set()
        self.release.wait(20)
        if self.delay:
            time.sleep(self.delay)
        self.original(batch)
        carried = {key for space, key, _ in batch.operations if space == "record" and key.startswith(b"t/")}
        with self.log_lock:
            self.log.append(("written", carried))

    def acknowledged(self, where: str, version: int) -> None:
        """Called by a committer after its commit returned (version ``version`` is position ``version - 1``)."""
        with self.log_lock:
            self.log.append(("ack", keys.transaction_key(where, version - 1)))

    def acks(self) -> int:
        with self.log_lock:
            return sum(1 for kind, _ in self.log if kind == "ack")


def run_threads(targets: list[Callable[[], None]]) -> list[BaseException | None]:
    """Run each target in its own thread; the exception each one raised (or None)."""
    outcomes: list[BaseException | None] = [None] * len(targets)

    def runner(i: int) -> None:
        try:
            targets[i]()
        except BaseException as exc:  # reported to the test
            outcomes[i] = exc

    threads = [threading.Thread(target=runner, args=(i,)) for i in range(len(targets))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()
    return outcomes


def test_concurrent_commits_land_with_the_right_versions_and_chains(store):
    handles = [store.create(counter(address(n))) for n in range(THREADS)]
    rounds = 15
    with RecordingWriter(store, delay=0.002) as writer:

        def work(handle: Any) -> Callable[[], None]:
            def commit_all() -> None:
                for expected in range(1, rounds + 1):
                    activation = handle.exec("/lib/counter")
                    assert activation.version == expected and activation.output == expected
                    writer.acknowledged(handle.address, activation.version)
            return commit_all

        assert run_threads([work(h) for h in handles]) == [None] * THREADS
    commits = THREADS * rounds
    # Shared syncs: fewer synced writes than acknowledged commits (counted at the engine).
    assert writer.writes < commits, (writer.writes, commits)
    assert store.engine.lock.batches >= commits
    # Every acknowledgement came after the write that carried its transaction returned.
    written: set[bytes] = set()
    for kind, item in writer.log:
        if kind == "written":
            written |= item
        else:
            assert item in written, item
    assert len(written) == commits
    store = reopen(store)
    for n in range(THREADS):
        resumed = store.resume(address(n))  # replays and checks every hash of the chain
        assert resumed.version == rounds and resumed.read("/memory/count") == rounds
        chain = resumed.query()
        assert [t.position for t in chain] == list(range(rounds))
        assert all(later.previous_hash == earlier.hash for earlier, later in zip(chain, chain[1:]))
    store.close()


def test_a_lone_committer_does_not_wait_for_company(store):
    """Anti-vacuity for the count above: one writer alone makes one synced write per commit."""
    handle = store.create(counter(address(0)))
    with RecordingWriter(store, delay=0.002) as writer:
        for _ in range(10):
            handle.exec("/lib/counter")
    assert writer.writes == 10


def test_no_commit_is_acknowledged_while_its_write_is_held(store):
    handles = [store.create(counter(address(n))) for n in range(THREADS)]
    acked: list[str] = []
    with RecordingWriter(store, hold_first=True) as writer:

        def commit(handle: Any) -> Callable[[], None]:
            def one() -> None:
                handle.exec("/lib/counter")
                acked.append(handle.address)
            return one

        threads = [threading.Thread(target=commit(h)) for h in handles]
        threads[0].start()
        assert writer.entered.wait(10)  # the first commit leads and its write is held
        for thread in threads[1:]:
            thread.start()
        wait_until(lambda: store.engine.lock.pending == THREADS)
        time.sleep(0.05)
        assert acked == []  # nothing acknowledged while the first write has not returned
        assert all(h.version == 0 for h in handles)
        writer.release.set()
        for thread in threads:
            thread.join(30)
    assert sorted(acked) == sorted(h.address for h in handles)
    # The held write carried the first commit; the other seven queued behind it share one.
    assert writer.writes == 2
    assert all(h.version == 1 for h in handles)


def test_a_write_wakes_only_its_own_committers_and_the_next_leader(store, monkeypatch):
    """Seven commits queued behind a held write each sleep once: the held write's return
    wakes one of them to lead, and that write wakes the rest (nobody wakes to find its
    batch still queued and sleep again)."""
    lock = store.engine.lock
    handles = [store.create(counter(address(n))) for n in range(THREADS)]
    sleeps: list[int] = []
    original = lock._sleep

    def counted(*args: Any) -> None:
        sleeps.append(threading.get_ident())
        original(*args)

    monkeypatch.setattr(lock, "_sleep", counted)
    with RecordingWriter(store, hold_first=True) as writer:
        first = threading.Thread(target=handles[0].exec, args=("/lib/counter",))
        first.start()
        assert writer.entered.wait(10)
        others = [threading.Thread(target=h.exec, args=("/lib/counter",)) for h in handles[1:]]
        for thread in others:
            thread.start()
        wait_until(lambda: len(sleeps) == THREADS - 1)
        writer.release.set()
        for thread in [first, *others]:
            thread.join(10)
    assert [h.version for h in handles] == [1] * THREADS
    assert writer.writes == 2
    assert len(sleeps) == THREADS - 1 and len(set(sleeps)) == THREADS - 1


def test_a_committer_interrupted_when_woken_to_lead_hands_the_lead_on(store, monkeypatch):
    """The committer woken to lead the queued batches is interrupted instead: another
    queued committer leads them, so nobody sleeps forever; the interrupted commit's batch,
    already accepted, is written with them."""
    lock = store.engine.lock
    handles = [store.create(counter(address(n))) for n in range(4)]
    original = lock._sleep
    interrupted: list[int] = []
    held = threading.Event()

    def sleep(*args: Any) -> None:
        original(*args)
        if held.is_set() and not interrupted:
            interrupted.append(threading.get_ident())
            raise KeyboardInterrupt

    monkeypatch.setattr(lock, "_sleep", sleep)
    with RecordingWriter(store, hold_first=True) as writer:
        first = threading.Thread(target=handles[0].exec, args=("/lib/counter",))
        first.start()
        assert writer.entered.wait(10)
        outcomes: dict[int, BaseException | None] = {}

        def commit(n: int) -> None:
            try:
                handles[n].exec("/lib/counter")
                outcomes[n] = None
            except BaseException as exc:  # reported to the test
                outcomes[n] = exc

        others = [threading.Thread(target=commit, args=(n,)) for n in range(1, 4)]
        for thread in others:
            thread.start()
        wait_until(lambda: lock.pending == 4)
        time.sleep(0.05)  # the three queued committers are asleep behind the held write
        held.set()
        writer.release.set()
        for thread in [first, *others]:
            thread.join(10)
            assert not thread.is_alive()
    assert len(interrupted) == 1
    assert sorted(type(exc).__name__ for exc in outcomes.values() if exc is not None) == ["KeyboardInterrupt"]
    assert lock.pending == 0
    store = reopen(store)
    assert [store.resume(h.address).version for h in handles] == [1, 1, 1, 1]


def test_a_failed_sync_fails_every_member_of_its_group(store):
    handles = [store.create(counter(address(n))) for n in range(THREADS)]
    for handle in handles:
        handle.exec("/lib/counter")
    before = [(h.version, h.root_hash, h.head) for h in handles]
    outcomes: list[BaseException | None] = [None] * THREADS
    with RecordingWriter(store, hold_first=True) as writer, FailingWrites(store, fail_at=2) as fault:

        def commit(i: int) -> Callable[[], None]:
            def one() -> None:
                try:
                    handles[i].exec("/lib/counter")
                except BaseException as exc:  # reported to the test
                    outcomes[i] = exc
            return one

        threads = [threading.Thread(target=commit(i)) for i in range(THREADS)]
        threads[0].start()
        assert writer.entered.wait(10)
        for thread in threads[1:]:
            thread.start()
        wait_until(lambda: store.engine.lock.pending == THREADS)
        writer.release.set()
        for thread in threads:
            thread.join(30)
    assert fault.failed == 1 and fault.calls == 2
    assert outcomes[0] is None and handles[0].version == 2  # its own write returned before the failure
    for i in range(1, THREADS):
        assert isinstance(outcomes[i], PersistenceUnavailable), outcomes[i]
        assert (handles[i].version, handles[i].root_hash, handles[i].head) == before[i]  # not acknowledged
    assert store.terminal
    with pytest.raises(PersistenceUnavailable):
        handles[0].exec("/lib/counter")
    store = reopen(store)
    # Exactly the acknowledged commits: the failed group left nothing behind.
    assert [store.resume(address(n)).version for n in range(THREADS)] == [2] + [1] * (THREADS - 1)
    store.close()


def test_compare_and_swap_stays_exact_inside_a_group(store):
    other = store.create(counter(address(1)))
    third = store.create(counter(address(2)))
    first = store.create(counter(address(0)))
    second = store.resume(address(0))  # a second handle of the same address at the same head
    outcomes: list[BaseException | None] = [None, None, None]
    with RecordingWriter(store, hold_first=True) as writer:
        leader = threading.Thread(target=lambda: other.exec("/lib/counter"))
        leader.start()
        assert writer.entered.wait(10)  # a write is in progress: the next commits queue behind it

        def write(i: int, handle: Any, value: str) -> Callable[[], None]:
            def one() -> None:
                try:
                    handle.write("/memory/who", value)
                except BaseException as exc:  # reported to the test
                    outcomes[i] = exc
            return one

        racers = [threading.Thread(target=write(0, first, "first")), threading.Thread(target=write(1, second, "second")),
                  threading.Thread(target=write(2, third, "third"))]
        for thread in racers:
            thread.start()
        wait_until(lambda: sum(1 for o in outcomes[:2] if o is not None) == 1 and store.engine.lock.pending == 3)
        writer.release.set()
        leader.join(30)
        for thread in racers:
            thread.join(30)
    conflicts = [o for o in outcomes[:2] if o is not None]
    assert len(conflicts) == 1 and isinstance(conflicts[0], PersistenceConflict)
    assert outcomes[2] is None
    winner, loser = (first, second) if outcomes[0] is None else (second, first)
    assert winner.version == 1 and loser.version == 0 and loser.read("/memory/who") is None
    with pytest.raises(PersistenceConflict):
        loser.write("/memory/who", "again")
    store = reopen(store)
    resumed = store.resume(address(0))
    assert resumed.version == 1 and resumed.read("/memory/who") == winner.read("/memory/who")
    store.close()


@pytest.mark.parametrize("operation", ["resume", "cut", "snapshot"])
def test_other_operations_wait_for_queued_commits(store, operation):
    """A cut, snapshot or resume that arrives while a commit is queued runs after it is written:
    it never acts on the head the queued commit is about to replace."""
    handle = store.create(counter(address(0)))
    stale = store.resume(address(0))
    results: list[Any] = []
    with RecordingWriter(store, hold_first=True) as writer:
        committer = threading.Thread(target=lambda: handle.exec("/lib/counter"))
        committer.start()
        assert writer.entered.wait(10)

        def other() -> None:
            try:
                if operation == "resume":
                    results.append(store.resume(address(0)).version)
                elif operation == "cut":
                    results.append(stale.cut())
                else:
                    results.append(stale.store_snapshot())
            except BaseException as exc:  # reported to the test
                results.append(exc)

        waiter = threading.Thread(target=other)
        waiter.start()
        time.sleep(0.1)
        assert results == []  # still waiting for the held write
        writer.release.set()
        committer.join(30)
        waiter.join(30)
    if operation == "resume":
        assert results == [1]
    else:
        assert len(results) == 1 and isinstance(results[0], PersistenceConflict)
    assert handle.version == 1
    store = reopen(store)
    assert store.resume(address(0)).version == 1
    store.close()


def test_close_waits_for_queued_commits(store):
    handle = store.create(counter(address(0)))
    with RecordingWriter(store, hold_first=True) as writer:
        committer = threading.Thread(target=lambda: handle.exec("/lib/counter"))
        committer.start()
        assert writer.entered.wait(10)
        closer = threading.Thread(target=store.close)
        closer.start()
        time.sleep(0.05)
        assert not store.closed
        writer.release.set()
        committer.join(30)
        closer.join(30)
    assert store.closed and handle.version == 1
    store = ProcessStore.open(store.path)
    assert store.resume(address(0)).version == 1
    store.close()


def test_acquire_with_a_timeout_gives_up_while_a_commit_is_queued(store):
    """``engine.lock.acquire(timeout=...)`` (for a caller that must not wait long) counts the
    queued batches too, and succeeds once they are written."""
    handle = store.create(counter(address(0)))
    lock = store.engine.lock
    with RecordingWriter(store, hold_first=True) as writer:
        committer = threading.Thread(target=lambda: handle.exec("/lib/counter"))
        committer.start()
        assert writer.entered.wait(10)
        started = time.monotonic()
        assert lock.acquire(timeout=0.05) is False
        assert lock.acquire(blocking=False) is False
        assert time.monotonic() - started < 5
        writer.release.set()
        assert lock.acquire(timeout=10) is True
        try:
            assert lock.pending == 0  # the queued commit was written before the lock was granted
        finally:
            lock.release()
        committer.join(30)
    assert handle.version == 1


def test_mixed_operations_from_many_threads_stay_consistent(store):
    """Commits from six threads while another thread runs store-wide operations (exports,
    resumes, snapshots, node sweeps, index rebuilds, forks): nothing deadlocks, and the
    reopened store resumes every address at the version its thread last acknowledged."""
    handles = [store.create(counter(address(n))) for n in range(6)]
    rounds = 12
    stop = threading.Event()
    forks: list[str] = []

    def committer(handle: Any) -> Callable[[], None]:
        def run() -> None:
            for _ in range(rounds):
                handle.exec("/lib/counter")
        return run

    def housekeeping() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            target = address(n % 6)
            store.archive_cut()
            store.resume(target)
            try:
                store.resume(target).store_snapshot()
            except PersistenceConflict:
                pass  # its head moved on between the resume and the snapshot
            store.sweep_nodes()
            store.reset_index()
            child = f"svit://local/group/fork{n}"
            store.fork(target, child)
            forks.append(child)

    keeper = threading.Thread(target=housekeeping)
    keeper.start()
    outcomes = run_threads([committer(h) for h in handles])
    stop.set()
    keeper.join(60)
    assert not keeper.is_alive() and outcomes == [None] * 6
    assert forks, "the housekeeping thread never completed a round"
    assert all(h.version == rounds for h in handles)
    store = reopen(store)
    assert [store.resume(address(n)).version for n in range(6)] == [rounds] * 6
    for child in forks:
        store.resume(child)
    store.close()


def _group_of(store: ProcessStore, handles: list[Any]) -> None:
    """Make the last group write carry exactly ``len(handles)`` commits (held write, all queued)."""
    lock = store.engine.lock
    blocker = store.create(counter(address(99)))
    with RecordingWriter(store, hold_first=True) as writer:
        first = threading.Thread(target=blocker.exec, args=("/lib/counter",))
        first.start()
        assert writer.entered.wait(10)
        threads = [threading.Thread(target=h.exec, args=("/lib/counter",)) for h in handles]
        for thread in threads:
            thread.start()
        wait_until(lambda: lock.pending == 1 + len(handles))
        writer.release.set()
        for thread in [first, *threads]:
            thread.join(10)
    assert lock._last_group == len(handles)


def test_a_leader_waits_for_the_committers_of_the_last_group(store, monkeypatch):
    """After a group of three, the first committer back waits (bounded) until the other
    two queued again, and the three share one write."""
    handles = [store.create(counter(address(n))) for n in range(3)]
    _group_of(store, handles)
    lock = store.engine.lock
    monkeypatch.setattr(group_module, "GATHER_SECONDS", 30.0)
    lock._last_write = 30.0  # so only the queue filling up ends the wait in this test
    writes = lock.writes
    first = threading.Thread(target=handles[0].exec, args=("/lib/counter",))
    first.start()
    wait_until(lambda: lock.pending == 1 and lock._gathering == 1)
    assert lock.writes == writes and handles[0].version == 1  # gathering, nothing written
    others = [threading.Thread(target=h.exec, args=("/lib/counter",)) for h in handles[1:]]
    for thread in others:
        thread.start()
    for thread in [first, *others]:
        thread.join(10)
    assert [h.version for h in handles] == [2, 2, 2]
    assert lock.writes - writes == 1


def test_one_committer_at_a_time_waits_for_company(store, monkeypatch):
    """While one committer waits for the last group's committers to queue again, the
    others that queue meanwhile do not start waits of their own: they sleep until the
    write carrying them (one bounded wait per group, one write for the three)."""
    handles = [store.create(counter(address(n))) for n in range(3)]
    _group_of(store, handles)
    lock = store.engine.lock
    monkeypatch.setattr(group_module, "GATHER_SECONDS", 30.0)
    lock._last_write = 30.0
    sleeps: list[float | None] = []
    original = lock._sleep

    def counted(ticket: Any, timeout: float | None) -> None:
        sleeps.append(timeout)
        original(ticket, timeout)

    monkeypatch.setattr(lock, "_sleep", counted)
    writes = lock.writes
    threads = [threading.Thread(target=h.exec, args=("/lib/counter",)) for h in handles]
    for n, thread in enumerate(threads[:2]):
        thread.start()
        wait_until(lambda n=n: len(sleeps) == n + 1)
    threads[2].start()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive()
    assert [h.version for h in handles] == [2, 2, 2]
    assert lock.writes - writes == 1
    assert sum(1 for timeout in sleeps if timeout is not None) == 1


def test_a_leader_waits_for_company_at_most_once_and_not_when_alone(store, monkeypatch):
    handles = [store.create(counter(address(n))) for n in range(3)]
    _group_of(store, handles)
    lock = store.engine.lock
    monkeypatch.setattr(group_module, "GATHER_SECONDS", 0.05)
    lock._last_write = 30.0
    writes = lock.writes
    waited = threading.Thread(target=handles[0].exec, args=("/lib/counter",))
    waited.start()  # nobody comes: it leads after the bounded wait, waited once
    waited.join(10)
    assert not waited.is_alive()
    assert lock.writes - writes == 1 and lock._last_group == 1
    lock._last_write = 30.0
    monkeypatch.setattr(group_module, "GATHER_SECONDS", 30.0)
    alone = threading.Thread(target=handles[0].exec, args=("/lib/counter",))
    alone.start()  # the last group was its own: it leads at once (not after 30 s)
    alone.join(10)
    assert not alone.is_alive()
    assert lock.writes - writes == 2 and handles[0].version == 3


class _DelayedLock:
    """A lock whose next acquire by one chosen thread waits first (to hold a woken
    thread back before it re-enters, as a busy scheduler can)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.delay_thread: int | None = None
        self.delay = 0.0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if threading.get_ident() == self.delay_thread:
            self.delay_thread = None
            time.sleep(self.delay)
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def _is_owned(self) -> bool:
        return bool(self._lock._is_owned())  # type: ignore[attr-defined]

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def test_a_gatherer_whose_batch_another_write_carried_hands_the_lead_on(monkeypatch):
    """A committer waiting for company whose batch a drain wrote meanwhile, and that has
    not run since, still counts as gathering: a commit queued then sleeps behind it, and
    is led once the gatherer leaves (it does not sleep until some later commit)."""
    written: list[list[str]] = []

    def write_group(batches: list[str]) -> list[BaseException | None]:
        written.append(list(batches))
        return [None] * len(batches)

    lock: group_module.GroupCommit[str] = group_module.GroupCommit(write_group)
    state = _DelayedLock()
    monkeypatch.setattr(lock, "_state", state)
    monkeypatch.setattr(group_module, "GATHER_SECONDS", 30.0)
    lock._last_group, lock._last_write = 2, 30.0

    def commit(batch: str) -> Callable[[], None]:
        def run() -> None:
            with lock.committing():
                ticket = lock.submit(batch)
            lock.wait(ticket)
        return run

    gatherer = threading.Thread(target=commit("a"))
    gatherer.start()
    wait_until(lambda: lock._gathering == 1)
    state.delay_thread, state.delay = gatherer.ident, 0.3
    with lock:  # drains: writes "a" and wakes its committer, which is held back
        pass
    assert written == [["a"]] and lock._gathering == 1
    follower = threading.Thread(target=commit("b"))
    follower.start()
    for thread in (gatherer, follower):
        thread.join(10)
        assert not thread.is_alive()
    assert written == [["a"], ["b"]] and lock.pending == 0
