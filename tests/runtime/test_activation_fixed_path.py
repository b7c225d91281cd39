"""The activation's fixed path written out: the first slice of steps drawn before ``main``
is called, host functions of one or two arguments called through wrappers with their
arguments named, and a write's integer converted inline. Each behaves exactly as the
general form it replaces: the same steps, stopping points, errors and mutations."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from svit import Process, tree
from svit.activation import WorkingState
from svit.errors import SvitError
from svit.guest import SvitValue, item_to_lisp
from svit.lisp.budget import SLICE, Budget
from svit.lisp.context import LispLimits
from svit.lisp.errors import BudgetExhausted, HostFunctionError, LispError
from svit.lisp.interpreter import Interpreter
from svit.lisp.names import global_name
from svit.mutation import Set
from svit.paths import parse, parsed_before

#: main counts down ``n`` iterations of a self tail loop (steps well past a slice), with a
#: host call before and after it.
SPIN = (
    "(define (spin n acc) (if (= n 0) acc (spin (- n 1) (+ acc 1))))"
    " (define (main n) (let ((m (spin (host-id n) 0))) (host-id m)))"
)


def spin_outcome(steps: int, n: int, together: bool) -> tuple[Any, ...]:
    """``main(n)`` under ``steps``: run and called in one guard, or run, then called."""
    interp = Interpreter(LispLimits(), Budget(steps, None))
    interp.define_function("host-id", lambda x: x, 1, 1)
    try:
        if together:
            value: Any = interp.run_and_call(SPIN, "main", n)[1]
        else:
            interp.run(SPIN)
            value = interp.call("main", n)
    except LispError as error:
        return ("error", error.message, interp.budget.used)
    return ("ok", value, interp.budget.used)


@pytest.mark.parametrize("n", [0, 3, 600, 1500])
def test_the_first_slice_drawn_before_main_stops_where_the_tick_would(n: int) -> None:
    # run_and_call draws main's first slice before calling it; call leaves it to main's
    # first step (_tick). Under every budget, at and around the full cost and each slice
    # boundary, both charge the same steps and stop at the same point.
    full = spin_outcome(10**6, n, False)[2]
    budgets = {0, 1, 2, 3, full - 1, full, full + 1, SLICE - 1, SLICE, SLICE + 1, 2 * SLICE, 2 * SLICE + 1}
    for steps in sorted(b for b in budgets if b >= 0):
        assert spin_outcome(steps, n, True) == spin_outcome(steps, n, False), steps
    assert spin_outcome(full, n, True) == ("ok", n, full)
    assert spin_outcome(full - 1, n, True)[0] == "error"


class Owner:
    """Host methods of one, two and three arguments, and one that fails in the host."""

    def one(self, a: Any) -> Any:
        return ("one", a)

    def two(self, a: Any, b: Any) -> Any:
        return ("two", a, b)

    def three(self, a: Any, b: Any, c: Any) -> Any:
        return ("three", a, b, c)

    def broken(self, a: Any) -> Any:
        return {}[a]


METHODS = {"one": 1, "two": 2, "three": 3, "broken": 1}


def namespace(steps: int = 100_000) -> Interpreter:
    interp = Interpreter(LispLimits(), Budget(steps, None))
    interp.define_functions({global_name(m): (m, m, n, n) for m, n in METHODS.items()}, owner=Owner())
    # The same methods installed as plain functions: the general wrapper.
    for method, count in METHODS.items():
        interp.define_function(f"plain-{method}", getattr(Owner(), method), count, count)
    return interp


def result(interp: Interpreter, source: str) -> tuple[Any, ...]:
    try:
        return ("ok", interp.run(source), interp.budget.used)
    except HostFunctionError as error:
        return ("host", error.function, type(error.__cause__).__name__, interp.budget.used)
    except LispError as error:
        return ("error", type(error).__name__, error.message, interp.budget.used)


@pytest.mark.parametrize("call", [
    "(one 1)", "(two 1 2)", "(three 1 2 3)",
    "(apply one (list))", "(apply one (list 1 2))", "(apply two (list 1))", "(apply two (list 1 2 3))",
    "(apply two (list))", "(apply three (list 1 2))", "(apply one (list 5))", "(apply two (list 5 6))",
    '(broken "k")',
])
def test_named_argument_wrappers_behave_as_the_general_one(call: str) -> None:
    fixed = result(namespace(), call)
    general = result(namespace(), call.replace("(one", "(plain-one").replace("(two", "(plain-two")
                     .replace("(three", "(plain-three").replace("(broken", "(plain-broken")
                     .replace("apply one", "apply plain-one").replace("apply two", "apply plain-two")
                     .replace("apply three", "apply plain-three"))
    if fixed[0] == "host":
        assert fixed[1:] == ("broken", "KeyError", fixed[3]) and general[1:] == ("plain-broken", "KeyError", fixed[3])
    else:
        assert fixed == tuple(v.replace("plain-", "") if isinstance(v, str) else v for v in general)


def test_methods_of_one_or_two_arguments_get_named_argument_wrappers() -> None:
    interp = namespace()
    interp.run("(list (one 1) (two 1 2) (three 1 2 3) (plain-one 1))")
    wrappers = {name: interp.globals[global_name(name)].__code__ for name in ("one", "two", "three", "plain-one")}
    # _d and the arguments, named; the rest take a tuple of arguments (and count it).
    assert (wrappers["one"].co_argcount, wrappers["two"].co_argcount) == (2, 3)
    assert (wrappers["three"].co_argcount, wrappers["plain-one"].co_argcount) == (1, 1)


def test_a_named_argument_wrapper_charges_its_step_and_stops_at_the_budget() -> None:
    for steps in range(0, 12):
        fixed = result(namespace(steps), "(do (one 1) (two 1 2) (one 3))")
        general = result(namespace(steps), "(do (plain-one 1) (plain-two 1 2) (plain-one 3))")
        assert fixed == tuple(v.replace("plain-", "") if isinstance(v, str) else v for v in general), steps
    interp = namespace(100)
    interp.budget.deadline = 0.0  # long past: a host call looks at the clock
    with pytest.raises(BudgetExhausted):
        interp.run("(one 1)")


def test_a_write_of_an_integer_records_the_set_the_general_conversion_makes() -> None:
    process = Process.builder("svit://local/test/write-int").memory("count", 0).build()
    # (Lisp value, plain value): a Lisp list is a tuple.
    for value, plain in ((0, 0), (-1, -1), (2**63 - 1, 2**63 - 1), (-(2**63), -(2**63)), ("text", "text"),
                         ((1, 2), [1, 2]), (True, True)):
        state = WorkingState(process)
        state.budget = Budget(1_000, None)
        state.fn_write("/memory/count", value)
        made = state.mutations[-1]
        assert type(made) is Set and made == Set("/memory/count", tree.from_value(plain, scripts_allowed=False))
        assert made.value.hash == tree.from_value(plain, scripts_allowed=False).hash
        assert state.memory.to_value() == {"count": plain} and state.budget.used >= 1
    for outside in (2**63, -(2**63) - 1):
        state = WorkingState(process)
        with pytest.raises(SvitError):
            state.fn_write("/memory/count", outside)
        assert state.mutations == [] and state.memory.to_value() == {"count": 0}
    state = WorkingState(process)
    state.budget = Budget(0, None)
    with pytest.raises(BudgetExhausted):
        state.fn_write("/memory/count", 5)  # its one step, refused: nothing staged
    assert state.mutations == [] and state.memory.to_value() == {"count": 0}


_SCALARS = st.one_of(st.integers(-(2**63), 2**63 - 1), st.booleans(), st.none(), st.text(max_size=3),
                     st.floats(allow_nan=False, allow_infinity=False))
_VALUES = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=3), st.dictionaries(st.text(max_size=2), _SCALARS, max_size=3))


@given(record=st.dictionaries(st.text(max_size=3), _VALUES, max_size=60), key=st.text(max_size=3))
@settings(max_examples=80, deadline=None)
def test_value_get_of_one_key_reads_what_the_general_walk_reads(record: dict[str, Any], key: str) -> None:
    # value-get of "/key" on a record looks the key up directly; the general walk
    # (tree.find, then item_to_lisp) is the reference, for present and absent keys,
    # one-leaf and many-chunk maps, scalars and containers.
    process = Process.builder("svit://local/test/value-get").build()
    state = WorkingState(process)
    node = tree.from_value(record, scripts_allowed=False)
    for probe in {key, *list(record)[:3]}:
        if "/" in probe or probe in ("", ".", ".."):
            continue
        got = state.fn_value_get(SvitValue(node), "/" + probe)
        expected = item_to_lisp(tree.find(node, (probe,)))
        assert type(got) is type(expected)
        assert (got.node == expected.node) if type(got) is SvitValue else got == expected


@given(text=st.one_of(st.text(alphabet="/ab.", max_size=8), st.sampled_from(["/memory/count", "/", "", "a/b", "/a//b"])))
@settings(max_examples=80, deadline=None)
def test_a_path_parsed_before_is_what_parse_gives_and_a_bad_one_never_is(text: str) -> None:
    # The guest's reads and writes look a path up in parse's own table first.
    try:
        segments = parse(text)
    except SvitError:
        assert parsed_before(text) is None  # errors are never kept: parse raises again
        process = Process.builder("svit://local/test/parsed").memory("count", 1).build()
        with pytest.raises(SvitError):
            WorkingState(process).fn_read(text)
        return
    assert parsed_before(text) in (None, segments)  # kept unless too long
    if len(text) <= 256:
        assert parsed_before(text) == segments
