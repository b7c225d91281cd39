"""A KeyboardInterrupt (a signal) during a store operation never leaves the store lock,
or the group commit's queue lock, held.

CPython runs a pending signal's handler when a call of a C function returns, so a
KeyboardInterrupt can be raised the moment ``lock.acquire()`` has returned, before a
``try`` after it has begun, and between the steps of a Python ``__exit__`` before its
``release()``. Left held by the main thread (reentrant), the store lock would hang every
other thread's operation for good: a server's workers, an archive's exports. The test
raises a KeyboardInterrupt (through a trace function) at each place a handler runs in the
code that enters and leaves the store lock (as each call returns), and
right after each lock the commit queue takes, during operations of a writer and of a reader, and
checks both locks are free afterwards.
"""

from __future__ import annotations

import dis
import sys
from collections.abc import Callable
from pathlib import Path
from types import CodeType
from typing import Any

import pytest

from svit import Process
from svit.store import ProcessStore, group, rocksdb
from tests.interrupting import free_from_another_thread, interrupt_at

ADDRESS = "svit://local/test/interrupt"
COUNTER = '(define (main input) (let ((n (+ (read "/memory/count") 1))) (do (write "/memory/count" n) n)))'


def functions(*owners: type) -> list[tuple[str, CodeType]]:
    """The Python functions defined on each class itself (not inherited), by qualified name."""
    found = []
    for owner in owners:
        for name, value in vars(owner).items():
            code = getattr(getattr(value, "__wrapped__", value), "__code__", None)
            if isinstance(code, CodeType):
                found.append((f"{owner.__name__}.{name}", code))
    return found


ENTRY_AND_EXIT = {"__enter__", "__exit__", "acquire", "release", "committing", "_entered", "_left"}
#: The functions that take the queue lock to wait on it.
QUEUE_LOCK_TAKERS = {"wait", "drain", "_sleep"}
#: A leader's write and the settling after it, under the queue lock: interrupted there, it
#: must still mark its group written and hand the queue on, or every commit would wait.
LEADING = {"_lead", "_settle"}


def interrupt_points() -> list[tuple[str, CodeType, int]]:
    """In the functions that enter and leave the store lock, the instruction after each
    call (a signal's handler runs as it returns); in the other functions of the group commit, the instruction right after each lock is taken."""
    points = []
    owners = [group.GroupCommit, rocksdb._FollowingLock]
    owners += [value for value in vars(group).values() if isinstance(value, type) and value.__module__ == group.__name__
               and value not in (group.GroupCommit, group.Ticket)]
    for name, code in functions(*owners):
        instructions = list(dis.get_instructions(code))
        if name.rsplit(".", 1)[1] in ENTRY_AND_EXIT | LEADING:
            # Where a signal's handler runs inside them: as each call returns. (It also runs
            # as a Python function starts: an ``__exit__`` so interrupted before its release
            # is a gap no Python code can close.)
            points += [(name, code, instructions[i + 1].offset) for i, ins in enumerate(instructions)
                       if ins.opname == "CALL" and i + 1 < len(instructions)]
            continue
        if name.rsplit(".", 1)[1] not in QUEUE_LOCK_TAKERS:
            continue
        for i, ins in enumerate(instructions):
            if ins.opname == "BEFORE_WITH":
                points.append((name, code, instructions[i + 1].offset))
            elif ins.opname in ("LOAD_METHOD", "LOAD_ATTR") and ins.argval == "acquire":
                call = next(j for j in range(i + 1, len(instructions)) if instructions[j].opname == "CALL")
                points.append((name, code, instructions[call + 1].offset))
    return points


POINTS = interrupt_points()




@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = Path(tmp_path_factory.mktemp("interrupts")) / "store"
    writer = ProcessStore.open(path)
    writer.create(Process.builder(ADDRESS).memory("count", 0).library("counter", COUNTER).build())
    reader = ProcessStore.open(path, read_only=True)
    yield writer, reader
    reader.close()
    writer.close()


def operations(writer: ProcessStore, reader: ProcessStore) -> list[tuple[str, Callable[[], Any], ProcessStore]]:
    def commit() -> None:
        writer.resume(ADDRESS).exec("/lib/counter")

    def taken_and_given_back(store: ProcessStore) -> Callable[[], None]:
        def run() -> None:
            if store.engine.lock.acquire(timeout=5.0):
                store.engine.lock.release()
        return run

    def follow() -> None:
        reader.engine._caught_up = 0.0  # type: ignore[attr-defined]  # due: entering catches up
        reader.resume(ADDRESS)

    return [("commit", commit, writer), ("resume", lambda: writer.resume(ADDRESS), writer),
            ("acquire", taken_and_given_back(writer), writer), ("reader resume", follow, reader),
            ("reader acquire", taken_and_given_back(reader), reader)]


def test_the_points_cover_the_store_lock_s_entry_and_exit() -> None:
    names = {name for name, _code, _offset in POINTS}
    assert {"GroupCommit.__enter__", "GroupCommit.__exit__", "GroupCommit.acquire", "GroupCommit.release",
            "GroupCommit.wait", "GroupCommit.drain", "GroupCommit._lead", "GroupCommit._settle",
            "_FollowingLock.__enter__"} <= names


@pytest.mark.parametrize(("site", "code", "offset"), POINTS, ids=[f"{n}@{at}" for n, _c, at in POINTS])
def test_an_interrupt_in_the_store_lock_leaves_it_free(stores: Any, site: str, code: CodeType, offset: int) -> None:
    writer, reader = stores
    reached = False
    for _name, operation, store in operations(writer, reader):
        trace, fired = interrupt_at(code, offset)
        previous = sys.gettrace()  # a coverage tracer, say: put back afterwards
        sys.settrace(trace)
        try:
            operation()
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(previous)
        if not fired[0]:
            continue
        reached = True
        lock = store.engine.lock
        assert not lock._state._is_owned(), f"{site}@{offset}: the queue lock is left held"
        assert free_from_another_thread(lock._state, 2.0), f"{site}@{offset}: the queue lock is left held"
        assert free_from_another_thread(lock, 2.0), f"{site}@{offset}: the store lock is left held"
        # Taking the store lock wrote whatever the interrupted commit left queued.
        assert not lock._leading and not lock.pending, f"{site}@{offset}: the queue is left led or unwritten"
        assert not lock._lock._is_owned(), f"{site}@{offset}: this thread still holds the store lock"
    if not reached:
        pytest.skip(f"{site}@{offset} is not run by these operations")
