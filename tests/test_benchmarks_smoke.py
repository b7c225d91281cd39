"""The width benchmark runs end to end at tiny sizes and prints every row it promises.

Timing is never asserted: the numbers of a --quick run mean nothing. What is checked is
that the run completes, that each width, bytes, restore, snapshot and fork row is
printed once with its target and verdict, and that the byte counters saw
the engine's writes and RocksDB's write-ahead log.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WRITE_ROWS = [
    f"{shape} write, {how}, {where}"
    for shape in ("map", "array") for where in ("memory", "durable") for how in ("host write", "activation")
]
BYTE_ROWS = [f"bytes per commit, {noun}, {how}" for noun in ("map key", "array element") for how in ("host write", "activation")]
SNAPSHOT_ROWS = [
    row for shape in ("flat", "nested") for row in (
        f"restore, {shape} (validated, hash checked)", f"snapshot, {shape} (repeated)", f"snapshot, {shape} (first after restore)")
]
FORK_ROWS = ["fork, wide vs tiny, memory", "fork, wide vs tiny, durable"]
ROWS = WRITE_ROWS + BYTE_ROWS + SNAPSHOT_ROWS + FORK_ROWS


def run_quick() -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "width.py"), "--quick"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    return result.stdout.splitlines()


def test_width_benchmark_quick_run_prints_every_row_with_its_target() -> None:
    lines = run_quick()
    verdicts = [line for line in lines if re.search(r" \| target [^|]+: (holds|MISSES)$", line)]
    assert len(verdicts) == len(ROWS), "\n".join(lines)
    for name in ROWS:
        matching = [line for line in verdicts if re.match(re.escape(name) + r"\s", line)]
        assert len(matching) == 1, (name, lines)
    for name in WRITE_ROWS + SNAPSHOT_ROWS + FORK_ROWS:
        (line,) = [line for line in verdicts if line.startswith(name)]
        assert re.search(r" ms vs .+ ms -> +\d+\.\d\dx \|", line), line
    for name in BYTE_ROWS:
        (line,) = [line for line in verdicts if line.startswith(name)]
        match = re.search(r"([\d,]+) B vs \d+ +([\d,]+) B -> .*\(WAL ([\d,]+) vs ([\d,]+) B\)", line)
        assert match, line
        assert all(int(group.replace(",", "")) > 0 for group in match.groups()), line
    assert f"of {len(ROWS)} targets hold" in lines[-2] + lines[-1]
