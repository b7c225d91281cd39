"""The activation benchmark runs end to end and prints its rows (timing is never asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_activation_benchmark_prints_the_counter_row_as_a_ratio() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "activation.py"), "--repeat", "5"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    line, calls, reuse, reuse_more = result.stdout.splitlines()
    assert re.fullmatch(r"counter activation \(in memory\): \d+\.\d us vs Process\.write \d+\.\d us"
                        r" -> ratio \d+\.\d\d \(aim: about 25 us\)", line), line
    found = re.fullmatch(r"calls per counter activation: (\d+) Python, (\d+) C", calls)
    assert found is not None, calls
    assert int(found[1]) > 10 and int(found[2]) > 10, calls  # an activation was counted, not an empty call
    for row, label in ((reuse, ""), (reuse_more, r" \(12 definitions more\)")):
        assert re.fullmatch(rf"top level reused{label}: \d+\.\d us vs run every time \d+\.\d us -> ratio \d+\.\d\d",
                            row), row
