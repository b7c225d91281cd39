"""Guest namespaces are kept between activations and renewed, never shared while in use,
and a renewed one holds nothing of the run before: not its globals, not its process,
not its input, not its limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from svit import Limits, Process
from svit.activation import NAMESPACES, NamespacePool, WorkingState
from svit.errors import SvitError
from svit.lisp.budget import Budget
from svit.lisp.context import LispLimits
from svit.lisp.errors import InternalError, LimitError
from svit.lisp.interpreter import Interpreter
from svit.lisp.syntax import STANDARD_NAMES

COUNTER = (
    '(define (main input) (let ((n (+ (read "/memory/count") (map-get input "by"))))'
    ' (do (write "/memory/count" n) n)))'
)


def counter(address: str, start: int = 0, limits: Limits | None = None) -> Process:
    builder = Process.builder(address).memory("count", start).library("counter", COUNTER)
    if limits is not None:
        builder.limits(limits)
    return builder.build()


def test_a_renewed_namespace_forgets_what_the_last_run_defined() -> None:
    interp = Interpreter(LispLimits(), Budget(100_000, None))
    interp.define_value("input", 0)
    interp.seal()
    sealed = dict(interp.globals)
    names = interp.installed_names()
    interp.run("(define leaked 41) (define (main x) (+ leaked x))")
    assert interp.has("leaked") and interp.installed_names() is not names
    interp.vacate()
    assert interp.globals == {} and interp.owner is None
    interp.renew(Budget(100_000, None), None, {"input": 5})
    assert not interp.has("leaked") and not interp.has("main")
    assert interp.installed_names() is names
    assert interp.globals == {**sealed, "g_input": 5}


def test_a_renewed_namespace_bounds_its_fast_loops_by_the_new_budget() -> None:
    # A fast self tail loop skips the overflow test of `acc + 10**13` because at most
    # "the budget's steps" iterations can run. Sealed under a budget of 1,000 steps and
    # renewed under one of 10**7, the proof must use the new budget: after 2 * 10**6
    # iterations the sum passes 64 bits, and the run must fail there as generic code does.
    source = (
        "(define (f n acc) (if (= n 0) acc (f (- n 1) (+ acc 10000000000000))))"
        " (f 2000000 0)"
    )
    interp = Interpreter(LispLimits(max_steps=1_000), Budget(1_000, None))
    interp.seal()
    interp.renew(Budget(10**7, None), None, {})
    with pytest.raises(LimitError):
        interp.run(source, compile_budget=Budget(10**6, None))


def test_renew_refuses_a_namespace_never_sealed_and_a_value_never_installed() -> None:
    interp = Interpreter(LispLimits(), Budget(1_000, None))
    with pytest.raises(InternalError):
        interp.renew(Budget(1_000, None), None, {})
    interp.seal()
    with pytest.raises(InternalError):
        interp.renew(Budget(1_000, None), None, {"never-installed": 1})


def test_a_definition_over_a_host_function_is_undone_by_renew() -> None:
    interp = Interpreter(LispLimits(), Budget(100_000, None))
    interp.define_function("host-answer", lambda: 42, 0, 0)
    interp.seal()
    sealed_defined = set(interp.defined)
    assert interp.run("(define (host-answer) 7) (define extra 1) (host-answer)") == 7
    interp.vacate()
    interp.renew(Budget(100_000, None), None, {})
    assert interp.defined == sealed_defined  # extra is gone, host-answer is the host's again
    assert interp.run("(host-answer)") == 42


def test_installing_after_sealing_unseals() -> None:
    interp = Interpreter(LispLimits(), Budget(1_000, None))
    interp.seal()
    interp.define_value("late", 1)
    with pytest.raises(InternalError):
        interp.renew(Budget(1_000, None), None, {})


def test_processes_taking_turns_each_see_their_own_memory_and_input() -> None:
    first, second = counter("svit://local/test/pool-a", 0), counter("svit://local/test/pool-b", 100)
    for _ in range(3):
        assert first.exec("/lib/counter", {"by": 1}).output == first.read("/memory/count")
        assert second.exec("/lib/counter", {"by": 10}).output == second.read("/memory/count")
    assert (first.read("/memory/count"), second.read("/memory/count")) == (3, 130)


def test_a_script_running_itself_gets_a_second_namespace() -> None:
    source = ('(define (main input) (if (= (map-get input "n") 0) (read "/memory/count")'
              ' (do (write "/memory/count" (+ 1 (read "/memory/count")))'
              ' (exec "/lib/nest" (value-map "n" (- (map-get input "n") 1))))))')
    p = Process.builder("svit://local/test/pool-nest").memory("count", 0).library("nest", source).build()
    assert p.exec("/lib/nest", {"n": 3}).output == 3
    assert p.exec("/lib/nest", {"n": 2}).output == 5


def test_a_namespace_made_under_other_limits_is_not_reused() -> None:
    deep = '(define (down n) (if (= n 0) 0 (+ 1 (down (- n 1))))) (define (main input) (down (map-get input "n")))'
    roomy = Process.builder("svit://local/test/pool-roomy").library("deep", deep).build()
    tight = Process.builder("svit://local/test/pool-tight").library("deep", deep).limits(Limits(max_call_stack=8)).build()
    assert roomy.exec("/lib/deep", {"n": 20}).output == 20
    with pytest.raises(SvitError, match="call stack"):
        tight.exec("/lib/deep", {"n": 20})
    assert roomy.exec("/lib/deep", {"n": 20}).output == 20


def test_the_pool_keeps_at_most_its_size_and_empties_what_it_keeps() -> None:
    pool = NamespacePool(size=2)
    p = counter("svit://local/test/pool-size")
    state = WorkingState(p)
    taken = [pool.take(state, "/lib/counter.svit-script", 1) for _ in range(3)]
    assert len({id(interp) for interp in taken}) == 3  # none shared while in use
    for interp in taken:
        pool.give_back(interp)
    assert all(interp.globals == {} and interp.owner is None for interp in taken)
    again = [pool.take(state, "/lib/counter.svit-script", 2) for _ in range(3)]
    assert sum(any(a is b for b in taken) for a in again) == 2  # two were kept, the third is new
    assert all(interp.globals["g_input"] == 2 and interp.owner is state for interp in again)


def test_the_pool_keeps_no_entry_for_a_script_it_holds_no_namespace_of() -> None:
    # A chain of scripts, each run nesting a new one: the outer namespace is taken from the
    # pool, the nested one given back first (the pool has room), then the outer one finds
    # it full. Every name the pool once held must not stay behind in its index.
    pool = NamespacePool(size=2)
    state = WorkingState(counter("svit://local/test/pool-index"))
    for name in ("first", "second"):
        pool.give_back(pool.take(state, f"/lib/{name}.svit-script", 0))
    outer = "first"
    for step in range(200):
        held = pool.take(state, f"/lib/{outer}.svit-script", 0)
        nested = pool.take(state, f"/lib/chain{step}.svit-script", 0)
        pool.give_back(nested)
        pool.give_back(held)
        outer = f"chain{step}"
    assert len(pool._free) <= pool.size
    assert all(pool._free.values())


def test_activations_use_the_shared_pool() -> None:
    p = counter("svit://local/test/pool-shared")
    p.exec("/lib/counter", {"by": 1})
    state = WorkingState(p)
    interp = NAMESPACES.take(state, "/lib/counter.svit-script", 0)
    try:
        assert interp.owner is state and not interp.has("main")
    finally:
        NAMESPACES.give_back(interp)


def test_a_namespace_holds_only_its_own_entries_over_the_shared_helpers() -> None:
    # Renewing restores what is the namespace's own (a few entries), not every system
    # function: those are found beneath it, in one dict no run writes to.
    p = counter("svit://local/test/pool-own")
    p.exec("/lib/counter", {"by": 1})
    state = WorkingState(p)
    interp = NAMESPACES.take(state, "/lib/counter.svit-script", 0)
    try:
        own = interp.globals
        shared = own["__builtins__"]
        assert not any(name.startswith(("_F_", "_S_")) for name in own)
        assert "_F_len" in shared and "_S_len" in shared
        assert len(own) < 32
    finally:
        NAMESPACES.give_back(interp)
    assert p.exec("/lib/counter", {"by": 2}).output == 3


#: Name stems: the scripts define ``x<stem>`` and ``y<stem>``, never a standard name (``xor``
#: is one: a script may not redefine it).
_IDENT = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True).filter(
    lambda n: f"x{n}" not in STANDARD_NAMES and f"y{n}" not in STANDARD_NAMES)


def _host_entries(limits: Limits) -> int:
    """How many names a sealed activation namespace holds before any script runs."""
    state = WorkingState(counter("svit://local/test/pool-count", 0, limits))
    pool = NamespacePool(size=1)
    interp = pool.take(state, "/lib/count.svit-script", 0)
    try:
        return len(interp.defined)
    finally:
        pool.give_back(interp)


@given(names=st.lists(_IDENT, min_size=1, max_size=40, unique=True), values=st.lists(st.integers(-5, 5), min_size=40))
@settings(max_examples=25, deadline=None)
def test_a_run_never_sees_what_an_earlier_run_in_its_namespace_defined(names: list[str], values: list[int]) -> None:
    # Both scripts run inline, so the second is served by the namespace the first ran in,
    # renewed. The first defines many globals and shadows the host's read and write; the
    # second defines as many of its own with no room to spare (each script alone fits
    # max_namespace_entries exactly): a name the first left behind would push the second
    # past the limit, and a stale read or write would answer with the first run's functions.
    host = _host_entries(Limits())
    limits = Limits(max_namespace_entries=host + len(names) + 1)  # the script's names and main
    p = counter("svit://local/test/pool-leak", 10, limits)
    first = " ".join(f"(define x{name} {values[i]})" for i, name in enumerate(names))
    first += ' (define (read p) 99) (define (write p v) 98) (define (main input) (list (read "/memory/count") (write 1 2)))'
    assert p.exec_inline(first).output == [99, 98]
    assert p.read("/memory/count") == 10
    second = " ".join(f"(define y{name} 1)" for name in names)
    second += ' (define (main input) (do (write "/memory/count" (+ 1 (read "/memory/count"))) (read "/memory/count")))'
    assert p.exec_inline(second).output == 11
    assert p.read("/memory/count") == 11
    # One name more than the limit allows is refused: the bound the test leans on holds.
    with pytest.raises(SvitError, match="namespace"):
        p.exec_inline(second.replace("(define (main", "(define zextra 1) (define (main"))
