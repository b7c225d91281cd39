"""benchmarks/history.py runs end to end at a tiny size and prints every row with its
ratio and verdict (timing is never asserted: a tiny run's numbers mean nothing)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROWS = ["at(v).root_hash", "at(v).read, cold chunk cache", "at(v).read, warm chunk cache"]


def test_history_benchmark_quick_run_prints_every_row() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "history.py"), "--commits", "30", "--repeat", "3"],
                            cwd=ROOT / "benchmarks", env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    for name in ROWS:
        (line,) = [line for line in lines if line.startswith(name)]
        assert re.search(r"30 commits +[\d.]+ us +10 commits +[\d.]+ us +ratio +\d+\.\d\d +\(target <= 2: (holds|MISSED)\)$",
                         line), line
    assert re.fullmatch(r"time travel independent of history length: (holds|MISSED)", lines[-1]), lines
