"""Activations reuse a script's definitions-only top level in a pooled namespace, and
nothing of it goes stale: every activation has the output, error, steps and committed
state it has when every top level runs, across /lib edits, forks, restores, other
limits and other ports."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from svit import Limits, Ports, Process, tree
from svit.activation import WorkingState
from svit.errors import SvitError
from svit.lisp.budget import Budget
from svit.lisp.interpreter import Interpreter

SCRIPTS = {
    "counter": '(define (main input) (let ((n (+ (read "/memory/count") (map-get input "by"))))'
               ' (do (write "/memory/count" n) n)))',
    # main defines a global and rebinds one the top level bound.
    "tally": '(define seen 0) (define (main input) (do (define seen (+ seen (map-get input "by")))'
             ' (define extra seen) (write "/memory/seen" seen) seen))',
    # Reads what tally's main defines: unbound, whatever ran before in any namespace.
    "peek": "(define (main input) (if false (define extra 0) extra))",
    # An impure top level: it reads memory when it runs.
    "snap": '(define at (read "/memory/count")) (define (main input) (+ at (map-get input "by")))',
    # Definitions only over the host's read and input.
    "shadow": '(define (read p) 1000) (define input 7) (define (main x) (+ (read "/memory/count") input))',
    # Calls its process's port.
    "port": '(define label "port: ") (define (main input) (port-call "name" input))',
    # As many definitions as the tight limits below refuse.
    "many": " ".join(f"(define d{i} {i})" for i in range(40)) + ' (define (main input) (+ d39 (map-get input "by")))',
}
EDITS = (
    '(define (main input) (let ((n (* 2 (read "/memory/count")))) (do (write "/memory/count" n) n)))',
    '(define seen 100) (define (main input) (do (define seen (+ seen 1)) seen))',
    '(define extra 5) (define (main input) extra)',
)
LIMITS = (Limits(), Limits(max_namespace_entries=70))


@contextmanager
def reuse(on: bool) -> Iterator[None]:
    saved = Interpreter.reuse_top_levels
    Interpreter.reuse_top_levels = on
    try:
        yield
    finally:
        Interpreter.reuse_top_levels = saved


def answering(answer: str) -> Any:
    def port(_value: Any) -> str:
        return answer

    return port


def world(tag: str) -> list[Process]:
    processes = []
    for index, limits in enumerate(LIMITS):
        builder = Process.builder(f"svit://local/test/reuse-{tag}-{index}").memory("count", index).memory("seen", 0)
        for name, source in SCRIPTS.items():
            builder.library(name, source)
        builder.ports(Ports().port("name", answering(f"process {index}")))
        processes.append(builder.limits(limits).build())
    return processes


def outcome(run: Any) -> tuple[Any, ...]:
    try:
        return ("ok", run())
    except SvitError as error:
        return ("error", error.code, error.message)


def budgeted(process: Process, name: str, by: int, steps: int) -> tuple[Any, ...]:
    """Run ``name`` under a budget of ``steps``, uncommitted: its outcome, steps and memory."""
    state = WorkingState(process)
    state.budget = Budget(steps, None)
    source = state.find_script(name).source
    result = outcome(lambda: state.run(name, source, tree.from_value({"by": by}, scripts_allowed=False)).to_value())
    return result, state.budget.used, state.memory.to_value()


def full_cost(process: Process, name: str) -> int:
    with reuse(False):
        return budgeted(process, name, 1, 10**6)[1]


Op = tuple[str, int, str, int, int]


@st.composite
def operations(draw: st.DrawFn) -> list[Op]:
    # A few scripts at a time (counter among them, to change what they read), so the
    # same one comes back to a namespace often.
    names = draw(st.lists(st.sampled_from(sorted(SCRIPTS)), min_size=1, max_size=3, unique=True)) + ["counter"]
    op = st.tuples(st.sampled_from(("exec", "exec", "exec", "budget", "edit", "fork", "restore")),
                   st.integers(0, len(LIMITS) - 1), st.sampled_from(names), st.integers(-2, 2), st.integers(-3, 3))
    return draw(st.lists(op, min_size=1, max_size=14))


def step(processes: list[Process], op: Op) -> Any:
    kind, which, name, by, offset = op
    process = processes[which]
    if kind == "exec":
        return outcome(lambda: process.exec(f"/lib/{name}", {"by": by}).output), process.version, process.read("/memory")
    if kind == "budget":
        return budgeted(process, name, by, max(0, full_cost(process, name) + offset))
    if kind == "edit":
        source = EDITS[by % len(EDITS)]
        process.write(f"/lib/{name}", {"source": source})
        return process.version
    if kind == "fork":
        processes[which] = process.fork(f"{process.address}-f")
    else:
        processes[which] = Process.restore(process.snapshot())
    return processes[which].exec(f"/lib/{name}", {"by": by}).output if name == "counter" else None


@given(ops=operations())
@settings(max_examples=150, deadline=None)
def test_activations_reusing_top_levels_are_the_activations_running_them(ops: list[Op]) -> None:
    reused, ran = world("on"), world("off")
    for op in ops:
        with reuse(True):
            got = step(reused, op)
        with reuse(False):
            expected = step(ran, op)
        assert _without_addresses(got) == _without_addresses(expected), op
    for a, b in zip(reused, ran):
        assert a.read("/memory") == b.read("/memory") and a.read("/lib") == b.read("/lib")


def _without_addresses(value: Any) -> Any:
    return value if not isinstance(value, tuple) else tuple(
        v.replace("-on-", "-").replace("-off-", "-") if isinstance(v, str) else _without_addresses(v) for v in value)


def test_a_main_defining_globals_leaves_none_for_the_next_run() -> None:
    p = world("leak")[0]
    outputs = [p.exec("/lib/tally", {"by": 2}).output for _ in range(3)]
    assert outputs == [2, 2, 2]
    with_error = [outcome(lambda: p.exec("/lib/peek", None)) for _ in range(2)]
    assert all(o[0] == "error" and "unbound name `extra`" in o[2] for o in with_error)


def test_an_impure_top_level_runs_every_time() -> None:
    p = world("impure")[0]
    assert p.exec("/lib/snap", {"by": 1}).output == 1
    p.exec("/lib/counter", {"by": 5})
    assert p.exec("/lib/snap", {"by": 1}).output == 6


def test_processes_with_other_ports_and_limits_each_run_their_own() -> None:
    roomy, tight = world("apart")
    for _ in range(3):
        assert roomy.exec("/lib/port", 1).output == "process 0"
        assert tight.exec("/lib/port", 1).output == "process 1"
        assert roomy.exec("/lib/many", {"by": 1}).output == 40
        assert outcome(lambda: tight.exec("/lib/many", {"by": 1}))[1] == "resource_limit_exceeded"


def test_an_edit_fork_or_restore_runs_the_script_it_holds() -> None:
    p = world("edits")[0]
    assert p.exec("/lib/tally", {"by": 1}).output == 1
    p.write("/lib/tally", {"source": EDITS[1]})
    assert [p.exec("/lib/tally", None).output for _ in range(2)] == [101, 101]
    child = p.fork("svit://local/test/reuse-edits-child")
    child.write("/lib/tally", {"source": SCRIPTS["tally"]})
    assert (child.exec("/lib/tally", {"by": 3}).output, p.exec("/lib/tally", None).output) == (3, 101)
    back = Process.restore(child.snapshot())
    assert (back.exec("/lib/tally", {"by": 4}).output, child.exec("/lib/tally", {"by": 5}).output) == (4, 5)
