"""Svit Lisp against CPython, side by side in one run (medians, as ratios).

Fuel accounting is on: every run below is charged steps exactly as an activation is.
Run: python benchmarks/interpreter.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import time

from svit.lisp.budget import Budget
from svit.lisp.context import LispLimits
from svit.lisp.interpreter import Interpreter
from svit.lisp.reader import parse as _parse

FIB_LISP = "(define (fib n) (if (< n 2) n (+ (fib (- n 1)) (fib (- n 2)))))"
LOOP_LISP = "(define (loop n acc) (if (= n 0) acc (loop (- n 1) (+ acc 1))))"
LIMITS = LispLimits(max_steps=1_000_000_000, max_execution_millis=60_000)


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def loop(n: int, acc: int) -> int:
    while n != 0:
        n, acc = n - 1, acc + 1
    return acc


def lisp_call(source: str, name: str, *args: int) -> tuple[int, int]:
    budget = Budget(LIMITS.max_steps, LIMITS.max_execution_millis)
    interp = Interpreter(LIMITS, budget)
    interp.run(source)
    result = interp.call(name, *args)
    return result, budget.used


def median_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    result, steps = lisp_call(FIB_LISP, "fib", 25)
    assert result == fib(25)
    lisp_fib = median_seconds(lambda: lisp_call(FIB_LISP, "fib", 25), args.repeat)
    py_fib = median_seconds(lambda: fib(25), args.repeat)
    print(f"(fib 25): svit-lisp {lisp_fib * 1000:.1f} ms vs CPython {py_fib * 1000:.1f} ms "
          f"-> ratio {lisp_fib / py_fib:.2f} (steps charged: {steps})")

    result, steps = lisp_call(LOOP_LISP, "loop", 1_000_000, 0)
    assert result == 1_000_000
    lisp_loop = median_seconds(lambda: lisp_call(LOOP_LISP, "loop", 1_000_000, 0), args.repeat)
    py_loop = median_seconds(lambda: loop(1_000_000, 0), args.repeat)
    print(f"1,000,000-iteration self tail loop: svit-lisp {lisp_loop * 1000:.1f} ms vs CPython while "
          f"{py_loop * 1000:.1f} ms -> ratio {lisp_loop / py_loop:.2f} (steps charged: {steps})")

    source = (FIB_LISP + "\n" + LOOP_LISP + "\n; a comment line\n(define s \"a string with \\\"escapes\\\"\")\n") * 500
    parse = median_seconds(lambda: _parse(source), args.repeat)
    print(f"parse throughput: {len(source) / parse:,.0f} chars/s ({len(source):,} chars in {parse * 1000:.1f} ms)")


if __name__ == "__main__":
    main()
