"""Time travel over a durable history: ``h.at(version)``, ``h.diff(v1, v2)`` and the
commit timestamps, on both engines.

The property tests build random histories (writes, removes and activations over nested
maps, arrays and maps wide enough to span many chunks), record what a reader of the live
handle saw at every version, and check that every retained version reads back exactly
that, and that applying ``h.diff(a, b)`` to the state at ``a`` gives the state at ``b``.
"""

from __future__ import annotations

import copy
import itertools
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from svit import Limits, Process, cbor
from svit.errors import InvalidPersistence, InvalidValue, PersistenceNotFound, SvitError
from svit.store import Difference, ProcessStore, keys, records
from svit.store import store as store_module
from svit.store import versions as versions_module
from svit.store.keys import CF_DEFAULT
from tests.conftest import location_of, reopen

WRITER = """
(define (main input)
  (do (write (map-get input "path") (map-get input "value")) (read "/memory/n")))
"""

_ids = itertools.count()


def fresh(store: ProcessStore, **memory: Any):
    """A new address in ``store`` with a small library and ``memory``."""
    builder = Process.builder(f"svit://local/tt/p{next(_ids)}").library("writer", WRITER).memory("n", 0)
    for name, value in memory.items():
        builder.memory(name, value)
    return store.create(builder.build())


# ---------------------------------------------------------------------------- random histories

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from([0.5, 1.0, -2.25]),
                    st.text(alphabet="ab/é", max_size=3))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(["x", "y", "z"]), inner, max_size=3)), max_leaves=8)

WIDE = {f"k{i:03}": i for i in range(300)}
LONG = list(range(100))
PATHS = ["/memory/a", "/memory/m", "/memory/m/x", "/memory/m/y/z", "/memory/arr", "/memory/arr/0", "/memory/arr/3",
         "/memory/wide", "/memory/long", "/memory/long/40", "/memory/long/99"]
WIDE_PATHS = [f"/memory/wide/k{i:03}" for i in (0, 7, 150, 299)] + ["/memory/wide/new", "/memory/wide/k150/deep"]
LONG_PATHS = [f"/memory/long/{i}" for i in (0, 31, 32, 64, 98)]
ALL_PATHS = PATHS + WIDE_PATHS + LONG_PATHS

operations = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sampled_from(ALL_PATHS), values),
    st.tuples(st.just("remove"), st.sampled_from(ALL_PATHS), st.none()),
    st.tuples(st.just("exec"), st.sampled_from(ALL_PATHS), values),
    st.tuples(st.just("append"), st.sampled_from(["/memory/long", "/memory/arr"]), scalars),
), min_size=1, max_size=12)


def observe(h) -> dict[str, Any]:
    """What a reader of the live handle sees now, path by path (an error as its code)."""
    seen: dict[str, Any] = {"root_hash": h.root_hash, "/": h.read("/")}
    for path in ALL_PATHS + ["/memory/m/y", "/nowhere", "/memory/wide/k150/x/y"]:
        seen[path] = tuple(attempt(call, path) for call in (h.read, h.stat, h.node_hash, h.discover))
    return seen


def attempt(call, *args) -> Any:
    try:
        return call(*args)
    except SvitError as exc:
        return ("error", exc.code)


def observe_view(view) -> dict[str, Any]:
    seen: dict[str, Any] = {"root_hash": view.root_hash, "/": view.read("/")}
    for path in ALL_PATHS + ["/memory/m/y", "/nowhere", "/memory/wide/k150/x/y"]:
        seen[path] = tuple(attempt(call, path) for call in (view.read, view.stat, view.node_hash, view.discover))
    return seen


def apply(h, op: tuple[str, str, Any]) -> None:
    kind, path, value = op
    version = h.version
    try:
        if kind == "write":
            h.write(path, value)
        elif kind == "remove":
            h.remove(path)
        elif kind == "exec":
            h.exec("/lib/writer", {"path": path, "value": value})
        else:
            current = h.read(path)
            if isinstance(current, list):  # grow by a few, across chunk boundaries
                h.write(path, current + [value] * 20)
    except SvitError:
        assert h.version == version  # a refused operation leaves the version as it was


def build_history(store: ProcessStore, ops: list[tuple[str, str, Any]]):
    h = fresh(store, a=1, m={"x": [1, {"y": 2}]}, arr=[1, 2, 3, 4], wide=dict(WIDE), long=list(LONG))
    seen = {h.version: observe(h)}
    for op in ops:
        apply(h, op)
        seen[h.version] = observe(h)
    return h, seen


