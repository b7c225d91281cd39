"""The commit path's shortcuts give exactly what the general code gives: an activation's
output summary (integers written without the JSON encoder), the source bound (short
texts accepted without being encoded), and the records of a commit whose inputs vary."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from svit import Process, tree
from svit.errors import InvalidPersistence
from svit.process import Transition
from svit.store import ProcessStore, records

ADDR = "svit://local/test/commit-path"

plain_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=300),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def documented_summary(value: object) -> str:
    """The summary as documented: compact JSON with sorted keys, cut to the byte bound."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    data = text.encode("utf-8")
    if len(data) <= records.MAX_SUMMARY_BYTES:
        return text
    return data[:records.MAX_SUMMARY_BYTES - len("…".encode())].decode("utf-8", "ignore") + "…"


@settings(max_examples=300, deadline=None)
@given(plain_values)
def test_output_summary_is_the_documented_json(value):
    node = tree.from_value(value, scripts_allowed=False)
    if node.count > 64 or node.text > 1024:
        return  # summarised by kind and size instead (covered in test_time_travel)
    assert records.output_summary(node) == documented_summary(node.to_value())


@pytest.mark.parametrize("value", [0, -1, 2**63 - 1, -(2**63), True, False])
def test_output_summary_of_integers_and_booleans(value):
    assert records.output_summary(tree.from_value(value, scripts_allowed=False)) == json.dumps(value)


def _transition(handle, source: str) -> Transition:
    process = handle.process
    return Transition(ADDR, process.version, process.version + 1, process.root, process.root, (), source)


BOUND = "1-4,096 bytes"
NOT_UNICODE = "not Unicode"


@pytest.mark.parametrize("source, refusal", [
    ("", BOUND), ("a", None), ("a" * 4096, None), ("a" * 4097, BOUND),
    ("é" * 1024, None), ("é" * 2048, None), ("é" * 2049, BOUND),  # 2 bytes each
    ("\U0001f600" * 1024, None), ("\U0001f600" * 1025, BOUND),  # 4 bytes each
    # A lone surrogate counts 3 bytes; within the bound it is refused when encoded.
    ("\ud800" * 1024, NOT_UNICODE), ("\ud800" * 1365, NOT_UNICODE), ("\ud800" * 1366, BOUND),
])
def test_transaction_source_bound_counts_utf8_bytes(tmp_path, source, refusal):
    """1-4,096 UTF-8 bytes, whether the text is short enough to be accepted unencoded or not."""
    store = ProcessStore.open(tmp_path / "store")
    handle = store.create(Process.builder(ADDR).memory("count", 0).build())
    try:
        if refusal is None:
            store.commit(handle, _transition(handle, source))
            assert handle.head.position == 0
        else:
            with pytest.raises(InvalidPersistence, match=refusal):
                store.commit(handle, _transition(handle, source))
            assert handle.head.position is None
    finally:
        store.close()


def test_a_history_of_varying_commits_resumes_to_the_same_state(tmp_path):
    """Commits whose paths, values, sources and scripts all vary (nothing repeats from one
    to the next) are written so that resume replays and verifies every one of them."""
    store = ProcessStore.open(tmp_path / "store")
    handle = store.create(Process.builder(ADDR).memory("count", 0)
                          .library("bump", '(define (main input) (do (write input 1) input))').build())
    for n in range(40):
        if n % 3 == 0:
            handle.exec("/lib/bump", f"/memory/k{n}")
        elif n % 3 == 1:
            handle.write(f"/memory/v{n}", {"n": n, "text": "x" * n})
        else:
            handle.exec_inline(f'(define (main input) (do (write "/memory/i{n}" {n}) {n}))')
    resumed = store.resume(ADDR)
    assert resumed.version == handle.version and resumed.root_hash == handle.root_hash
    assert [t.position for t in resumed.query(limit=100)] == list(range(40))
    store.close()
