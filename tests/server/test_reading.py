"""The reading routes' answers without a server: how they cut what they carry
(:func:`svit.server.reading.carried`, as properties) and how a send meets other writers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svit.errors import PersistenceConflict
from svit.server.reading import SEND_ATTEMPTS, carried, send
from svit.values import Script, from_tagged, to_tagged

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300)
CAPS = st.integers(min_value=1, max_value=400)


@given(TEXT, CAPS)
def test_cut_text_is_a_prefix_within_the_cap_and_counts_the_rest(text: str, cap: int) -> None:
    tagged, cut = carried(text, cap)
    assert tagged is not None
    kept = from_tagged(tagged)
    assert text.startswith(kept)
    assert len(kept.encode()) + cut == len(text.encode())
    if cut:
        assert len(kept.encode()) <= cap
    else:
        assert kept == text


@given(TEXT, TEXT, CAPS)
def test_a_cut_script_keeps_its_kind_and_counts_both_parts(source: str, documentation: str, cap: int) -> None:
    tagged, cut = carried(Script(source, documentation), cap)
    assert tagged is not None
    kept = from_tagged(tagged)
    assert isinstance(kept, Script) and source.startswith(kept.source) and documentation.startswith(kept.documentation)
    assert len(kept.source.encode()) + len(kept.documentation.encode()) + cut == len(source.encode()) + len(documentation.encode())


@given(st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=20),
       CAPS)
def test_a_value_is_carried_whole_or_said_to_be_cut(value: object, cap: int) -> None:
    tagged, cut = carried(value, cap)
    if cut == 0:
        assert tagged == to_tagged(value)  # whole: exactly the value, kinds kept
    elif tagged is None:
        assert isinstance(value, (list, dict)) and cut > cap  # a container too large: left out, its size said
    else:
        assert isinstance(value, str)


@dataclass
class Racing:
    """A handle whose commits meet another writer's ``conflicts`` times, then succeed."""

    conflicts: int
    opened: int = 0
    sent: list[Any] = field(default_factory=list)
    address: str = "svit://local/srv/raced"

    def reopen(self) -> Racing:
        self.opened += 1
        return self

    def enqueue_inbox(self, value: Any) -> Any:
        if self.conflicts:
            self.conflicts -= 1
            raise PersistenceConflict("the head moved")
        self.sent.append(value)
        return type("Change", (), {"version": 7})()


def test_a_send_that_meets_other_writers_is_tried_again_on_a_fresh_handle() -> None:
    racing = Racing(conflicts=SEND_ATTEMPTS - 1)
    answer = send(cast(Any, racing.reopen), "hello")
    assert racing.opened == SEND_ATTEMPTS and len(racing.sent) == 1
    assert answer == {"address": racing.address, "version": 7, "message_id": racing.sent[0]["id"]}
    assert racing.sent[0]["content"] == [{"text": "hello", "type": "text"}] and racing.sent[0]["role"] == "user"


def test_a_send_that_keeps_meeting_other_writers_gives_up_with_the_conflict() -> None:
    racing = Racing(conflicts=SEND_ATTEMPTS)
    with pytest.raises(PersistenceConflict):
        send(cast(Any, racing.reopen), "hello")
    assert racing.opened == SEND_ATTEMPTS and racing.sent == []
