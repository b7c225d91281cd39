"""The meter's record of the namespaces a run takes part in (entered and left like a stack)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from svit.lisp.memory import Meter, enter_space, leave_space


class Space:
    """A stand-in namespace: only its identity matters here."""


@given(st.lists(st.integers(0, 3), max_size=30))
@settings(max_examples=80, deadline=None)
def test_spaces_count_nested_entries_and_keep_first_entry_order(path: list[int]) -> None:
    # Runs nest: each is entered (in one of four namespaces) and left in reverse order;
    # after every step the record is each namespace still entered, with its count, in
    # the order it was first entered (as the dict it replaces kept them).
    spaces = [Space() for _ in range(4)]
    record: list[list[Any]] = []
    stack: list[int] = []
    for step in path + [-1] * len(path):
        if step >= 0:
            stack.append(step)
            enter_space(record, spaces[step])
        elif stack:
            leave_space(record, spaces[stack.pop()])
        want = Counter(stack)
        order = list(dict.fromkeys(stack))
        assert [(spaces.index(space), count) for space, count in record] == [(i, want[i]) for i in order]
    assert record == []


def test_a_meter_opened_and_closed_in_two_namespaces_ends_empty() -> None:
    meter = Meter(1 << 20)
    outer, inner = Space(), Space()
    meter.open(outer, None)  # type: ignore[arg-type]
    meter.open(inner, None)  # type: ignore[arg-type]
    meter.open(outer, None)  # type: ignore[arg-type]
    assert [(space, count) for space, count in meter.spaces] == [(outer, 2), (inner, 1)]
    meter.close(outer)
    meter.close(inner)
    assert [(space, count) for space, count in meter.spaces] == [(outer, 1)]
    meter.close(outer)
    assert meter.spaces == [] and meter.depth == 0 and meter.entry is None