def set_path(tree: Any, segments: list[str], value: Any) -> None:
    parent = tree
    for segment in segments[:-1]:
        parent = parent[int(segment)] if isinstance(parent, list) else parent[segment]
    last = segments[-1]
    if isinstance(parent, list):
        index = int(last)
        if index == len(parent):
            parent.append(value)
        else:
            parent[index] = value
    else:
        parent[last] = value


def remove_path(tree: Any, segments: list[str]) -> None:
    parent = tree
    for segment in segments[:-1]:
        parent = parent[int(segment)] if isinstance(parent, list) else parent[segment]
    if isinstance(parent, list):
        index = int(segments[-1])
        assert index == len(parent) - 1, "an array loses elements from its tail only"
        parent.pop()
    else:
        del parent[segments[-1]]


def apply_diff(state: Any, differences: list[Difference]) -> Any:
    """``state`` with ``differences`` applied: changes and additions in order, then
    removals from the last (an array's removed tail, highest index first)."""
    out = copy.deepcopy(state)
    for found in differences:
        if found.kind != "removed":
            set_path(out, found.path.split("/")[1:], copy.deepcopy(found.after))
    for found in reversed(differences):
        if found.kind == "removed":
            remove_path(out, found.path.split("/")[1:])
    return out


def check_history(h, seen: dict[int, Any], data: st.DataObject) -> None:
    for version, expected in seen.items():
        view = h.at(version)
        assert view.version == version
        assert observe_view(view) == expected
    versions = sorted(seen)
    for _ in range(4):
        a = data.draw(st.sampled_from(versions))
        b = data.draw(st.sampled_from(versions))
        differences = h.diff(a, b)
        assert apply_diff(seen[a]["/"], differences) == seen[b]["/"]
        paths = [d.path for d in differences]
        assert len(set(paths)) == len(paths)
        for found in differences:
            assert found.kind != "added" or found.before is None
            assert found.kind != "removed" or found.after is None
            assert found.kind != "changed" or not (
                found.before == found.after and type(found.before) is type(found.after))
        if a == b:
            assert differences == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(ops=operations, data=st.data())
def test_every_version_reads_as_it_was_and_diffs_apply(store, ops, data):
    h, seen = build_history(store, ops)
    check_history(h, seen, data)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(before=operations, after=operations, data=st.data())
def test_a_fork_child_reads_its_parents_versions(store, before, after, data):
    parent, seen = build_history(store, before)
    child = parent.fork(f"svit://local/tt/child{next(_ids)}")
    seen_child = {v: s for v, s in seen.items() if v < child.version}
    seen_child[child.version] = observe(child)
    for op in after:
        apply(child, op)
        seen_child[child.version] = observe(child)
    for op in after[:3]:  # the parent moves on; the child's early versions stay the fork's
        apply(parent, op)
    check_history(child, seen_child, data)


def test_versions_from_a_new_store_object(store):
    h = fresh(store, wide=dict(WIDE))
    seen = {0: observe(h)}
    for i in range(5):
        h.write(f"/memory/wide/k{i:03}", {"i": i})
        seen[h.version] = observe(h)
    store = reopen(store)
    try:
        again = store.resume(h.address)
        for version, expected in seen.items():
            assert observe_view(again.at(version)) == expected
        assert again.diff(0, 5) == [Difference(f"/memory/wide/k{i:03}", "changed", i, {"i": i}) for i in range(5)]
    finally:
        store.close()


# ---------------------------------------------------------------------------- errors and edges


def test_versions_out_of_range_name_the_retained_range(store):
    h = fresh(store)
    for i in range(3):
        h.write("/memory/n", i + 1)
    for bad in (4, 99, -1, 2**70):
        with pytest.raises(PersistenceNotFound) as caught:
            h.at(bad)
        message = caught.value.message
        assert h.address in message and f"version {bad}" in message and "0..3" in message
        with pytest.raises(PersistenceNotFound):
            h.diff(0, bad)
    for bad in ("1", 1.0, None, True):
        with pytest.raises(InvalidValue):
            h.at(bad)
    assert h.at(3).read("/memory/n") == 3 and h.at(0).read("/memory/n") == 0


