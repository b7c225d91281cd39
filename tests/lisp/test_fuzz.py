"""Random input never escapes the language's own errors or outlives its budget."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from svit.lisp.budget import Budget
from svit.lisp.context import LispLimits
from svit.lisp.errors import LispError
from svit.lisp.functions import SYSTEM_FUNCTIONS
from svit.lisp.interpreter import Interpreter
from svit.lisp.reader import read

SMALL = LispLimits(
    max_call_stack=16,
    max_value_stack=64,
    max_namespace_entries=32,
    max_syntax_depth=24,
    max_integer_bits=64,
    max_guest_memory=4096,
    max_steps=2_000,
    max_execution_millis=1_000,
)

FUZZ = settings(max_examples=5_000, deadline=None, suppress_health_check=list(HealthCheck), database=None)


def run_guarded(source: str) -> None:
    budget = Budget(SMALL.max_steps, SMALL.max_execution_millis)
    interp = Interpreter(SMALL, budget)
    interp.define_value("input", 7)
    started = time.monotonic()
    try:
        interp.run(source)
        if interp.has("main"):
            interp.call("main", 1)
    except LispError as error:
        assert error.message  # every error renders a message
        assert "Traceback" not in error.message and "/work" not in error.message
    assert budget.used <= SMALL.max_steps
    # A generous bound: the backstop is 1 s; nothing may run far past it.
    assert time.monotonic() - started < 10


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes(data: bytes) -> None:
    run_guarded(data.decode("utf-8", errors="replace"))


@settings(max_examples=1_000, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.binary(max_size=120))
def test_random_bytes_through_the_reader(data: bytes) -> None:
    try:
        read(data.decode("latin-1"))
    except LispError:
        pass


NAMES = sorted(SYSTEM_FUNCTIONS) + [
    "define", "lambda", "let", "if", "cond", "case", "and", "or", "do", "apply", "quote",
    "macro", "const", "else", "main", "input", "f", "g", "x", "y", ":optional", ":key", ":rest",
]

atoms = st.one_of(
    st.sampled_from(NAMES),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(max_size=8).map(lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'),
    st.sampled_from(["()", "true", "false", "'x", "#'a'", "1/3", "0x1F", "#b\"ab\""]),
)


def as_source(tree) -> str:
    if isinstance(tree, str):
        return tree
    return "(" + " ".join(as_source(t) for t in tree) + ")"


sexprs = st.recursive(atoms, lambda children: st.lists(children, max_size=6), max_leaves=40)
programs = st.lists(sexprs, min_size=1, max_size=4).map(lambda forms: "\n".join(as_source(f) for f in forms))


@FUZZ
@given(programs)
def test_random_s_expressions(source: str) -> None:
    run_guarded(source)


definitions = st.tuples(
    st.lists(st.sampled_from(["n", "m", "acc"]), max_size=3, unique=True), sexprs
).map(lambda p: f"(define (f {' '.join(p[0])}) {as_source(p[1])}) (define (main input) (f {' '.join('input' for _ in p[0])}))")


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(definitions)
def test_random_function_definitions(source: str) -> None:
    run_guarded(source)
