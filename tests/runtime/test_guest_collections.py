"""The collection protocol of SvitValue: how Lisp's collection functions see persistent
arrays and maps (elements converted as `to_lisp` converts them, the list charged)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from svit import tree
from svit.guest import NULL_VALUE, SvitValue, plain_to_lisp, to_plain
from svit.limits import Limits
from svit.lisp.budget import Budget
from svit.lisp.context import Context, LispLimits, enter, leave
from svit.lisp.errors import LimitError
from svit.values import Script

# This host code runs inside a script run; called directly, it gets a run context of its own.
pytestmark = pytest.mark.usefixtures("host_context")


def test_container_kind_and_entry_count() -> None:
    assert plain_to_lisp([1, 2, 3]).container_kind() == "array"
    assert plain_to_lisp({"a": 1}).container_kind() == "map"
    assert NULL_VALUE.container_kind() is None
    assert plain_to_lisp([1, 2, 3]).entry_count() == 3
    assert plain_to_lisp({"a": 1, "b": None}).entry_count() == 2
    assert NULL_VALUE.entry_count() is None


def test_sequence_items_converts_elements_like_to_lisp() -> None:
    items = plain_to_lisp([1, 2.0, "x", True, None, [1], {"k": 2}]).sequence_items()
    assert items[:4] == [1, 2.0, "x", True]
    assert items[4] is NULL_VALUE
    assert type(items[5]) is SvitValue and items[5].node.to_value() == [1]
    assert type(items[6]) is SvitValue and items[6].node.to_value() == {"k": 2}
    assert plain_to_lisp({"a": 1}).sequence_items() is None
    assert NULL_VALUE.sequence_items() is None


def test_mapping_items_are_in_key_order() -> None:
    pairs = plain_to_lisp({"b": 1, "a": [2], "é": None, "B": "x"}).mapping_items()
    assert [k for k, _ in pairs] == ["B", "a", "b", "é"]
    assert pairs[0][1] == "x" and pairs[2][1] == 1 and pairs[3][1] is NULL_VALUE
    assert plain_to_lisp([1]).mapping_items() is None


def test_a_script_inside_a_container_comes_out_as_its_record() -> None:
    node = tree.from_value({"s": Script("(+ 1 2)", "adds")}, scripts_allowed=True)
    (key, value), = SvitValue(node).mapping_items()
    assert key == "s" and value.node.to_value() == {"documentation": "adds", "source": "(+ 1 2)"}


def test_conversion_is_charged_to_guest_memory_before_it_is_built() -> None:
    value = plain_to_lisp(list(range(1000)))
    previous = enter(Context(LispLimits(max_guest_memory=4000), Budget(max_steps=10_000, max_millis=None)))
    try:
        with pytest.raises(LimitError) as caught:
            value.sequence_items()
        assert caught.value.limit == "guest memory"
        with pytest.raises(LimitError):
            plain_to_lisp({str(i): i for i in range(1000)}).mapping_items()
    finally:
        leave(previous)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.booleans(), st.integers(-100, 100), st.text(max_size=4)), max_size=8))
def test_items_of_an_array_persist_back_to_the_same_array(values: list) -> None:
    items = plain_to_lisp(values).sequence_items()
    assert [to_plain(item, Limits()) for item in items] == values
