"""Every place a script is compiled bounds the compiler's work by the process's limits.

A script whose macro returns a form with shared parts (walked as a tree, it doubles per
level) is refused within the time and memory limits wherever it is compiled: at build,
by a host write to /lib, by a guest's own /lib write, when a staged script is run, and
when a snapshot is restored. Restore bounds the compile-time work of all the snapshot's
scripts together by one budget the host gives, which the snapshot cannot raise.
"""

from __future__ import annotations

import itertools

import pytest

from svit import Limits, Process
from svit.errors import SvitError
from svit.namespace import initial_root
from svit.snapshot import encode_snapshot
from svit.values import Script
from tests.bounds import assert_memory_within, assert_time_within, measure, unchanged

ADDRESS = "svit://local/t/compile"
LIMIT_NAMES = ("steps", "time", "guest memory", "syntax depth")
_unique = itertools.count()


def shared_form_script(levels: int) -> str:
    return (
        f"; {next(_unique)}\n"
        "(define (grow n form) (if (= n 0) form (grow (- n 1) (list '+ form form))))\n"
        "(macro (big n) (grow n 1))\n"
        f"(define (main input) (big {levels}))\n"
    )


def assert_limit_refusal(error: BaseException | None) -> None:
    assert isinstance(error, SvitError), error or "accepted"
    assert error.code in ("resource_limit_exceeded", "execution_limit_exceeded"), error.message
    assert any(name in error.message for name in LIMIT_NAMES), error.message
    assert "interpreter failed" not in error.message


FAST = Limits(max_execution_millis=200)
SMALL_MEMORY = Limits(max_guest_memory=1024 * 1024)


def test_build_refuses_shared_forms_within_the_time_limit() -> None:
    builder = Process.builder(ADDRESS).library("big", shared_form_script(14)).limits(FAST)
    cost = measure(builder.build)
    assert_limit_refusal(cost.error)
    assert_time_within(cost, FAST.max_execution_millis)


def test_a_host_lib_write_refuses_shared_forms_within_the_limits() -> None:
    p = Process.builder(ADDRESS).limits(FAST).build()
    with unchanged(p):
        cost = measure(lambda: p.write("/lib/big", {"source": shared_form_script(14)}))
    assert_limit_refusal(cost.error)
    assert_time_within(cost, FAST.max_execution_millis)
    q = Process.builder(ADDRESS).limits(SMALL_MEMORY).build()
    with unchanged(q):
        cost = measure(lambda: q.write("/lib/big", {"source": shared_form_script(13)}), memory=True)
    assert_limit_refusal(cost.error)
    assert_memory_within(cost, SMALL_MEMORY.max_guest_memory)


WRITER = '(define (main input) (do (write "/lib/big" (value-map "source" input)) true))'
WRITE_AND_RUN = '(define (main input) (do (write "/lib/big" (value-map "source" input)) (exec "/lib/big" 1)))'


@pytest.mark.parametrize("writer", [WRITER, WRITE_AND_RUN], ids=["write", "write-and-exec"])
def test_a_guest_lib_write_refuses_shared_forms_within_the_limits(writer: str) -> None:
    p = Process.builder(ADDRESS).library("writer", writer).limits(FAST).build()
    with unchanged(p):
        cost = measure(lambda: p.exec("/lib/writer", shared_form_script(14)))
    assert_limit_refusal(cost.error)
    assert_time_within(cost, FAST.max_execution_millis)


def test_a_guest_can_still_write_and_run_a_small_script() -> None:
    p = Process.builder(ADDRESS).library("writer", WRITE_AND_RUN).build()
    assert p.exec("/lib/writer", shared_form_script(3)).output == 8
    assert p.exec("/lib/big", None).output == 8


def test_restore_refuses_shared_forms_within_the_limits() -> None:
    limits = Limits()
    root = initial_root(ADDRESS, limits, {}, {"big": Script(shared_form_script(15))}, {}, {})
    data = encode_snapshot(ADDRESS, 0, root, limits)
    cost = measure(lambda: Process.restore(data))
    assert_limit_refusal(cost.error)
    assert_time_within(cost, limits.max_execution_millis)


