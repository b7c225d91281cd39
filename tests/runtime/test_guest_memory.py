"""At the process level, guest memory bounds what an activation holds at once.

A refused activation leaves the process exactly as it was; an activation that builds
and drops far more than the limit over its run commits.
"""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from svit import Limits, Process
from svit.errors import SvitError
from tests.bounds import MEMORY_SLACK_BYTES, assert_memory_within, measure, unchanged

ADDRESS = "svit://local/t/memory"
LIMIT = 1024 * 1024
HOLD = """
(define (grow n) (if (= n 0) "" (concat (value-get input "/seed") (to-string n))))
(define (hold n) (if (= n 0) () (list (grow 1) (hold (- n 1)))))
(define (main input)
  (do (write "/memory/n" 1)
      (len (hold 50))))
"""
SPIN = """
(define (spin n acc) (if (= n 0) acc (spin (- n 1) (len (concat (value-get input "/seed") (to-string n))))))
(define (main input) (do (write "/memory/n" (spin 200 0)) "done"))
"""


def _process(source: str) -> Process:
    limits = Limits(max_guest_memory=LIMIT, max_steps=5_000_000, max_execution_millis=30_000)
    return Process.builder(ADDRESS).memory("n", 0).library("main", source).limits(limits).build()


def test_an_activation_holding_many_values_is_refused_and_changes_nothing() -> None:
    p = _process(HOLD)
    seed = "s" * (LIMIT // 2)
    with unchanged(p):
        cost = measure(lambda: p.exec("/lib/main", {"seed": seed}), memory=True)
    assert isinstance(cost.error, SvitError), cost.error or "accepted"
    assert cost.error.code == "resource_limit_exceeded" and cost.error.limit == "guest memory"
    assert_memory_within(cost, LIMIT)


def test_an_activation_that_builds_and_drops_strings_commits() -> None:
    p = _process(SPIN)
    seed = "s" * (LIMIT // 8)
    cost = measure(lambda: p.exec("/lib/main", {"seed": seed}), memory=True)
    assert cost.error is None and cost.result.output == "done"
    assert p.read("/memory/n") == LIMIT // 8 + 1
    assert_memory_within(cost, LIMIT)


def test_names_of_many_activations_are_released() -> None:
    p = _process(SPIN)

    def script(i: int) -> str:
        names = " ".join(f"(define n{i}-{k}-{'q' * 400} {k})" for k in range(140))  # ~60 KB
        return f"{names} (define (main input) (missing-{i} 1))"

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(60):
            with pytest.raises(SvitError):
                p.exec_inline(script(i), None)
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert retained <= MEMORY_SLACK_BYTES, f"{retained / 2**20:.1f} MiB retained after 60 activations"
