"""What the fixed path of an activation costs, in measures the machine's load cannot move
(calls made, bookkeeping kept), and the frozen results it hands out."""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from svit import Process, tree
from svit._tree import chunks
from svit._tree.node import MAP
from svit.activation import Activation
from svit.process import Transition

COUNTER = (
    '(define (main input) (let ((n (+ (read "/memory/count") (map-get input "by"))))'
    ' (do (write "/memory/count" n) n)))'
)


def python_calls(fn: Any) -> int:
    count = [0]

    def profile(_frame: Any, event: str, _arg: Any) -> None:
        if event == "call":
            count[0] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count[0] - 1  # less fn itself


def test_a_counter_activation_makes_few_python_calls() -> None:
    # 120 before the fixed path was thinned, 77 before top levels were reused (and a few
    # more calls written out, the last input kept), 65 before the in-memory commit was
    # thinned, 55 before the first slice, the compile check, integer conversions and
    # one-leaf lookups were written out, 48 since; a regression past 50 fails here.
    p = Process.builder("svit://local/test/cost").memory("count", 0).library("counter", COUNTER).build()
    for _ in range(3):
        p.exec("/lib/counter", {"by": 1})
    calls = python_calls(lambda: p.exec("/lib/counter", {"by": 1}))
    assert calls <= 50, calls
    assert p.read("/memory/count") == 4


def test_transitions_and_activations_stay_frozen_values() -> None:
    p = Process.builder("svit://local/test/frozen").memory("count", 0).library("counter", COUNTER).build()
    activation = p.exec("/lib/counter", {"by": 2})
    assert (activation.output, activation.version, activation.changed, activation.committed) == (2, 1, ["/memory/count"], True)
    assert activation.root_hash == p.root_hash
    with pytest.raises(dataclasses.FrozenInstanceError):
        activation.output = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del activation.version  # type: ignore[misc]
    root = p.root
    made = Transition("svit://local/test/frozen", 1, 2, root, root, (), "host.write")
    assert made == Transition("svit://local/test/frozen", 1, 2, root, root, (), "host.write")
    assert (made.annex, made.receipt, made.script, made.output) == (None, None, None, None)
    assert [f.name for f in dataclasses.fields(made)][:3] == ["address", "version_before", "version_after"]
    assert dataclasses.replace(made, source="x").source == "x"
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.source = "y"  # type: ignore[misc]
    assert isinstance(activation, Activation)


def test_the_key_rank_cache_keeps_only_short_keys_and_stays_bounded() -> None:
    chunks._RANKS.clear()
    long_key = "k" * (chunks._RANK_KEY_CHARS + 1)
    for key in ("by", long_key):
        leaf = chunks.scalar_leaf(MAP, (key,), (1,), len(key), None)
        assert leaf.rank == chunks.key_rank(key)
    assert "by" in chunks._RANKS and long_key not in chunks._RANKS
    for i in range(chunks._RANKS_KEPT + 10):
        chunks._last_key_rank(f"k{i}")
    assert len(chunks._RANKS) <= chunks._RANKS_KEPT
    assert all(rank == chunks.key_rank(key) for key, rank in chunks._RANKS.items())


_FLAT_VALUES = st.one_of(st.integers(-3, 3), st.booleans(), st.sampled_from([0.0, -0.0, 1.0, 2.5]), st.none(),
                         st.sampled_from(["", "1", "a"]))


@given(inputs=st.lists(st.dictionaries(st.sampled_from(["x", "y"]), _FLAT_VALUES, max_size=2), min_size=1, max_size=8))
@example(inputs=[{"x": 1}, {"x": True}, {"x": 1.0}, {"x": 0}, {"x": False}, {"x": 0.0}, {"x": -0.0}, {"x": None}])
@settings(max_examples=60, deadline=None)
def test_an_input_equal_to_the_last_but_of_another_type_is_its_own_value(inputs: list[dict[str, Any]]) -> None:
    # The last small flat input's node is reused for equal items: 1, True and 1.0 (and
    # 0.0 and -0.0) are equal in Python, but never the same input.
    p = Process.builder("svit://local/test/inputs").library("echo", "(define (main input) input)").build()

    def exactly(value: dict[str, Any]) -> list[tuple[str, type, Any, float]]:
        return [(k, type(v), v, math.copysign(1, v) if type(v) is float else 0) for k, v in sorted(value.items())]

    for value in inputs:
        output = p.exec("/lib/echo", value).output
        assert exactly(output) == exactly(tree.from_value(value, scripts_allowed=False).to_value())
