"""Guest memory holds for what a run keeps at once, and names do not outlive their use."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from svit.lisp.context import LispLimits
from svit.lisp.errors import LimitError, LispError
from svit.lisp.interpreter import evaluate
from svit.lisp.values import Keyword, Name
from tests.bounds import MEMORY_SLACK_BYTES, assert_memory_within, measure

MIB = 1024 * 1024


# --- names -----------------------------------------------------------------------------


def _names_source(round_: int, count: int = 400, width: int = 1000) -> str:
    """A script of many long names, each unbound, so compiling it fails after reading them."""
    names = " ".join(f"n{round_}-{i}-" + "x" * width for i in range(count))
    keywords = " ".join(f":k{round_}-{i}-" + "y" * width for i in range(count // 4))
    return f"(list {names} {keywords})"


def test_names_from_failed_scripts_are_released() -> None:
    # 60 scripts, each reading ~0.5 MB of fresh names and keywords, fail to compile: nothing
    # keeps those names, so the memory they took returns.
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for round_ in range(60):
            with pytest.raises(LispError):
                evaluate(_names_source(round_))
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert retained <= MEMORY_SLACK_BYTES, f"{retained / MIB:.1f} MiB retained after 60 runs"


def test_names_alive_at_once_are_one_object() -> None:
    a = Name("some-name")
    assert Name("some-name") is a
    assert Keyword("some-name") is Keyword("some-name")
    assert Keyword("some-name") is not a
    held = evaluate("'(some-name some-name)")
    assert held[0] is held[1] is a


def test_a_name_read_again_after_it_died_equals_itself() -> None:
    first = evaluate("'a-name-that-dies")
    name_id = id(first)
    del first
    gc.collect()
    again = evaluate("'a-name-that-dies")
    assert again is Name("a-name-that-dies")
    assert evaluate("(= 'a-name-that-dies x)", x=again) is True
    del name_id


# --- what a run holds at once ------------------------------------------------------------

LIMIT = 1 * MIB
BIG = "x" * (LIMIT // 2)  # each copy is below the limit on its own
HOLDING_LIMITS = LispLimits(max_guest_memory=LIMIT, max_steps=10_000_000, max_execution_millis=60_000)


def _run(source: str, limits: LispLimits = HOLDING_LIMITS, **values):
    return lambda: evaluate(source, limits, big=BIG, **values)


def assert_refused_within(source: str, **values) -> None:
    cost = measure(_run(source, **values), memory=True)
    assert isinstance(cost.error, LimitError), f"accepted: {cost.result!r:.60}" if cost.error is None else cost.error
    assert cost.error.limit == "guest memory"
    assert_memory_within(cost, LIMIT)


ATTACKS = {
    "let bindings in a recursion": (
        "(define (hold n) (if (= n 0) 0 (let ((s (concat big \"!\"))) (+ (len s) (hold (- n 1))))))"
        "(hold 60)"
    ),
    "arguments being evaluated": (
        "(define (hold n) (if (= n 0) () (list (concat big \"!\") (hold (- n 1)))))"
        "(hold 60)"
    ),
    "many globals": "".join(f'(define a{i} (concat big "{i}"))' for i in range(40)),
    "results of map": "(len (map (lambda (i) (concat big (to-string i))) (range 40)))",
    "closures": (
        "(define (keep acc i) (let ((s (concat big (to-string i)))) (lambda () (list s acc))))"
        "(fold keep () (range 40))"
    ),
    "one long argument list": "(list " + " ".join('(concat big "!")' for _ in range(40)) + ")",
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_holding_many_values_below_the_limit_is_refused(name: str) -> None:
    assert_refused_within(ATTACKS[name])


def test_holding_chars_of_a_big_string_many_times_is_refused() -> None:
    text = "abcdefgh" * (LIMIT // 8 // 8 - 16)  # (chars text) alone is within the limit
    assert evaluate("(len (chars text))", HOLDING_LIMITS, text=text) == len(text)
    names = [f"c{i}" for i in range(6)]
    bindings = " ".join(f"({n} (chars text))" for n in names)
    source = f"(let ({bindings}) (+ " + " ".join(f"(len {n})" for n in names) + "))"
    cost = measure(_run(source, text=text), memory=True)
    assert isinstance(cost.error, LimitError) and cost.error.limit == "guest memory", cost.error or "accepted"
    assert_memory_within(cost, LIMIT)


def test_chars_of_wide_text_count_every_character_object() -> None:
    wide = "\u4e2d" * (LIMIT // 64)
    cost = measure(_run("(len (chars wide))", wide=wide), memory=True)
    assert isinstance(cost.error, LimitError) and cost.error.limit == "guest memory"
    assert_memory_within(cost, LIMIT)


# --- ordinary scripts keep running -------------------------------------------------------

PART = "z" * (LIMIT // 8)  # what an ordinary script builds at once is well below the limit


def test_building_and_dropping_big_strings_in_a_long_loop_runs() -> None:
    # 400 copies of an eighth of the limit (50 times the limit in all), one alive at a time.
    source = "(define (spin n acc) (if (= n 0) acc (spin (- n 1) (len (concat part (to-string n)))))) (spin 400 0)"
    cost = measure(_run(source, part=PART), memory=True)
    assert cost.error is None and cost.result == LIMIT // 8 + 1
    assert_memory_within(cost, LIMIT)


def test_building_and_dropping_half_the_limit_in_a_long_loop_runs() -> None:
    source = "(define (spin n acc) (if (= n 0) acc (spin (- n 1) (len (concat big (to-string n)))))) (spin 150 0)"
    assert evaluate(source, HOLDING_LIMITS, big=BIG) == LIMIT // 2 + 1


def test_a_long_loop_under_a_pending_argument_runs() -> None:
    # The outer call holds a computed argument while the loop builds and drops strings.
    source = (
        "(define (spin n acc) (if (= n 0) acc (spin (- n 1) (len (concat part (to-string n))))))"
        "(concat (to-string 7) (to-string (spin 400 0)))"
    )
    assert evaluate(source, HOLDING_LIMITS, part=PART) == "7" + str(LIMIT // 8 + 1)


def test_map_that_builds_and_drops_strings_runs() -> None:
    source = "(fold + 0 (map (lambda (i) (len (concat part (to-string i)))) (range 400)))"
    assert evaluate(source, HOLDING_LIMITS, part=PART) == 400 * (LIMIT // 8) + sum(len(str(i)) for i in range(400))


def test_sharing_one_value_many_times_counts_it_once() -> None:
    # One string of half the limit, bound to six globals, while a loop builds and drops more.
    source = (
        "(define kept (concat big \"!\"))"
        + "".join(f"(define k{i} kept)" for i in range(6))
        + "(define (spin n acc) (if (= n 0) acc (spin (- n 1) (len (concat part (to-string n))))))"
        "(spin 100 0)"
    )
    assert evaluate(source, HOLDING_LIMITS, big=BIG, part=PART) == LIMIT // 8 + 1


def test_host_values_are_not_charged_to_the_run() -> None:
    huge = "y" * (4 * LIMIT)
    source = "(define (spin n acc) (if (= n 0) acc (spin (- n 1) (concat \"a\" (to-string n))))) (spin 20000 huge)"
    assert evaluate(source, HOLDING_LIMITS, big=BIG, huge=huge) == "a1"


@pytest.mark.parametrize("call", ["(map keep (range 40))", "(sort-by keep (range 40))"])
def test_results_a_collection_function_gathers_are_seen(call: str) -> None:
    # Each result is an eighth of the limit: only the results gathered so far pass it.
    source = f"(define (keep i) (concat part (to-string i))) (len {call})"
    cost = measure(_run(source, part=PART), memory=True)
    assert isinstance(cost.error, LimitError) and cost.error.limit == "guest memory", cost.error or "accepted"
    assert_memory_within(cost, LIMIT)
