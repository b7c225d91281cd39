"""The PostgreSQL benchmark runs end to end at tiny sizes and prints its one promised row.

Timing is never asserted: the numbers of a --quick run mean nothing. What is checked is
that the run completes against the session's server and prints the durable rate, the
raw conditional-UPDATE rate, their ratio and the target with a verdict, then what each
side cost (client CPU, server CPU, write-ahead-log bytes).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_postgres_benchmark_quick_run_prints_the_ratio_against_raw_conditional_updates(postgresql_server: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "postgres.py"), "--quick", "--url", postgresql_server],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("durable activations on PostgreSQL")]
    assert re.fullmatch(r"durable activations on PostgreSQL: \d+/s vs raw conditional UPDATE commits \d+/s "
                        r"-> ratio \d+\.\d\d \(target >= 0\.5\): (holds|MISSES)", line), line
    (costs,) = [line for line in result.stdout.splitlines() if line.startswith("where the time goes")]
    side = r"client CPU \d+ us, server CPU (\d+ us|n/a), WAL (\d+) bytes"
    found = re.fullmatch(rf"where the time goes: per durable activation {side}; per raw commit {side}", costs)
    assert found is not None, costs
    # Each durable activation writes its transaction, nodes and head; each raw commit one small row.
    assert int(found.group(2)) > int(found.group(4)) > 0, costs
