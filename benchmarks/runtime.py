"""Process runtime costs, side by side in one run (medians, printed as ratios).

1. A counter activation on a process whose /memory holds 100,000 nodes vs one with a
   tiny memory (a commit copies and re-hashes only the changed path).
2. fork of the large process vs the tiny one.
3. snapshot of a ~1 MB /memory vs plain cbor2.dumps of the same data.
4. restore of that snapshot (full validation and hash verification) vs cbor2.loads.

Run: python benchmarks/runtime.py [--repeat N]
"""

from __future__ import annotations

import argparse
import time

import cbor2
from common import build
from common import median_time as median

from svit import Process


def nested_memory(records: int, fields: int) -> dict:
    return {f"r{i:05d}": {f"f{j:03d}": j for j in range(fields)} for i in range(records)}


def text_memory(entries: int, size: int) -> dict:
    return {f"k{i:06d}": ("x" * (size - 8)) + f"{i:08d}" for i in range(entries)}


def report(label: str, ours: float, base: float, base_label: str, target: str) -> None:
    print(f"{label}: {ours * 1e3:.3f} ms vs {base_label} {base * 1e3:.3f} ms -> ratio {ours / base:.2f} (target {target})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    repeat = args.repeat

    build("svit://local/bench/warm", {"x": [1.5, "y"]}).snapshot()  # one-time imports inside cbor2
    large = build("svit://local/bench/large", nested_memory(1_000, 99))
    tiny = build("svit://local/bench/tiny", None)
    print(f"large /memory nodes: {large.stat('/memory')['facts']} ({large.root.count} nodes in the tree)")
    big = median(lambda: large.exec("/lib/counter"), repeat)
    small = median(lambda: tiny.exec("/lib/counter"), repeat)
    report("counter activation, 100k-node memory vs tiny", big, small, "tiny", "<= 2")

    big = median(lambda: large.fork("svit://local/bench/child"), repeat)
    small = median(lambda: tiny.fork("svit://local/bench/child"), repeat)
    report("fork, 100k-node process vs tiny", big, small, "tiny", "<= 2")

    for label, data in (("flat 10,000 x 100-byte strings", text_memory(10_000, 100)),
                        ("nested 250 x 40 records", {f"r{i}": [{"text": "y" * 80, "n": i * j, "ok": j % 2 == 0} for j in range(40)] for i in range(250)})):
        process = build("svit://local/bench/snap", data)
        plain = process.read("/memory")
        encoded = cbor2.dumps(plain)
        print(f"memory '{label}': {len(encoded):,} CBOR bytes")
        first_start = time.perf_counter()
        blob = process.snapshot()
        first = time.perf_counter() - first_start
        ours = median(process.snapshot, repeat)
        base = median(lambda: cbor2.dumps(plain), repeat)
        report(f"  snapshot (repeated) [{label}]", ours, base, "cbor2.dumps", "<= 2")
        print(f"  snapshot (first, cold caches) [{label}]: {first * 1e3:.3f} ms -> ratio {first / base:.2f}")
        ours = median(lambda: Process.restore(blob), max(5, repeat // 3))
        base = median(lambda: cbor2.loads(encoded), repeat)
        report(f"  restore with validation + hash check [{label}]", ours, base, "cbor2.loads", "<= 4")


if __name__ == "__main__":
    main()
