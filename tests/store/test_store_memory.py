"""A store object's memory does not grow with the number of processes it has touched."""

from __future__ import annotations

from svit import Process
from svit.store import ProcessStore
from svit.store.store import LATEST_STATES, RecentStates

PREFIX = "svit://local/memory-bound/p"


def test_recent_states_keep_the_most_recently_set() -> None:
    states = RecentStates(capacity=3)
    for index in range(5):
        states[f"a{index}"] = index  # type: ignore[assignment]
    assert list(states) == ["a2", "a3", "a4"]
    states["a2"] = 9  # type: ignore[assignment]
    states["a5"] = 5  # type: ignore[assignment]
    assert list(states) == ["a4", "a2", "a5"]


def test_a_store_keeps_a_bounded_number_of_states_and_forks_an_evicted_one(store: ProcessStore) -> None:
    count = LATEST_STATES + 20
    for index in range(count):
        store.create(Process.builder(f"{PREFIX}{index}").memory("n", index).build()).close()
    assert store.cached_states == LATEST_STATES
    child = store.fork(f"{PREFIX}0", f"{PREFIX}0-child")  # the first one's state was evicted: resumed
    assert child.read("/memory/n") == 0
    assert store.cached_states <= LATEST_STATES
