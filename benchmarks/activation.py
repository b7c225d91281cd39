"""The fixed cost of one trivial activation, side by side in one run (medians as ratios).

The counter activation (read a counter, add the input's ``by``, write, commit) on an
in-memory process, against a host ``Process.write`` of the same value: the write is the
commit alone, so the ratio is what running the script adds on top of committing.
The two are timed alternately so both see the same machine conditions. A second row
counts the calls one activation makes (Python functions and C functions, as
``sys.setprofile`` sees them): a measure the machine's load cannot move. A third times
the activation with its script's top level run every time (``Interpreter.reuse_top_levels``
off) against the same with it reused, alternately; a fourth does so for the counter with
twelve more definitions before ``main``.

Run: python benchmarks/activation.py [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from common import paired_medians

from svit import Process
from svit.lisp.interpreter import Interpreter

__all__ = ["COUNTER_BY", "calls_made", "counter_process", "helpers_process", "main", "top_level_run"]

COUNTER_BY = (
    '(define (main input) (let ((n (+ (read "/memory/count") (map-get input "by"))))'
    ' (do (write "/memory/count" n) n)))'
)


def counter_process(address: str) -> Process:
    """An in-memory process holding the counter script and a counter at 0."""
    return Process.builder(address).memory("count", 0).library("counter", COUNTER_BY).build()


def calls_made(fn: Callable[[], Any]) -> tuple[int, int]:
    """(Python function calls, C function calls) made by one call of ``fn``."""
    counts = {"call": 0, "c_call": 0}

    def profile(_frame: Any, event: str, _arg: Any) -> None:
        if event in counts:
            counts[event] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return counts["call"] - 1, counts["c_call"] - 1  # less fn itself and setprofile(None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=2001)
    args = parser.parse_args()
    process = counter_process("svit://local/bench/activation")
    by = {"by": 1}
    for _ in range(min(200, args.repeat)):  # warm the caches an activation keeps
        process.exec("/lib/counter", by)
    counter = [0]

    def write() -> None:
        counter[0] += 1
        process.write("/memory/other", counter[0])

    ours, base = paired_medians(lambda: process.exec("/lib/counter", by), write, args.repeat)
    print(f"counter activation (in memory): {ours * 1e6:.1f} us vs Process.write {base * 1e6:.1f} us"
          f" -> ratio {ours / base:.2f} (aim: about 25 us)")
    python_calls, c_calls = calls_made(lambda: process.exec("/lib/counter", by))
    print(f"calls per counter activation: {python_calls} Python, {c_calls} C")

    for label, target in (("", process), (" (12 definitions more)", helpers_process("svit://local/bench/helpers"))):
        for _ in range(min(200, args.repeat)):
            target.exec("/lib/counter", by)
        reused, run = paired_medians(lambda: target.exec("/lib/counter", by), top_level_run(target, by), args.repeat)
        print(f"top level reused{label}: {reused * 1e6:.1f} us vs run every time {run * 1e6:.1f} us"
              f" -> ratio {reused / run:.2f}")


def helpers_process(address: str) -> Process:
    """The counter with ten helper functions and two constants defined before ``main``."""
    helpers = " ".join(f"(define (h{i} x) (+ x {i}))" for i in range(10))
    source = f"{helpers} (define table '(1 2 3)) (define label \"counter\") {COUNTER_BY}"
    return Process.builder(address).memory("count", 0).library("counter", source).build()


def top_level_run(process: Process, by: dict[str, int]) -> Callable[[], None]:
    """The counter activation with its top level run every time (reuse off for this call)."""

    def run() -> None:
        Interpreter.reuse_top_levels = False
        try:
            process.exec("/lib/counter", by)
        finally:
            Interpreter.reuse_top_levels = True

    return run


if __name__ == "__main__":
    main()
