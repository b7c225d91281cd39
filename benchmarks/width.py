"""Costs that must not grow with container width, side by side in one run (medians, as ratios).

Every row prints its target and whether it holds on this machine; a missed target never
fails the run. Public API only (Process, ProcessStore, snapshot bytes), so the same script
measures any tree core.

1. One single-key write into a /memory map of 100,000 entries vs a map of 100 entries,
   as a host write and as an activation (an exec of a /lib script that sets one key), in
   memory and durably: target <= 1.5x. The same for one element of a 100,000-element
   array vs a 100-element array.
2. Store bytes written per such durable commit: the key and value bytes of the batch the
   engine writes (counted on the engine's one synced write path), and how much RocksDB's
   write-ahead log grew: target <= 4 KB at 100,000 entries, and <= 2x the 100-entry case.
3. Restore of a ~1 MB snapshot (a flat map of small entries; nested maps and arrays),
   with full validation and root-hash verification, vs cbor2.loads of the same bytes:
   target <= 3x; printed beside it, the bare library calls any restore under the chunk
   hash makes (decode, one canonical encoding and one BLAKE3 per chunk, a CRC-32 per
   key), with nothing built or checked. Snapshot vs cbor2.dumps of the same plain value:
   target <= 1.5x, both repeated on one process and the first snapshot of a freshly
   restored one.
4. Fork of a 100,000-entry process vs a tiny one, in memory and durably: target <= 1.2x.

Run: python benchmarks/width.py [--quick] [--repeat N]
(--quick: tiny sizes, a smoke run that only shows every row is printed.)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from operator import methodcaller
from typing import Any
from zlib import crc32

import blake3
import cbor2
from common import BIG_LIMITS, build, paired_medians

from svit import Process
from svit.store import ProcessStore
from svit.store.engine import WriteBatch

__all__ = ["Sizes", "FULL", "QUICK", "Report", "CommitMeter", "main"]

#: Room for the wide processes, and for a durable activation on today's store (a commit of
#: a 100,000-entry container takes a good part of a second).
WIDE_LIMITS = dataclasses.replace(BIG_LIMITS, max_execution_millis=30_000)

WRITE_RATIO = 1.5
COMMIT_BYTES = 4 * 1024
COMMIT_BYTES_RATIO = 2.0
RESTORE_RATIO = 3.0
SNAPSHOT_RATIO = 1.5
FORK_RATIO = 1.2


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How big the run is: container widths, snapshot size, repetitions and time per row."""

    wide: int
    narrow: int
    snapshot_bytes: int
    repeat: int
    row_seconds: float
    byte_commits: int


FULL = Sizes(wide=100_000, narrow=100, snapshot_bytes=1_000_000, repeat=11, row_seconds=4.0, byte_commits=3)
QUICK = Sizes(wide=1_000, narrow=10, snapshot_bytes=20_000, repeat=3, row_seconds=0.5, byte_commits=2)


class Report:
    """Prints one line per row (its numbers, its target, whether it holds) and a summary."""

    def __init__(self) -> None:
        self.outcomes: list[bool] = []

    def row(self, name: str, detail: str, target: str, holds: bool) -> None:
        self.outcomes.append(holds)
        print(f"{name:<46} {detail} | target {target}: {'holds' if holds else 'MISSES'}", flush=True)

    def timed(self, name: str, ours: float, base: float, base_label: str, limit: float) -> None:
        ratio = ours / base
        self.row(name, f"{ours * 1e3:9.3f} ms vs {base_label} {base * 1e3:9.3f} ms -> {ratio:7.2f}x",
                 f"<= {limit}x", ratio <= limit)

    def summary(self) -> None:
        print(f"{sum(self.outcomes)} of {len(self.outcomes)} targets hold", flush=True)


def batch_bytes(batch: WriteBatch) -> int:
    """Key and value bytes of one engine write batch (a delete counts its key)."""
    return sum(len(key) + (len(value) if value is not None else 0) for _space, key, value in batch.operations)


