"""The host benchmarks run end to end at tiny sizes and print their rows (timing is
never asserted: the numbers of a tiny run mean nothing)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.splitlines()


def test_messages_benchmark_prints_both_engines_side_by_side(postgresql_url: str) -> None:
    # A burst over the default limit of 128 messages per activation: the benchmark raises
    # the sender's limit itself.
    lines = run("benchmarks/messages.py", "--repeat", "1", "--burst", "130", "--postgresql", postgresql_url)
    rows = [line for line in lines if re.search(r"rocksdb +\d+/s \| postgresql +\d+/s -> postgresql/rocksdb \d+\.\d\dx", line)]
    assert len(rows) == 2, lines


def test_host_benchmark_prints_rate_threads_and_memory() -> None:
    lines = run("benchmarks/host.py", "--idle", "40", "--busy", "4", "--items", "2")
    text = "\n".join(lines)
    assert re.search(r"busy turns/s with 40 idle: \d+/s vs alone \d+/s -> \d+\.\d\dx", text), text
    assert re.search(r"threads: before \d+, peak \d+", text) and re.search(r"RSS MB: before \d+, peak \d+", text), text
