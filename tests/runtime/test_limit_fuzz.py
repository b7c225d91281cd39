"""Generated hostile programs stay within a small factor of the limits they run under.

Each program combines the constructs that once made the host do far more work than
the limits allow: macros returning forms that share their parts, values that refer
to one big text many times, functions given very many arguments, big texts, searches
over what the script wrote, and many big values held at once. Every run, whether it
succeeds or is stopped, must end within a small factor of the time limit and hold no
more than a small factor of the memory the limits allow; a stopped run leaves the
process exactly as it was.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from svit import Limits, Process
from svit.errors import SvitError
from tests.bounds import assert_memory_within, assert_time_within, measure, state_of

LIMITS = Limits(
    max_execution_millis=500,
    max_steps=200_000,
    max_guest_memory=1024 * 1024,
    max_text_bytes=256 * 1024,
    max_tree_text_bytes=1024 * 1024,
)
#: Everything a run may hold: its own values plus the tree it is allowed to build.
MEMORY_ALLOWED = LIMITS.max_guest_memory + LIMITS.max_tree_text_bytes + LIMITS.max_text_bytes

HELPERS = """
(define (grow s n) (if (= n 0) s (grow (concat s s) (- n 1))))
(define (nest n) (if (= n 0) 'x (let ((f (nest (- n 1)))) (list '+ f f))))
(macro (shared n) (nest n))
"""


def shared_macro(levels: int) -> str:
    # Each level refers to the form below it twice: 2**levels leaves, `levels` conses.
    return f"(let ((x 1)) (shared {levels}))"


def shared_references(doublings: int, copies: int) -> str:
    return f'(let ((s (grow "abcdefgh" {doublings}))) (write "/memory/shared" (map (lambda (i) s) (range {copies}))))'


def many_arguments(arguments: int, entries: int) -> str:
    return f"(let ((xs (range {entries}))) (count (apply value-array (map (lambda (i) xs) (range {arguments})))))"


def all_different(arguments: int) -> str:
    return f"(apply /= (range {arguments}))"


def big_text(doublings: int) -> str:
    return f'(count (grow "0123456789abcdef" {doublings}))'


def search_written(lines: int) -> str:
    return (
        f'(do (write "/memory/lines" (apply concat (map (lambda (i) "needle in a line of hay\\n") (range {lines}))))'
        ' (count (to-list (search "/memory" "hay$"))))'
    )


def held_at_once(doublings: int, copies: int) -> str:
    held = " ".join(f"(c{i} (chars s))" for i in range(copies))
    names = " ".join(f"(count c{i})" for i in range(copies))
    return f'(let ((s (grow "abcdefgh" {doublings})) {held}) (+ {names}))'


CONSTRUCTS = st.one_of(
    st.builds(shared_macro, st.integers(8, 22)),
    st.builds(shared_references, st.integers(10, 17), st.integers(10, 4000)),
    st.builds(many_arguments, st.integers(2, 600), st.integers(10, 9_999)),
    st.builds(all_different, st.integers(10, 5000)),
    st.builds(big_text, st.integers(10, 26)),
    st.builds(search_written, st.integers(100, 60_000)),
    st.builds(held_at_once, st.integers(10, 13), st.integers(1, 40)),
)


def program(parts: list[str]) -> str:
    return HELPERS + "(define (main input) (do " + " ".join(parts) + " true))"


_runs = itertools.count()


def run_once(source: str, *, memory: bool):
    """Install the script (compiling it) and run it; a refused step changes nothing.

    A comment unique to the run keeps the compile cache from hiding compile-time work.
    """
    source = f"; run {next(_runs)}\n" + source
    process = Process.builder("svit://local/fuzz/limits").limits(LIMITS).build()
    refused: list[str] = []

    def go() -> None:
        before = state_of(process)
        try:
            process.write("/lib/attack", {"source": source, "documentation": ""})
        except SvitError:
            refused.append("write")
            assert state_of(process) == before, "a refused /lib write changed the process"
            raise
        installed = state_of(process)
        try:
            process.exec("/lib/attack")
        except SvitError:
            refused.append("exec")
            assert state_of(process) == installed, "a stopped activation changed the process"
            raise

    cost = measure(go, memory=memory)
    if cost.error is not None:
        assert isinstance(cost.error, SvitError), f"not a Svit error: {cost.error!r}"
        assert refused, "the failure was not a refusal"
    return cost


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(CONSTRUCTS, min_size=1, max_size=3))
def test_generated_programs_stay_within_the_limits(parts: list[str]) -> None:
    source = program(parts)
    timed = run_once(source, memory=False)
    assert_time_within(timed, LIMITS.max_execution_millis)
    traced = run_once(source, memory=True)
    assert_memory_within(traced, MEMORY_ALLOWED)