class CommitMeter:
    """Records the bytes of every batch a store's engine writes, and the growth of RocksDB's
    write-ahead log files in the store directory around one commit."""

    def __init__(self, store: ProcessStore) -> None:
        self.path = store.path
        self.writes: list[int] = []
        engine = store.engine
        inner = engine.writer

        def counting_writer(batch: WriteBatch) -> None:
            inner(batch)
            self.writes.append(batch_bytes(batch))

        engine.writer = counting_writer

    def wal_files(self) -> dict[str, int]:
        try:
            names = os.listdir(self.path)
        except OSError:
            return {}
        sizes = {}
        for name in names:
            if name.endswith(".log"):
                with contextlib.suppress(FileNotFoundError):  # deleted after a flush
                    sizes[name] = os.path.getsize(os.path.join(self.path, name))
        return sizes

    def per_commit(self, commit: Callable[[], Any], count: int) -> tuple[int, int | None]:
        """Median engine bytes and median WAL growth (None without WAL files) of ``count`` commits."""
        engine_bytes: list[int] = []
        wal_bytes: list[int] = []
        for _ in range(count):
            before, written = self.wal_files(), len(self.writes)
            commit()
            after = self.wal_files()
            engine_bytes.append(sum(self.writes[written:]))
            wal_bytes.append(sum(size - before.get(name, 0) for name, size in after.items() if size > before.get(name, 0)))
        wal = int(statistics.median(wal_bytes)) if self.wal_files() else None
        return int(statistics.median(engine_bytes)), wal


# ---------------------------------------------------------------------------- the processes

def container(shape: str, size: int) -> Any:
    """A /memory value of ``size`` short notes: a map (``k0``...) or an array."""
    if shape == "map":
        return {f"k{i}": f"note {i}" for i in range(size)}
    return [f"fact {i}" for i in range(size)]


def target_path(shape: str, size: int) -> str:
    """The one entry each write replaces: the middle key of the map, or element of the array."""
    return f"/memory/{shape}/{'k' if shape == 'map' else ''}{size // 2}"


def width_process(address: str, shape: str, size: int) -> Process:
    """A process with ``size`` entries at /memory/<shape> (built by one write of the whole
    value) and a /lib/set script that replaces one of them with its input."""
    script = f'(define (main input) (write "{target_path(shape, size)}" input))'
    return (Process.builder(address).memory(shape, container(shape, size)).library("set", script)
            .limits(WIDE_LIMITS).build())


def host_write(target: Any, path: str) -> Callable[[], Any]:
    """One host write per call, each of a new value."""
    values = itertools.count(1)
    return lambda: target.write(path, next(values))


def activation(target: Any) -> Callable[[], Any]:
    """One activation of /lib/set per call, each writing a new value; it must commit.

    Its values (negative) never repeat the host writes' (positive): a state the store
    already holds writes no new chunks, which would hide the cost being measured."""
    values = itertools.count(-1, -1)

    def run() -> None:
        result = target.exec("/lib/set", next(values))
        if not result.committed:
            sys.exit(f"the benchmark's activation did not commit: {result}")

    return run


def children(prefix: str) -> Iterator[str]:
    return (f"{prefix}{n}" for n in itertools.count(1))


# ---------------------------------------------------------------------------- the rows