def test_versions_before_a_cut_are_gone(store):
    h = fresh(store)
    for i in range(4):
        h.write("/memory/n", i + 1)
    h.cut()
    h.write("/memory/n", 5)
    h.write("/memory/n", 6)
    for bad in (0, 3):
        with pytest.raises(PersistenceNotFound, match=r"retained versions 4\.\.6"):
            h.at(bad)
    assert [h.at(v).read("/memory/n") for v in (4, 5, 6)] == [4, 5, 6]
    assert h.diff(4, 6) == [Difference("/memory/n", "changed", 4, 6)]
    assert h.at(4).committed_at is None  # the cut's base stands for version 4


def test_an_imported_process_starts_its_history_at_its_version(store):
    p = Process.builder(f"svit://local/tt/imp{next(_ids)}").memory("n", 0).build()
    p.write("/memory/n", 1)
    p.write("/memory/n", 2)
    h = store.import_(p)
    h.write("/memory/n", 3)
    with pytest.raises(PersistenceNotFound, match=r"retained versions 2\.\.3"):
        h.at(1)
    assert h.at(2).read("/memory/n") == 2 and h.at(3).read("/memory/n") == 3


def test_a_removed_address_has_no_versions(store):
    h = fresh(store)
    h.write("/memory/n", 1)
    store.remove(h.address)
    with pytest.raises(PersistenceNotFound):
        h.at(0)


def test_a_view_reads_as_a_live_handle_does_for_bad_paths_and_mounts(store, tmp_path):
    from svit import Mount

    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "note.txt").write_text("now")
    p = Process.builder(f"svit://local/tt/m{next(_ids)}").memory("n", 0).mount("files", Mount.folder(str(folder))).build()
    h = store.create(p)
    h.write("/memory/n", 1)
    view = h.at(0)
    for bad in ("memory", "/memory//n", "/memory/../x", 7):
        with pytest.raises(SvitError) as live:
            h.read(bad)
        with pytest.raises(SvitError) as old:
            view.read(bad)
        assert (old.value.code, old.value.message) == (live.value.code, live.value.message)
    with pytest.raises(SvitError) as caught:
        view.discover("/memory/n")
    assert caught.value.code == "invalid_path"
    # A mount below its root is not read as the folder is now: unavailable, as for a
    # stored state with no provider attached.
    assert h.read("/mounts/files/note.txt") is not None
    with pytest.raises(SvitError) as caught:
        view.read("/mounts/files/note.txt")
    assert caught.value.code == "mount_unavailable"
    assert view.node_hash("/mounts/files/note.txt") is None
    assert view.read("/mounts/files") == store.resume(h.address).read("/mounts/files")


def test_old_versions_survive_a_node_sweep(store):
    h = fresh(store)
    for i in range(4):
        h.write("/memory/big", {"i": i, "list": list(range(i * 50))})
    old = {v: h.at(v).read("/memory/big") for v in range(5)}
    h.cut()
    swept = store.sweep_nodes()
    assert swept > 0  # the cut history's trees are garbage now
    h.write("/memory/big", "small")
    assert store.sweep_nodes() == 0  # version 4 is retained: its tree stays
    assert h.at(4).read("/memory/big") == old[4]
    store = reopen(store)
    try:
        assert store.resume(h.address).at(4).read("/memory/big") == old[4]
    finally:
        store.close()


def test_a_view_whose_version_was_cut_and_swept_before_its_first_read_is_not_found(store):
    # A view is resolved when made and rebuilt on first read. If its version was cut away
    # and its chunks swept in between, that is the version no longer being retained (as
    # a fresh `at` says), not a damaged store.
    h = fresh(store)
    for i in range(3):
        h.write("/memory/big", {"i": i, "list": list(range(i * 50, i * 50 + 40))})
    view = h.at(1)
    h.cut()
    assert store.sweep_nodes() > 0
    with pytest.raises(PersistenceNotFound, match=r"version 1 is not retained"):
        view.read("/memory/big")
    assert h.at(3).read("/memory/big")["i"] == 2