# ---------------------------------------------------------------------- one budget per restore

BURN = (
    "; {tag}\n"
    "(define (spin n) (if (= n 0) 0 (spin (- n 1))))\n"
    "(macro (burn) (do (spin {steps}) 0))\n"
    "(define (main input) (burn))\n"
)
GENEROUS = Limits(max_steps=1_000_000_000, max_execution_millis=60_000)


def burning_snapshot(scripts: int, steps: int, limits: Limits = GENEROUS) -> bytes:
    """A snapshot of ``scripts`` scripts whose compile-time code takes ``steps`` steps each."""
    library = {f"s{i}": Script(BURN.format(tag=next(_unique), steps=steps)) for i in range(scripts)}
    root = initial_root(ADDRESS, limits, {}, library, {}, {})
    return encode_snapshot(ADDRESS, 0, root, limits)


def test_restore_bounds_the_compile_work_of_all_scripts_together() -> None:
    host = Limits(max_steps=500_000, max_execution_millis=1_000)
    data = burning_snapshot(6, 300_000)
    cost = measure(lambda: Process.restore(data, restore_limits=host))
    assert_limit_refusal(cost.error)
    assert "steps" in cost.error.message
    assert_time_within(cost, host.max_execution_millis)


def test_restore_bounds_compile_time_by_the_hosts_clock() -> None:
    host = Limits(max_steps=1_000_000_000, max_execution_millis=200)
    data = burning_snapshot(6, 3_000_000)
    cost = measure(lambda: Process.restore(data, restore_limits=host))
    assert_limit_refusal(cost.error)
    assert_time_within(cost, host.max_execution_millis)


def test_restore_by_default_is_bounded_by_the_default_limits() -> None:
    # The snapshot claims a minute and a billion steps; the default host allows a second.
    data = burning_snapshot(8, 400_000)
    cost = measure(lambda: Process.restore(data))
    assert_limit_refusal(cost.error)
    assert_time_within(cost, Limits().max_execution_millis)


def test_restore_within_the_budget_still_works() -> None:
    data = burning_snapshot(3, 1_000)
    restored = Process.restore(data, restore_limits=Limits())
    assert restored.snapshot() == data
    assert restored.exec("/lib/s0", None).output == 0


def test_a_store_restores_snapshots_under_its_own_restore_limits(tmp_path) -> None:
    from svit.store.store import ProcessStore

    library = {f"s{i}": BURN.format(tag=next(_unique), steps=300_000) for i in range(4)}
    builder = Process.builder(ADDRESS).limits(GENEROUS)
    for name, source in library.items():
        builder = builder.library(name, source)
    store = ProcessStore.open(tmp_path / "store")
    store.create(builder.build())
    store.close()
    store = ProcessStore.open(tmp_path / "store")
    store.restore_limits = Limits(max_steps=500_000)
    try:
        cost = measure(lambda: store.resume(ADDRESS))
    finally:
        store.close()
    assert isinstance(cost.error, SvitError), cost.error or "accepted"
    assert "steps" in cost.error.message
    assert_time_within(cost, store.restore_limits.max_execution_millis)


def test_a_compile_done_under_larger_limits_is_not_reused_under_smaller_ones() -> None:
    body = "a"
    for _ in range(6):  # 16 M characters
        body = f"(let ((a {body})) (concat a a a a a a a a a a a a a a a a))"
    source = f'; {next(_unique)}\n(const big (let ((a "x")) {body}))\n(define (main input) (len big))\n'
    large = Process.builder(ADDRESS).limits(Limits(max_guest_memory=64 * 1024 * 1024)).build()
    large.write("/lib/big", {"source": source})
    small = Process.builder(ADDRESS).build()
    with unchanged(small):
        with pytest.raises(SvitError) as caught:
            small.write("/lib/big", {"source": source})
    assert caught.value.code == "resource_limit_exceeded" and caught.value.limit == "guest memory"
