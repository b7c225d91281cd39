"""Scratch benchmark: snapshot encode/decode against plain cbor2 on the same data (ratios)."""

from __future__ import annotations

import random
import statistics
import string
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cbor2

from svit import tree
from svit.limits import Limits
from svit.snapshot import decode_snapshot, encode_snapshot

ADDRESS = "svit://local/bench/snapshot"


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(string.ascii_letters + string.digits + " ", k=n))


def flat(rng: random.Random) -> dict:
    return {f"key{i:05d}": _text(rng, 100) for i in range(10_000)}


def nested(rng: random.Random) -> dict:
    return {
        f"group{g:03d}": {f"item{i:03d}": {"text": _text(rng, 90), "n": i, "ok": True} for i in range(40)}
        for g in range(250)
    }


def median_ms(fn, runs: int = 21) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def process_root(memory: dict) -> dict:
    return {
        "children": {}, "inbox": [], "lib": {}, "memory": memory, "mounts": {}, "ports": {},
        "system": {"outbox": []}, "tasks": {}, "thread": None,
    }


def main() -> None:
    rng = random.Random(7)
    for name, memory in (("flat", {"data": flat(rng)}), ("nested", nested(rng))):
        plain = process_root(memory)
        root = tree.from_value(plain, scripts_allowed=True)
        limits = Limits()
        blob = encode_snapshot(ADDRESS, 1, root, limits)
        baseline_bytes = cbor2.dumps(plain)

        dumps_ms = median_ms(lambda: cbor2.dumps(plain))
        canon_ms = median_ms(lambda: cbor2.dumps(plain, canonical=True))
        loads_ms = median_ms(lambda: cbor2.loads(baseline_bytes))

        def cold_encode() -> None:
            fresh = tree.from_value(plain, scripts_allowed=True)
            start = time.perf_counter()
            encode_snapshot(ADDRESS, 1, fresh, limits)
            cold.append(time.perf_counter() - start)

        cold: list[float] = []
        for _ in range(11):
            cold_encode()
        cold_ms = statistics.median(cold) * 1e3
        warm_ms = median_ms(lambda: encode_snapshot(ADDRESS, 1, root, limits))
        decode_ms = median_ms(lambda: decode_snapshot(blob))
        build_ms = median_ms(lambda: tree.from_value(plain, scripts_allowed=True))
        print(
            f"{name:7s} size={len(blob)/1e6:.2f}MB  dumps={dumps_ms:.2f}ms (canonical {canon_ms:.2f}ms) loads={loads_ms:.2f}ms\n"
            f"        snapshot cold/dumps={cold_ms/dumps_ms:.2f}x  warm/dumps={warm_ms/dumps_ms:.2f}x  "
            f"restore/loads={decode_ms/loads_ms:.2f}x  from_value/loads={build_ms/loads_ms:.2f}x"
        )


if __name__ == "__main__":
    main()