def test_a_diff_whose_version_is_cut_and_swept_during_its_walk_is_not_found(store, monkeypatch):
    # A diff resolves both versions, then reads their chunks without holding the store
    # lock. A cut and sweep landing in between removes the older version: that is the
    # version no longer being retained (what resolving it again says), not damage.
    h = fresh(store)
    for i in range(3):
        h.write("/memory/big", {"i": i, "list": list(range(i * 50, i * 50 + 40))})
    fetch = store.versions.fetch_chunk
    swept: list[int] = []

    def cut_then_fetch(digest: bytes) -> bytes | None:
        if not swept:
            h.cut()
            swept.append(store.sweep_nodes())
        return fetch(digest)

    monkeypatch.setattr(store.versions, "fetch_chunk", cut_then_fetch)
    with pytest.raises(PersistenceNotFound, match=r"version 1 is not retained \(retained versions 3\.\.3\)"):
        h.diff(1, 3)
    assert swept[0] > 0
    with pytest.raises(PersistenceNotFound, match=r"version 2 is not retained"):
        h.diff(3, 2)
    assert h.diff(3, 3) == []


def with_version_1_chunk_deleted(store):
    """A process whose version 1 held a container at /memory/big, later replaced, with that
    container's chunk deleted from the store (and forgotten by the chunk memory)."""
    h = fresh(store)
    h.write("/memory/big", {"deep": [1, 2, 3]})
    h.write("/memory/big", 0)
    digest = bytes.fromhex(h.at(1).node_hash("/memory/big"))
    batch = store.engine.batch()
    batch.delete("nodes", keys.node_key(digest))
    store.engine.write(batch)
    store.versions._chunks.clear()
    return h


def test_a_diff_missing_a_chunk_of_a_retained_version_is_invalid_persistence(store):
    h = with_version_1_chunk_deleted(store)
    with pytest.raises(InvalidPersistence, match="missing"):
        h.diff(1, 2)


def test_a_missing_chunk_is_invalid_persistence(store):
    h = with_version_1_chunk_deleted(store)
    with pytest.raises(InvalidPersistence, match="missing"):
        h.at(1).read("/memory")
    assert h.at(2).read("/memory/big") == 0


# ---------------------------------------------------------------------------- timestamps


def test_every_transaction_records_when_it_was_committed(store):
    h = fresh(store)
    before = int(time.time() * 1000)
    h.write("/memory/n", 1)
    h.exec("/lib/writer", {"path": "/memory/n", "value": 2})
    after = int(time.time() * 1000)
    stamps = [t.committed_at for t in h.query()]
    assert len(stamps) == 2 and all(before <= s <= after for s in stamps)
    assert [h.at(v).committed_at for v in (1, 2)] == stamps
    assert h.at(0).committed_at is None


def test_state_does_not_depend_on_the_clock(store, monkeypatch):
    """Two histories of the same commits an hour apart: same roots and snapshot bytes,
    different transaction hashes (the time is sealed into each transaction)."""
    def history(clock: float):
        monkeypatch.setattr(store_module.time, "time", lambda: clock)
        p = Process.builder("svit://local/tt/clock").memory("n", 0).build()
        h = store.create(p)
        h.write("/memory/n", 1)
        h.write("/memory/m", {"a": [1, 2]})
        out = (h.root_hash, h.snapshot(), [(t.resulting_root_hash, t.hash, t.committed_at) for t in h.query()])
        store.remove(p.address)
        return out

    first, second = history(1_000_000.0), history(1_003_600.0)
    assert first[0] == second[0] and first[1] == second[1]
    assert [r for r, _, _ in first[2]] == [r for r, _, _ in second[2]]
    assert [t for _, t, _ in first[2]] != [t for _, t, _ in second[2]]
    assert [c for _, _, c in first[2]] == [1_000_000_000, 1_000_000_000]
    assert [c for _, _, c in second[2]] == [1_003_600_000, 1_003_600_000]


def test_a_tampered_timestamp_is_detected(store):
    h = fresh(store)
    h.write("/memory/n", 1)
    key = keys.transaction_key(h.address, 0)
    raw = store.engine.get("record", key)
    stamp = records.decode_transaction_root(h.address, 0, raw)["committed_at"]
    forged = raw.replace(cbor.head(0, stamp), cbor.head(0, stamp + 1))
    assert forged != raw
    batch = store.engine.batch()
    batch.put("record", key, forged)
    store.engine.write(batch)
    with pytest.raises(InvalidPersistence):
        h.at(1)
    with pytest.raises(InvalidPersistence):
        ProcessStore.over(store.engine).resume(h.address)