def width_rows(report: Report, sizes: Sizes, work: str) -> None:
    """Rows 1 and 2: single-entry writes into wide vs narrow containers, and bytes per commit."""
    wide, narrow = f"{sizes.wide:,}", f"{sizes.narrow:,}"
    print(f"  (one entry replaced in a container of {wide} entries vs {narrow}: medians of paired runs)")
    byte_rows: list[tuple[str, tuple[int, int | None], tuple[int, int | None]]] = []
    for shape in ("map", "array"):
        noun = "map key" if shape == "map" else "array element"
        store = ProcessStore.open(os.path.join(work, shape))
        meter = CommitMeter(store)
        pairs = {
            "memory": (width_process(f"svit://local/bench/width/{shape}-wide", shape, sizes.wide),
                       width_process(f"svit://local/bench/width/{shape}-narrow", shape, sizes.narrow)),
            "durable": (store.create(width_process(f"svit://local/bench/width/{shape}-wide", shape, sizes.wide)),
                        store.create(width_process(f"svit://local/bench/width/{shape}-narrow", shape, sizes.narrow))),
        }
        for where, (wide_process, narrow_process) in pairs.items():
            for how in ("host write", "activation"):
                if how == "host write":
                    wide_op = host_write(wide_process, target_path(shape, sizes.wide))
                    narrow_op = host_write(narrow_process, target_path(shape, sizes.narrow))
                else:
                    wide_op, narrow_op = activation(wide_process), activation(narrow_process)
                wide_op(), narrow_op()  # warm-up: compiled scripts, caches, first WAL record
                ours, base = paired_medians(wide_op, narrow_op, sizes.repeat, sizes.row_seconds)
                report.timed(f"{shape} write, {how}, {where}", ours, base, narrow, WRITE_RATIO)
                if where == "durable":
                    byte_rows.append((f"bytes per commit, {noun}, {how}",
                                      meter.per_commit(wide_op, sizes.byte_commits),
                                      meter.per_commit(narrow_op, sizes.byte_commits)))
        store.close()
    print(f"  (store bytes per durable commit at {wide} vs {narrow} entries: key and value bytes of the engine's"
          " write batch, and the growth of RocksDB's write-ahead log)")
    for name, (wide_bytes, wide_wal), (narrow_bytes, narrow_wal) in byte_rows:
        ratio = wide_bytes / narrow_bytes
        wal = "WAL n/a" if wide_wal is None or narrow_wal is None else f"WAL {wide_wal:,} vs {narrow_wal:,} B"
        report.row(name, f"{wide_bytes:>11,} B vs {narrow} {narrow_bytes:>7,} B -> {ratio:7.2f}x ({wal})",
                   f"<= {COMMIT_BYTES:,} B and <= {COMMIT_BYTES_RATIO}x",
                   wide_bytes <= COMMIT_BYTES and ratio <= COMMIT_BYTES_RATIO)


