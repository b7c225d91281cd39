"""The commit path seals heads and transactions straight from their fields: the bytes
must be exactly the generic seal (:func:`svit.store.codec.hashed_record`) of the same
fields, and must decode through the strict record decoders."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from svit import cbor, mutation, tree
from svit.store import codec, records
from svit.store.records import Head

texts = st.text(max_size=40)
hashes = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
u64s = st.integers(min_value=0, max_value=2**64 - 1)
plain_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
paths = st.lists(st.text(alphabet="abcxyz_0123", min_size=1, max_size=6), min_size=1, max_size=4).map(
    lambda parts: "/memory/" + "/".join(parts))
mutations = st.one_of(
    st.builds(lambda p, v: mutation.Set(p, tree.from_value(v, scripts_allowed=False)), paths, plain_values),
    st.builds(mutation.Remove, paths),
    st.builds(lambda p, vs: mutation.Append(p, tuple(tree.from_value(v, scripts_allowed=False) for v in vs)),
              paths, st.lists(plain_values, max_size=3)),
    st.builds(mutation.RemoveFront, paths, hashes),
)


@settings(max_examples=150, deadline=None)
@given(texts, texts, hashes | texts, st.none() | u64s, u64s, texts)
def test_head_record_is_the_generic_seal(address, base_hash, hash_, position, version, root_hash):
    values = {"head_format": codec.HEAD_FORMAT, "address": address, "base_hash": base_hash, "position": position,
              "hash": hash_, "process_version": version, "root_hash": root_hash}
    direct = records.head_record(address, base_hash, Head(position, hash_), version, root_hash)
    assert direct == codec.hashed_record(codec.HEAD_FIELDS, values, "head_check")[0]


@settings(max_examples=150, deadline=None)
@given(texts, u64s, texts, u64s, u64s, st.lists(mutations, max_size=5), st.text(min_size=1, max_size=60), texts, u64s,
       st.none() | texts, st.none() | texts)
def test_transaction_record_is_the_generic_seal(address, position, previous, before, after, items, source, root,
                                                committed_at, script, summary):
    touched = mutation.touched_paths(items)
    values = {"event_format": codec.TRANSACTION_FORMAT, "address": address, "position": position,
              "previous_hash": previous, "process_version_before": before, "process_version_after": after,
              "mutations": [m.record() for m in items], "touched_paths": touched, "source": source,
              "resulting_root_hash": root, "committed_at": committed_at, "script": script, "output_summary": summary}
    direct = records.transaction_record(address, position, previous, before, after, items, touched, source, root,
                                        committed_at, script, summary)
    assert direct == codec.hashed_record(codec.TRANSACTION_FIELDS, values, "event_hash")


@settings(max_examples=60, deadline=None)
@given(u64s, hashes, u64s, hashes, st.lists(mutations, min_size=1, max_size=4), u64s)
def test_direct_records_decode_strictly(position, previous, before, root, items, committed_at):
    address = "svit://local/test/encoding"
    touched = mutation.touched_paths(items)
    after = min(before, 2**64 - 2) + 1
    before = after - 1
    raw, event_hash = records.transaction_record(address, position, previous, before, after, items, touched,
                                                 "(main)", root, committed_at)
    decoded = records.decode_transaction(address, position, raw)
    assert decoded["event_hash"] == event_hash and decoded["mutations"] == list(items)
    assert decoded["committed_at"] == committed_at
    assert records.decode_transaction_root(address, position, raw)["committed_at"] == committed_at
    head = records.decode_head(records.head_record(address, previous, Head(position, event_hash), after, root), address)
    assert (head["position"], head["hash"], head["process_version"]) == (position, event_hash, after)


def generic_seals(address, base_hash, position, previous, before, after, items, touched, source, root, committed_at,
                  script, summary):
    """A commit's transaction record, its hash and its head, each sealed field by field by
    the generic encoder (what :func:`records.commit_records` must reproduce)."""
    transaction_values = {
        "event_format": codec.TRANSACTION_FORMAT, "address": address, "position": position, "previous_hash": previous,
        "process_version_before": before, "process_version_after": after, "mutations": [m.record() for m in items],
        "touched_paths": touched, "source": source, "resulting_root_hash": root, "committed_at": committed_at,
        "script": script, "output_summary": summary}
    transaction, event_hash = codec.hashed_record(codec.TRANSACTION_FIELDS, transaction_values, "event_hash")
    head_values = {"head_format": codec.HEAD_FORMAT, "address": address, "base_hash": base_hash, "position": position,
                   "hash": event_hash, "process_version": after, "root_hash": root}
    return transaction, event_hash, codec.hashed_record(codec.HEAD_FIELDS, head_values, "head_check")[0]


@settings(max_examples=150, deadline=None)
@given(texts, texts, u64s, texts, u64s, u64s, st.lists(mutations, max_size=5), st.text(min_size=1, max_size=60),
       texts, u64s, st.none() | texts, st.none() | texts, st.integers(min_value=1, max_value=3))
def test_commit_records_are_the_two_generic_seals(address, base_hash, position, previous, before, after, items, source,
                                                  root, committed_at, script, summary, repeats):
    """One commit's transaction and head, encoded together (texts remembered across calls),
    are byte for byte the generic seals of their fields, however often the texts recur."""
    touched = mutation.touched_paths(items)
    transaction, event_hash, head = generic_seals(address, base_hash, position, previous, before, after, items, touched,
                                                  source, root, committed_at, script, summary)
    for _ in range(repeats):
        assert records.commit_records(address, base_hash, position, previous, before, after, items, touched, source,
                                      root, committed_at, script, summary) == (transaction, event_hash, head)


def test_commit_records_refuse_what_the_record_encoders_refuse():
    """A lone surrogate or an integer outside u64 is a ValueError, and a refused text is
    not remembered (the next call refuses it again)."""
    items = [mutation.Remove("/memory/a")]
    for _ in range(2):
        with pytest.raises(ValueError):
            records.commit_records("svit://local/x\ud800", "b", 0, "p", 0, 1, items, ["/memory/a"], "(main)", "r", 0)
    with pytest.raises(ValueError):
        records.commit_records("svit://local/x", "b", 2**64, "p", 0, 1, items, ["/memory/a"], "(main)", "r", 0)


def test_commit_records_remember_only_short_texts_and_a_bounded_number(monkeypatch):
    """The memory of encoded texts stays bounded: a long text (an inline source) is
    encoded each time, never kept, and a full memory starts over."""
    monkeypatch.setattr(records, "_TEXT_MEMORY", 8)
    records._TEXTS.clear()
    items = [mutation.Remove("/memory/a")]
    long_source = "(main)" + " " * 300
    for n in range(20):
        records.commit_records(f"svit://local/t{n}", "b", 0, "p", 0, 1, items, ["/memory/a"], long_source, "r", 0)
        assert len(records._TEXTS) <= 8
    assert long_source not in records._TEXTS
    assert "svit://local/t19" in records._TEXTS


#: Integers at each boundary of the encoding's head widths (and beside it).
boundaries = st.sampled_from([0, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1])
small_u64s = st.integers(min_value=0, max_value=70_000) | boundaries
#: Texts a record names where a digest usually is: hex digests, short texts, and texts
#: of 64 bytes that are not 64 characters (or not hex).
digest_texts = hashes | texts | st.text(alphabet="é", min_size=32, max_size=32) | st.text(min_size=64, max_size=64)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=2**64 - 1) | boundaries)
def test_record_integers_are_the_generic_heads(value):
    assert records._u64(value) == cbor.head(0, value)


@pytest.mark.parametrize("value", [-1, 2**64, True, 1.0, "1"])
def test_record_integers_outside_u64_are_refused(value):
    with pytest.raises(ValueError):
        records._u64(value)


@settings(max_examples=150, deadline=None)
@given(texts, digest_texts, small_u64s, digest_texts, small_u64s, small_u64s, st.lists(mutations, max_size=30),
       st.text(min_size=1, max_size=60), digest_texts, small_u64s, st.none() | texts, st.none() | texts)
def test_commit_records_are_the_generic_seals_at_every_width(address, base_hash, position, previous, before, after,
                                                             items, source, root, committed_at, script, summary):
    """Small integers at every head width, digests and other texts of 64 bytes, and more
    than 23 mutations or touched paths: still byte for byte the generic seals."""
    touched = mutation.touched_paths(items)
    transaction, event_hash, head = generic_seals(address, base_hash, position, previous, before, after, items, touched,
                                                  source, root, committed_at, script, summary)
    assert records.commit_records(address, base_hash, position, previous, before, after, items, touched, source,
                                  root, committed_at, script, summary) == (transaction, event_hash, head)
    assert records.transaction_record(address, position, previous, before, after, items, touched, source, root,
                                      committed_at, script, summary) == (transaction, event_hash)