def test_a_store_of_the_previous_format_is_refused_naming_it(store):
    location = location_of(store)
    batch = store.engine.batch()
    batch.put(CF_DEFAULT, keys.FORMAT_KEY, b"svit-store@3")
    store.engine.write(batch)
    store.close()
    with pytest.raises(InvalidPersistence, match="'svit-store@3'.*svit-store@4"):
        ProcessStore.open(location)


def test_recent_transactions_are_newest_first_and_bounded(store):
    h = fresh(store)
    for i in range(6):
        h.write("/memory/n" if i % 2 else "/memory/other", i)
    h.exec("/lib/writer", {"path": "/memory/n", "value": 99})
    recent = store.versions.recent(h.address, 3)
    assert [t.process_version_after for t in recent] == [7, 6, 5]
    assert recent[0].source == "activation" and recent[0].script == "/lib/writer"
    assert recent[0].output_summary == "99" and recent[0].touched_paths == ["/memory/n"]  # main reads its write
    assert recent[1].script is None and recent[1].output_summary is None and recent[1].source == "host.write"
    assert recent[0].committed_at > 0
    assert [t.process_version_after for t in store.versions.recent(h.address, 10, "/memory/n")] == [7, 6, 4, 2]
    h.cut()
    assert store.versions.recent(h.address, 10) == []
    h.write("/memory/n", 100)
    assert [t.process_version_after for t in store.versions.recent(h.address, 10)] == [8]
    with pytest.raises(SvitError) as caught:
        store.versions.recent(h.address, 0)
    assert caught.value.code == "resource_limit_exceeded"
    with pytest.raises(PersistenceNotFound):
        store.versions.recent("svit://local/tt/none", 5)


def test_recent_with_a_prefix_takes_every_older_match_the_index_holds_when_fewer_than_asked(store, monkeypatch):
    # The walk of the newest records finds one match; the index then holds two older
    # ones, fewer than the three still asked for: all of them are taken, newest first.
    h = fresh(store)
    h.write("/memory/long", 1)  # version 1
    h.write("/memory/long", 2)  # version 2
    for i in range(3):
        h.write("/memory/other", i)  # versions 3-5
    h.write("/memory/long", 3)  # version 6
    h.write("/memory/other", 9)  # version 7
    monkeypatch.setattr(versions_module, "_RECENT_WALK", 0)
    found = store.versions.recent(h.address, 4, "/memory/long")
    assert [t.process_version_after for t in found] == [6, 2, 1]


