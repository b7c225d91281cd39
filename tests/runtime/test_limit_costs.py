"""Conversions, comparisons and searches pay for what they do, so every limit holds.

Each test builds an input that made the host do far more work than its limits allow
(shared references to a big text, many large arguments, many comparisons, long scans)
and checks that the run stops within a small factor of the configured limit, with a
clear error that names the limit, leaving the process exactly as it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from svit import Mount, Process
from svit.errors import ExecutionLimitExceeded, InvalidValue, SvitError
from svit.limits import Limits
from tests.bounds import assert_memory_within, assert_time_within, measure, unchanged

ADDRESS = "svit://local/tests/limit-costs"
LIMIT_MILLIS = 100
#: A text just under the default text limit, so a process can hold it.
NEAR_LIMIT_TEXT = "x" * ((1 << 20) - 64)
#: About 1 MiB of short lines that a search pattern never matches.
MANY_LINES = "a\n" * ((1 << 19) - 64)


def _process(memory: dict | None = None, **limits: int) -> Process:
    builder = Process.builder(ADDRESS).limits(Limits(**limits))
    for key, value in (memory or {}).items():
        builder = builder.memory(key, value)
    return builder.build()


def _refused(p: Process, source: str, millis: int = LIMIT_MILLIS, *, memory: bool = False):
    """Run ``source`` and check it was refused within the time limit, leaving ``p`` as it was."""
    with unchanged(p):
        cost = measure(lambda: p.exec_inline(source), memory=memory)
    assert cost.error is not None, "the run was accepted"
    assert isinstance(cost.error, SvitError), repr(cost.error)
    assert_time_within(cost, millis)
    return cost


# --- shared references are measured before they are copied or hashed -------------------


def test_write_of_many_references_to_a_big_text_stops_at_the_text_limit() -> None:
    p = _process({"s": NEAR_LIMIT_TEXT}, max_execution_millis=LIMIT_MILLIS)
    source = '(define (main input) (let ((s (read "/memory/s"))) (write "/memory/y" (map (lambda (i) s) (range 2000)))))'
    cost = _refused(p, source)
    assert any(name in cost.error.message for name in ("text bytes", "guest memory")), cost.error.message


def test_conversion_refuses_shared_text_before_encoding_every_occurrence() -> None:
    from svit.guest import to_node
    from svit.lisp.budget import Budget
    from svit.lisp.context import Context, LispLimits, enter, leave

    shared = tuple([NEAR_LIMIT_TEXT] * 9_999)
    previous = enter(Context(LispLimits(), Budget(max_steps=1_000_000, max_millis=None)))
    try:
        cost = measure(lambda: to_node(shared, Limits()))
    finally:
        leave(previous)
    assert isinstance(cost.error, InvalidValue) and "text bytes" in cost.error.message
    assert_time_within(cost, LIMIT_MILLIS)


def _out_of_steps(p: Process, source: str) -> None:
    """The activation runs out of steps and leaves the process as it was."""
    with unchanged(p):
        with pytest.raises(ExecutionLimitExceeded) as caught:
            p.exec_inline(source)
    assert "steps" in caught.value.message


def test_converted_text_is_charged_per_64_bytes() -> None:
    # 1 MiB of text is 16,384 steps of copying and hashing, more than this run has.
    p = _process({"s": NEAR_LIMIT_TEXT}, max_steps=2_000)
    _out_of_steps(p, '(define (main input) (write "/memory/y" (list (read "/memory/s"))))')


def test_a_scripts_output_is_charged_to_its_activation() -> None:
    p = _process({"s": NEAR_LIMIT_TEXT}, max_steps=2_000)
    _out_of_steps(p, '(define (main input) (do (write "/memory/x" 1) (list (read "/memory/s"))))')


def test_converted_entries_are_charged_one_step_each() -> None:
    p = _process(max_steps=5_000)
    with unchanged(p):
        with pytest.raises(ExecutionLimitExceeded):
            p.exec_inline('(define (main input) (let ((xs (range 2000))) (value-array xs xs xs xs)))')
    # The same value at a larger budget is accepted.
    assert p.exec_inline('(define (main input) (count (value-array (range 100) (range 100))))').output == 2


def test_a_nested_host_value_counts_toward_the_totals() -> None:
    p = _process({"s": NEAR_LIMIT_TEXT}, max_execution_millis=LIMIT_MILLIS)
    source = '(define (main input) (let ((m (read "/memory"))) (apply value-array (map (lambda (i) m) (range 1000)))))'
    cost = _refused(p, source)
    assert "text bytes" in cost.error.message


def test_jq_input_is_charged_for_its_conversion() -> None:
    p = _process({"s": NEAR_LIMIT_TEXT}, max_steps=2_000)
    _out_of_steps(p, '(define (main input) (jq "length" (read "/memory")))')


def test_jq_input_texts_are_bounded_by_guest_memory_in_total() -> None:
    p = _process({"s": NEAR_LIMIT_TEXT}, max_execution_millis=LIMIT_MILLIS)
    source = '(define (main input) (let ((s (read "/memory/s"))) (jq "length" (map (lambda (i) s) (range 64)))))'
    cost = _refused(p, source)
    assert "guest memory" in cost.error.message


def test_jq_still_reduces_a_text_larger_than_the_text_limit() -> None:
    p = _process({"s": NEAR_LIMIT_TEXT})
    source = '(define (main input) (let ((s (read "/memory/s"))) (jq "length" (concat s s))))'
    assert p.exec_inline(source).output == [2 * len(NEAR_LIMIT_TEXT)]


# --- value-array and value-map count entries across their arguments -------------------


def test_value_array_counts_entries_across_arguments() -> None:
    p = _process(max_execution_millis=LIMIT_MILLIS)
    source = "(define (main input) (let ((xs (range 9999))) (apply value-array (map (lambda (i) xs) (range 512)))))"
    cost = _refused(p, source)
    assert "value entries" in cost.error.message
    cost = _refused(p, source, memory=True)
    assert_memory_within(cost, p.limits.max_guest_memory)


def test_value_map_counts_entries_across_arguments() -> None:
    # Room for the argument list itself, which holds each value once per occurrence.
    p = _process(max_execution_millis=LIMIT_MILLIS, max_guest_memory=64 * 1024 * 1024)
    source = (
        "(define (main input) (let ((xs (range 9999)))"
        " (apply value-map (apply concat (map (lambda (i) (list (to-string i) xs)) (range 512))))))"
    )
    cost = _refused(p, source)
    assert "value entries" in cost.error.message


def test_value_map_keys_count_as_text() -> None:
    p = _process({"s": NEAR_LIMIT_TEXT})
    with unchanged(p):
        with pytest.raises(InvalidValue) as caught:
            p.exec_inline('(define (main input) (let ((s (read "/memory/s"))) (value-map s 1 (concat s "y") 2)))')
    assert "text bytes" in caught.value.message


# --- /= charges per comparison ----------------------------------------------------------


def test_not_equal_over_many_arguments_stops_within_the_time_limit() -> None:
    p = _process(max_execution_millis=LIMIT_MILLIS)
    cost = _refused(p, "(define (main input) (do (write \"/memory/x\" 1) (apply /= (range 3000))))")
    assert isinstance(cost.error, ExecutionLimitExceeded)


def test_not_equal_over_many_arguments_stops_at_the_step_limit() -> None:
    p = _process(max_steps=100_000)
    _out_of_steps(p, "(define (main input) (apply /= (range 1000)))")


# --- search charges per byte and per line scanned ---------------------------------------


def test_search_of_memory_stops_within_the_time_limit() -> None:
    p = _process({"s": MANY_LINES}, max_execution_millis=LIMIT_MILLIS)
    cost = _refused(p, '(define (main input) (do (write "/memory/x" 1) (search "/memory" "zz")))')
    assert isinstance(cost.error, ExecutionLimitExceeded)


def test_search_of_memory_charges_per_line() -> None:
    p = _process({"s": "a\n" * 20_000}, max_steps=10_000)
    _out_of_steps(p, '(define (main input) (search "/memory" "zz"))')


def test_search_of_mount_files_stops_within_the_time_limit(tmp_path: Path) -> None:
    for name in ("a.txt", "b.txt", "c.txt", "d.txt"):
        (tmp_path / name).write_text(MANY_LINES)
    p = Process.builder(ADDRESS).mount("docs", Mount.folder(tmp_path)).limits(Limits(max_execution_millis=LIMIT_MILLIS)).build()
    cost = _refused(p, '(define (main input) (do (write "/memory/x" 1) (search "/mounts/docs" "zz")))')
    assert isinstance(cost.error, ExecutionLimitExceeded)


def test_search_of_mount_files_charges_per_line(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n" * 20_000)
    p = Process.builder(ADDRESS).mount("docs", Mount.folder(tmp_path)).limits(Limits(max_steps=10_000)).build()
    _out_of_steps(p, '(define (main input) (search "/mounts/docs" "zz"))')


def test_a_small_search_still_finds_its_matches(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo zz\nthree\n")
    p = Process.builder(ADDRESS).mount("docs", Mount.folder(tmp_path)).memory("t", "zz\nno\nzz").build()
    found = p.exec_inline('(define (main input) (value-get (search "/memory" "zz") "/matches"))').output
    assert [m["line"] for m in found] == [1, 3]
    found = p.exec_inline('(define (main input) (value-get (search "/mounts/docs" "zz") "/matches"))').output
    assert found == [{"line": 2, "path": "/mounts/docs/a.txt", "text": "two zz"}]


# --- generated programs -----------------------------------------------------------------

_SHAPES = (
    '(write "/memory/y" {xs})',
    "(apply value-array {xs})",
    "(value-array {xs} {xs} {xs})",
    '(value-map "a" {xs} "b" {xs})',
    '(jq "length" {xs})',
    "(apply /= (range {n}))",
    '(do (write "/memory/t" (apply concat (map (lambda (i) "a\\n") (range {n})))) (search "/memory" "zz"))',
    '(json-stringify {xs})',
)


def _program(rng) -> str:
    n = rng.choice((10, 500, 3_000, 20_000))
    part = rng.choice(("s", "(range 100)", "(read \"/memory\")", "(list s s)"))
    xs = f"(map (lambda (i) {part}) (range {n}))"
    body = rng.choice(_SHAPES).format(xs=xs, n=n)
    return f'(define (main input) (let ((s (read "/memory/s"))) (do (write "/memory/x" 1) {body})))'


@pytest.mark.parametrize("seed", range(16))
def test_generated_programs_stay_within_the_limits(seed: int) -> None:
    import random

    rng = random.Random(seed)
    text = "x" * rng.choice((100, 64 * 1024, (1 << 20) - 64))
    p = _process({"s": text}, max_execution_millis=LIMIT_MILLIS)
    source = _program(rng)
    before = (p.version, p.snapshot())
    cost = measure(lambda: p.exec_inline(source))
    assert_time_within(cost, LIMIT_MILLIS)
    if cost.error is not None:
        assert isinstance(cost.error, SvitError), f"{source}: {cost.error!r}"
        assert (p.version, p.snapshot()) == before, source
