"""A KeyboardInterrupt (a signal) during an activation never leaves a lock of the
activation path held.

CPython runs a pending signal's handler when a call of a C function returns (the end of
a CALL instruction), so a KeyboardInterrupt can be raised the moment ``lock.acquire()``
has returned, before any ``try`` after it has begun; a ``with`` statement takes the lock
inside the instruction that opens its protected block, so it has no such gap. The test
raises a KeyboardInterrupt at exactly that point of every lock taken on the activation
path (through a trace function, which runs at the same places) and checks that every lock
is free afterwards.
"""

from __future__ import annotations

import dis
import sys
from types import CodeType

import pytest

from svit import Process
from svit.activation import NAMESPACES, NamespacePool
from svit.lisp import interpreter
from svit.process import Process as ProcessClass
from tests.interrupting import free_from_another_thread, interrupt_at

COUNTER = '(define (main input) (let ((n (+ (read "/memory/count") 1))) (do (write "/memory/count" n) n)))'


def taken_points(code: CodeType) -> list[int]:
    """Offsets of the instruction that runs right after each lock is taken in ``code``
    (after ``x.acquire()``'s call returns, or after a ``with`` statement's entry)."""
    instructions = list(dis.get_instructions(code))
    points = []
    for i, ins in enumerate(instructions):
        if ins.opname == "BEFORE_WITH":
            points.append(instructions[i + 1].offset)
        elif ins.opname in ("LOAD_METHOD", "LOAD_ATTR") and ins.argval == "acquire":
            call = next(j for j in range(i + 1, len(instructions)) if instructions[j].opname == "CALL")
            points.append(instructions[call + 1].offset)
    return points


SITES = [
    ("guest run entry", interpreter._Guard.__enter__.__code__),
    ("guest run exit", interpreter._Guard.__exit__.__code__),
    ("namespace pool take", NamespacePool.take.__code__),
    ("namespace pool give back", NamespacePool.give_back.__code__),
    ("process exec", ProcessClass.exec.__code__),
]
CASES = [(name, code, at) for name, code in SITES for at in taken_points(code)]




def test_every_site_takes_a_lock() -> None:
    # The cases below cover each site (a site without a lock would make them vacuous).
    assert {name for name, _code, _at in CASES} == {name for name, _code in SITES}


@pytest.mark.parametrize(("site", "code", "offset"), CASES, ids=[f"{n}@{at}" for n, _c, at in CASES])
def test_an_interrupt_right_after_a_lock_is_taken_leaves_it_free(site: str, code: CodeType, offset: int) -> None:
    p = Process.builder("svit://local/test/interrupt").memory("count", 0).library("counter", COUNTER).build()
    p.exec("/lib/counter")  # warm: the namespace is pooled, the script compiled
    trace, fired = interrupt_at(code, offset)
    previous = sys.gettrace()  # a coverage tracer, say: put back afterwards
    sys.settrace(trace)
    try:
        p.exec("/lib/counter")
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(previous)
    assert fired[0], f"{site}: the interrupt point was not reached"
    assert not interpreter._recursion.lock.locked()
    assert not NAMESPACES._lock.locked()
    assert free_from_another_thread(p.lock, 0.5)