PREFIXES = [None, "/memory", "/memory/a", "/memory/m", "/memory/m/x", "/memory/arr", "/memory/long",
            "/memory/wide/k150", "/memory/nowhere"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(before_cut=operations, after_cut=st.one_of(st.none(), operations), walk=st.sampled_from([0, 1, 3, 64]),
       data=st.data())
def test_recent_is_the_newest_matches_of_all_retained_transactions(store, before_cut, after_cut, walk, data):
    # Whether the matches come from the newest-first walk or (past it) the path index,
    # recent() is the newest `limit` of a plain filter of every retained transaction.
    h = fresh(store, a=1, m={"x": [1, {"y": 2}]}, arr=[1, 2, 3, 4], wide=dict(WIDE), long=list(LONG))
    for op in before_cut:
        apply(h, op)
    if after_cut is not None:
        h.cut()
        for op in after_cut:
            apply(h, op)
    retained = h.query(limit=4096)
    original = versions_module._RECENT_WALK
    versions_module._RECENT_WALK = walk
    try:
        for _ in range(6):
            prefix = data.draw(st.sampled_from(PREFIXES))
            limit = data.draw(st.sampled_from([1, 2, 5, 4096]))
            expected = [t for t in reversed(retained) if prefix is None or any(
                p == prefix or p.startswith(prefix + "/") for p in t.touched_paths)][:limit]
            assert store.versions.recent(h.address, limit, prefix) == expected
    finally:
        versions_module._RECENT_WALK = original


def test_recent_reads_a_bounded_number_of_records_for_a_recent_match(store, monkeypatch):
    h = fresh(store)
    h.write("/memory/n", -1)
    for i in range(200):
        h.write("/memory/a", i)
    h.write("/memory/n", 1)
    h.write("/memory/n", 2)
    transactions = keys.transaction_prefix(h.address)
    reads = {"transactions": 0, "index": 0}
    get, scan = store.engine.get, store.engine.scan

    def counting_get(space: str, key: bytes) -> bytes | None:
        reads["transactions"] += key.startswith(transactions)
        return get(space, key)

    def counting_scan(space: str, prefix: bytes, start: bytes | None = None):
        for item in scan(space, prefix, start):
            reads["index"] += space == "index"
            yield item

    monkeypatch.setattr(store.engine, "get", counting_get)
    monkeypatch.setattr(store.engine, "scan", counting_scan)
    assert [t.process_version_after for t in store.versions.recent(h.address, 2, "/memory/n")] == [203, 202]
    assert reads == {"transactions": 2, "index": 0}
    assert [t.process_version_after for t in store.versions.recent(h.address, 4, "/memory/a")] == [201, 200, 199, 198]
    assert reads == {"transactions": 2 + 6, "index": 0}
    assert [t.process_version_after for t in store.versions.recent(h.address, 5)] == [203, 202, 201, 200, 199]
    assert reads == {"transactions": 8 + 5, "index": 0}
    # An old match: a bounded walk, then the path index for what lies below it.
    reads.update(transactions=0, index=0)
    assert [t.process_version_after for t in store.versions.recent(h.address, 3, "/memory/n")] == [203, 202, 1]
    assert reads["transactions"] == 3 + versions_module._RECENT_WALK + 1
    assert reads["index"] == 3


def test_activation_script_and_output_are_summarised_and_bounded(store):
    h = fresh(store)
    h.exec_inline('(define (main input) (value-map "echo" input))', {"k": [1, 2.5, "x"]})
    h.exec_inline('(define (main input) input)', "y" * 300)
    h.exec_inline('(define (main input) input)', list(range(200)))
    big, long, short = store.versions.recent(h.address, 3)
    assert short.script == "inline" and short.output_summary == '{"echo":{"k":[1,2.5,"x"]}}'
    assert long.output_summary.endswith("…") and len(long.output_summary.encode()) == records.MAX_SUMMARY_BYTES
    assert long.output_summary.startswith('"yyy')
    assert big.output_summary == "<array of 200 items>"
    assert [t.output_summary for t in h.query()] == [short.output_summary, long.output_summary, big.output_summary]


SIZES = [0, 1, 31, 32, 33, 511, 512, 513, 700, 8193]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(first=st.sampled_from(SIZES), second=st.sampled_from(SIZES), edits=st.lists(st.integers(0, 9000), max_size=5),
       keys_first=st.integers(0, 2500), keys_second=st.integers(0, 2500), data=st.data())
def test_diffs_of_wide_containers_across_chunk_levels_apply(store, first, second, edits, keys_first, keys_second,
                                                             data):
    """Arrays whose chunk trees differ in height (512 and 8,192 items are level
    boundaries) and maps of thousands of keys gaining and losing many at once."""
    before_list = list(range(first))
    after_list = [[i] if i in edits else i for i in range(second)]
    offset = data.draw(st.integers(0, 50))
    before_map = {f"key{i}": i for i in range(keys_first)}
    after_map = {f"key{i + offset}": (i if i % 97 else {"n": i}) for i in range(keys_second)}
    builder = Process.builder(f"svit://local/tt/w{next(_ids)}").limits(Limits(max_value_entries=100_000))
    h = store.create(builder.memory("xs", before_list).memory("ys", before_map).build())
    h.write("/memory/xs", after_list)
    h.write("/memory/ys", after_map)
    states = {v: h.at(v).read("/") for v in (0, 2)}
    assert states[2]["memory"]["xs"] == after_list and states[0]["memory"]["ys"] == before_map
    for a, b in ((0, 2), (2, 0)):
        assert apply_diff(states[a], h.diff(a, b)) == states[b]


def test_diff_reads_only_the_chunks_that_differ(store, monkeypatch):
    wide = {f"key{i:05}": i for i in range(4000)}
    h = fresh(store, wide=wide, other=list(range(3000)))
    h.write("/memory/wide/key02500", -1)
    fetched: list[bytes] = []
    fetch = store.versions.fetch_chunk
    monkeypatch.setattr(store.versions, "fetch_chunk", lambda digest: fetched.append(digest) or fetch(digest))
    assert h.diff(0, 1) == [Difference("/memory/wide/key02500", "changed", 2500, -1)]
    stored = sum(1 for _ in store.engine.scan("nodes", b"n/"))
    # Per side: the root, /memory, and the map's path from its root chunk to the one
    # leaf that changed; never the chunks of the thousands of unchanged entries.
    assert len(set(fetched)) <= 16 < stored // 10
