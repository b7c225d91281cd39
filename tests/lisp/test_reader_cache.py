"""The reader's cache: repeated sources are read once, and what it keeps is bounded."""

from __future__ import annotations

from svit.lisp.reader import read


def test_a_short_source_read_twice_is_read_once() -> None:
    source = "(define (short-cached x) x)"
    assert read(source) is read(source)


def test_a_source_of_medium_length_is_cached_apart_from_short_ones() -> None:
    source = "(define medium-cached 1)\n" + ";" * 6_000 + "\n"
    kept = read(source)
    for i in range(200):  # many short sources do not push a longer one out
        read(f"(define short-{i} {i})")
    assert read(source) is kept


def test_only_the_latest_long_source_is_kept() -> None:
    first = "(define long-first 1)\n" + ";" * 30_000 + "\n"
    second = "(define long-second 1)\n" + ";" * 30_000 + "\n"
    kept = read(first)
    assert read(first) is kept
    read(second)
    assert read(first) is not kept


def test_a_long_source_is_not_kept() -> None:
    source = "(define long-uncached 1)\n" + ";" * 70_000 + "\n"
    first = read(source)
    second = read(source)
    assert first is not second
    assert first.forms == second.forms
