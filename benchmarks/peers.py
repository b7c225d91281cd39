"""Svit beside its sandbox peers: CPython, Svit Lisp, pydantic-monty and starlark-pyo3.

Three workloads, all measured in one run, printed as medians with ratios to CPython:

1. ``(fib n)``, naive recursion (Svit with fuel accounting on, as benchmarks/interpreter.py runs it);
2. a self-tail loop of n iterations vs a Python ``while`` loop (Starlark has no ``while``:
   it runs a ``for`` over ``range``);
3. a counter activation: read the count, add ``by`` from the input, write it back. Svit runs
   ``/lib/counter`` on an in-memory process (and once more through the model's ``exec`` tool);
   Starlark parses and evaluates the counter on every call over a dict state; Monty runs the
   counter once per activation in its worker.

The peers are optional (``pip install svit[bench]``); a peer that cannot be imported is
skipped with a note. Every workload's result is checked before it is timed.

Run: python benchmarks/peers.py [--repeat N] [--quick]
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from common import median_time
from interpreter import FIB_LISP, LOOP_LISP, fib, lisp_call, loop

from svit import Process
from svit.loop.tools import run_tool
from svit.thread import ToolCall

__all__ = ["COUNTER_LISP", "main"]

COUNTER_LISP = """
(define (main input)
  (let ((next (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" next) next)))
"""

FIB_PY = "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n"
LOOP_PY = "def loop(n, acc):\n    while n != 0:\n        n, acc = n - 1, acc + 1\n    return acc\n"
LOOP_STARLARK = "def loop(n, acc):\n    for _ in range(n):\n        acc = acc + 1\n    return acc\n"
COUNTER_PY = "def main(state, input):\n    return state[\"count\"] + input[\"by\"]\n"
COUNTER_INPUT = {"by": 1}

#: (name, ratio measured, bound): filled in as the workloads run.
Target = tuple[str, float, float]


@dataclass
class Row:
    """One workload: median seconds per runner, ``None`` where a runner is absent."""

    label: str
    seconds: dict[str, float | None] = field(default_factory=dict)


RUNNERS = ("CPython", "svit", "monty", "starlark")


def python_counter(state: dict[str, int], input: dict[str, int]) -> int:
    count = state["count"] + input["by"]
    state["count"] = count
    return count


def per_call(fn: Callable[[], Any], calls: int) -> Callable[[], None]:
    """``fn`` called ``calls`` times, so one timed sample averages away timer noise."""

    def batch() -> None:
        for _ in range(calls):
            fn()

    return batch


def median_per_call(fn: Callable[[], Any], repeat: int, calls: int) -> float:
    return median_time(per_call(fn, calls), repeat) / calls


def checked(label: str, got: Any, want: Any) -> None:
    if got != want:
        raise SystemExit(f"{label}: got {got!r}, expected {want!r}; refusing to time a wrong result")


def optional(module: str) -> Any | None:
    """The peer module, or ``None`` with a printed note when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        print(f"note: {module} is not importable ({exc}); its column is skipped (pip install svit[bench])")
        return None


@contextmanager
def monty_session(monty: Any | None) -> Iterator[Any | None]:
    """One warm Monty worker for the whole run, or ``None`` without Monty."""
    if monty is None:
        yield None
        return
    with ExitStack() as stack:
        pool = stack.enter_context(monty.Monty(min_processes=1, max_processes=1))
        yield stack.enter_context(pool.checkout())


class Starlark:
    """Parse and evaluate per call, the way a host would run a fresh script each time."""

    def __init__(self, module: Any) -> None:
        self.sl = module
        self.dialect = module.Dialect.standard()
        self.globals = module.Globals.standard()

    def run(self, source: str, bindings: dict[str, Any] | None = None) -> Any:
        scope = self.sl.Module()
        for name, value in (bindings or {}).items():
            scope[name] = value
        return self.sl.eval(scope, self.sl.parse("peer.star", source, self.dialect), self.globals)


def fmt_seconds(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.1f} us"


def print_table(rows: list[Row]) -> None:
    width = max(len(row.label) for row in rows) + 2
    print(f"{'workload':<{width}}" + "".join(f"{name:>22}" for name in RUNNERS))
    for row in rows:
        base = row.seconds["CPython"]
        cells = []
        for name in RUNNERS:
            value = row.seconds.get(name)
            if value is None:
                cells.append(f"{'skipped':>22}")
            elif name == "CPython" or base is None:
                cells.append(f"{fmt_seconds(value):>22}")
            else:
                cells.append(f"{fmt_seconds(value) + f' {value / base:6.2f}x':>22}")
        print(f"{row.label:<{width}}" + "".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7, help="timed samples per workload (median reported)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and few samples: a smoke run, numbers mean nothing")
    args = parser.parse_args()
    repeat = 2 if args.quick else args.repeat
    fib_n, loop_n, counter_calls = (15, 10_000, 5) if args.quick else (25, 1_000_000, 200)

    monty = optional("pydantic_monty")
    starlark_module = optional("starlark")
    starlark = Starlark(starlark_module) if starlark_module is not None else None
    if starlark is not None:
        print("note: Starlark has no while loop; its tail-loop row runs `for _ in range(n)` inside a def")

    rows: list[Row] = []
    targets: list[Target] = []
    with monty_session(monty) as session:
        # 1. (fib n)
        want = fib(fib_n)
        row = Row(f"(fib {fib_n})")
        result, steps = lisp_call(FIB_LISP, "fib", fib_n)
        checked("svit fib", result, want)
        python_seconds = median_time(lambda: fib(fib_n), repeat)
        svit_seconds = median_time(lambda: lisp_call(FIB_LISP, "fib", fib_n), repeat)
        row.seconds.update({"CPython": python_seconds, "svit": svit_seconds})
        fib_source = FIB_PY + f"fib({fib_n})\n"
        if session is not None:
            checked("monty fib", session.feed_run(fib_source), want)
            row.seconds["monty"] = median_time(lambda: session.feed_run(fib_source), repeat)
        if starlark is not None:
            checked("starlark fib", starlark.run(fib_source), want)
            row.seconds["starlark"] = median_time(lambda: starlark.run(fib_source), repeat)
        rows.append(row)
        fib_steps = steps
        targets.append((f"(fib {fib_n}) svit / CPython", svit_seconds / python_seconds, 2.0))

        # 2. the tail loop
        row = Row(f"tail loop x{loop_n:,}")
        result, steps = lisp_call(LOOP_LISP, "loop", loop_n, 0)
        checked("svit loop", result, loop_n)
        checked("python loop", loop(loop_n, 0), loop_n)
        python_seconds = median_time(lambda: loop(loop_n, 0), repeat)
        svit_seconds = median_time(lambda: lisp_call(LOOP_LISP, "loop", loop_n, 0), repeat)
        row.seconds.update({"CPython": python_seconds, "svit": svit_seconds})
        if session is not None:
            source = LOOP_PY + f"loop({loop_n}, 0)\n"
            checked("monty loop", session.feed_run(source), loop_n)
            row.seconds["monty"] = median_time(lambda: session.feed_run(source), repeat)
        if starlark is not None:
            star_source = LOOP_STARLARK + f"loop({loop_n}, 0)\n"
            checked("starlark loop", starlark.run(star_source), loop_n)
            row.seconds["starlark"] = median_time(lambda: starlark.run(star_source), repeat)
        rows.append(row)
        loop_steps = steps
        targets.append((f"tail loop x{loop_n:,} svit / CPython while", svit_seconds / python_seconds, 2.0))

        # 3. the counter activation
        row = Row("counter activation")
        py_state = {"count": 0}
        checked("python counter", python_counter(py_state, COUNTER_INPUT), 1)
        row.seconds["CPython"] = median_per_call(lambda: python_counter(py_state, COUNTER_INPUT), repeat, counter_calls)

        process = Process.builder("svit://local/bench/peers").memory("count", 0).library("counter", COUNTER_LISP).build()
        activation = process.exec("/lib/counter", COUNTER_INPUT)
        checked("svit counter", (activation.output, process.read("/memory/count")), (1, 1))
        bare = median_per_call(lambda: process.exec("/lib/counter", COUNTER_INPUT), repeat, counter_calls)
        row.seconds["svit"] = bare

        tool_call = ToolCall("bench", "exec", {"path": "/lib/counter", "input": COUNTER_INPUT})
        before = process.read("/memory/count")
        text, ok = run_tool(process, tool_call)
        checked("exec tool counter", (ok, process.read("/memory/count")), (True, before + 1))
        through_tool = median_per_call(lambda: run_tool(process, tool_call), repeat, counter_calls)

        counter_source = COUNTER_PY + "main(state, input)\n"
        if session is not None:
            monty_state = {"count": 0}

            def monty_counter() -> int:
                count: int = session.feed_run(counter_source, inputs={"state": monty_state, "input": COUNTER_INPUT})
                monty_state["count"] = count
                return count

            checked("monty counter", (monty_counter(), monty_state["count"]), (1, 1))
            row.seconds["monty"] = median_per_call(monty_counter, repeat, counter_calls)
        if starlark is not None:
            star_state = {"count": 0}

            def starlark_counter() -> int:
                count: int = starlark.run(counter_source, {"state": star_state, "input": COUNTER_INPUT})
                star_state["count"] = count
                return count

            checked("starlark counter", (starlark_counter(), star_state["count"]), (1, 1))
            row.seconds["starlark"] = median_per_call(starlark_counter, repeat, counter_calls)
        rows.append(row)

    print_table(rows)
    print(f"steps charged: fib {fib_steps:,}, loop {loop_steps:,}")
    print(f"counter activation, svit: {bare * 1e6:.1f} us bare; through the exec tool {through_tool * 1e6:.1f} us")
    targets.append(("counter activation, exec tool / bare", through_tool / bare, 1.5))
    for peer, bound in (("starlark", 3.0), ("monty", 0.25)):
        theirs = row.seconds.get(peer)
        if theirs is None:
            print(f"counter activation, svit / {peer}: skipped ({peer} not installed)")
        else:
            targets.append((f"counter activation, svit / {peer}", bare / theirs, bound))
    print()
    for name, ratio, bound in targets:
        print(f"{name:<44} {ratio:6.2f}x | target <= {bound}x: {'holds' if ratio <= bound else 'misses'}")
    holding = sum(1 for _, ratio, bound in targets if ratio <= bound)
    print(f"{holding} of {len(targets)} targets hold")


if __name__ == "__main__":
    main()