def flat_memory(total_bytes: int) -> dict[str, str]:
    """About ``total_bytes`` of CBOR: one map of small text entries (~50 bytes each)."""
    return {f"n{i:06d}": f"note {i:06d} " + "x" * 28 for i in range(max(1, total_bytes // 50))}


def nested_memory(total_bytes: int) -> dict[str, list[dict[str, Any]]]:
    """About ``total_bytes`` of CBOR: a map of arrays of 40 small records (~4 KB a group)."""
    return {f"g{g:04d}": [{"text": f"record {g}.{i} " + "y" * 66, "n": g * 40 + i, "ok": i % 2 == 0} for i in range(40)]
            for g in range(max(1, total_bytes // 4_000))}


def primitives(blob: bytes, data: dict[str, Any]) -> Callable[[], None]:
    """What any restore under the chunk hash must at least do, as bare library calls:
    decode the bytes, encode each chunk canonically and hash it once (a flat map cut in
    runs of 40 entries, about its mean leaf; every record of the nested shape, each a
    container of its own), and take each map key's CRC-32 (where its leaves end)."""
    flat = all(type(value) is str for value in data.values())
    if flat:
        keys, values = list(data), list(data.values())
        chunks = [dict(zip(keys[a:a + 40], values[a:a + 40])) for a in range(0, len(keys), 40)]
    else:
        chunks = [record for group in data.values() for record in group]

    def run() -> None:
        cbor2.loads(blob)
        if flat:
            list(map(crc32, map(str.encode, keys)))
        list(map(methodcaller("digest"), map(blake3.blake3, map(cbor2.dumps, chunks))))

    return run


def snapshot_rows(report: Report, sizes: Sizes) -> None:
    """Row 3: restore vs cbor2.loads and snapshot vs cbor2.dumps of ~1 MB snapshots."""
    for shape, data in (("flat", flat_memory(sizes.snapshot_bytes)), ("nested", nested_memory(sizes.snapshot_bytes))):
        process = Process.builder(f"svit://local/bench/width/{shape}").memory("data", data).limits(WIDE_LIMITS).build()
        blob = process.snapshot()
        plain = cbor2.loads(blob)
        print(f"  ({shape} snapshot: {len(blob):,} bytes)")
        ours, base = paired_medians(lambda: Process.restore(blob), lambda: cbor2.loads(blob), sizes.repeat * 3,
                                    sizes.row_seconds)
        report.timed(f"restore, {shape} (validated, hash checked)", ours, base, "cbor2.loads", RESTORE_RATIO)
        floor, base = paired_medians(primitives(blob, data), lambda: cbor2.loads(blob), sizes.repeat * 3,
                                     sizes.row_seconds)
        print(f"  (the primitives alone, {shape}: cbor2.loads, then one cbor2.dumps and one BLAKE3 per chunk "
              f"{'and a CRC-32 per key' if shape == 'flat' else '(each record its own chunk)'}, with nothing "
              f"built or checked: {floor * 1e3:.3f} ms -> {floor / base:.2f}x cbor2.loads; printed, no target)")
        ours, base = paired_medians(process.snapshot, lambda: cbor2.dumps(plain), sizes.repeat * 3, sizes.row_seconds)
        report.timed(f"snapshot, {shape} (repeated)", ours, base, "cbor2.dumps", SNAPSHOT_RATIO)
        first: list[float] = []
        dumps: list[float] = []
        began = time.perf_counter()
        while len(first) < max(3, sizes.repeat // 2) and (len(first) < 3 or time.perf_counter() - began < sizes.row_seconds):
            fresh = Process.restore(blob)
            gc.collect()  # what the restore left for the collector is not the snapshot's cost
            start = time.perf_counter()
            fresh.snapshot()
            first.append(time.perf_counter() - start)
            start = time.perf_counter()
            cbor2.dumps(plain)
            dumps.append(time.perf_counter() - start)
        report.timed(f"snapshot, {shape} (first after restore)", statistics.median(first), statistics.median(dumps),
                     "cbor2.dumps", SNAPSHOT_RATIO)


def fork_rows(report: Report, sizes: Sizes, work: str) -> None:
    """Row 4: fork of a wide process vs a tiny one, in memory and durably."""
    big = width_process("svit://local/bench/width/big", "map", sizes.wide)
    print(f"  (fork of a process with a {sizes.wide:,}-entry map vs a tiny process)")
    tiny = build("svit://local/bench/width/tiny")
    names = children("svit://local/bench/width/child")
    ours, base = paired_medians(lambda: big.fork(next(names)), lambda: tiny.fork(next(names)), sizes.repeat * 3,
                                sizes.row_seconds)
    report.timed("fork, wide vs tiny, memory", ours, base, "tiny", FORK_RATIO)
    store = ProcessStore.open(os.path.join(work, "fork"))
    store.create(width_process("svit://local/bench/width/big", "map", sizes.wide))
    store.create(build("svit://local/bench/width/tiny"))
    store.fork("svit://local/bench/width/big", next(names))  # warm-up
    ours, base = paired_medians(lambda: store.fork("svit://local/bench/width/big", next(names)),
                                lambda: store.fork("svit://local/bench/width/tiny", next(names)),
                                sizes.repeat * 3, sizes.row_seconds)
    report.timed("fork, wide vs tiny, durable", ours, base, "tiny", FORK_RATIO)
    store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, numbers mean nothing")
    parser.add_argument("--repeat", type=int, help="pairs per row (at most; slow rows stop at their time budget)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.repeat is not None:
        sizes = dataclasses.replace(sizes, repeat=max(1, args.repeat))
    began = time.perf_counter()
    work = tempfile.mkdtemp(prefix="svit-width-bench-")
    report = Report()
    try:
        width_rows(report, sizes, work)
        snapshot_rows(report, sizes)
        fork_rows(report, sizes, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report.summary()
    print(f"  (run took {time.perf_counter() - began:.1f} s)")


if __name__ == "__main__":
    main()
