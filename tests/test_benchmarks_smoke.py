"""The width and peers benchmarks run end to end at tiny sizes and print every row they promise.

Timing is never asserted: the numbers of a --quick run mean nothing. What is checked is
that the run completes, that each width, bytes, restore, snapshot and fork row is
printed once with its target and verdict, that the byte counters saw
the engine's writes and RocksDB's write-ahead log, and that the peers comparison runs
with its optional peers installed or not.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

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


# ---------------------------------------------------------------------------- peers.py

PEER_MODULES = ("pydantic_monty", "starlark")
PEER_TARGETS = ["svit / CPython", "svit / CPython while", "exec tool / bare", "svit / starlark", "svit / monty"]

#: Runs peers.py as a script with the peer modules made unimportable.
_WITHOUT_PEERS = """
import importlib.abc, runpy, sys
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Blocker())
sys.path.insert(0, {benchmarks!r})
sys.argv = [{script!r}, "--quick"]
runpy.run_path({script!r}, run_name="__main__")
"""


def _installed(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def run_peers(*, block_peers: bool) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = str(ROOT / "benchmarks" / "peers.py")
    if block_peers:
        program = textwrap.dedent(_WITHOUT_PEERS).format(
            blocked=set(PEER_MODULES), benchmarks=str(ROOT / "benchmarks"), script=script)
        command = [sys.executable, "-c", program]
    else:
        command = [sys.executable, script, "--quick"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    return result.stdout.splitlines()


def _table_row(lines: list[str], label: str) -> str:
    (line,) = [line for line in lines if line.startswith(label) and "target" not in line and "svit:" not in line]
    return line


def test_peers_benchmark_quick_run_without_the_peers_notes_them_and_times_svit_against_cpython() -> None:
    lines = run_peers(block_peers=True)
    for module in PEER_MODULES:
        assert any(line.startswith(f"note: {module} is not importable") for line in lines), lines
    assert "workload" in lines[[i for i, line in enumerate(lines) if line.startswith("workload")][0]]
    for label in ("(fib ", "tail loop x", "counter activation "):
        row = _table_row(lines, label)
        assert row.count("skipped") == 2, row
        assert len(re.findall(r"\d+\.\d\dx", row)) == 1, row  # svit's ratio to CPython
    verdicts = [line for line in lines if re.search(r"x \| target <= [\d.]+x: (holds|misses)$", line)]
    assert len(verdicts) == 3, lines
    assert any("svit / starlark: skipped" in line for line in lines)
    assert any("svit / monty: skipped" in line for line in lines)
    assert lines[-1] == f"{sum(line.endswith('holds') for line in verdicts)} of 3 targets hold"


@pytest.mark.skipif(not all(_installed(module) for module in PEER_MODULES), reason="the bench extra is not installed")
def test_peers_benchmark_quick_run_with_the_peers_prints_every_column_and_target() -> None:
    lines = run_peers(block_peers=False)
    assert any("Starlark has no while loop" in line for line in lines)
    for label in ("(fib ", "tail loop x", "counter activation "):
        row = _table_row(lines, label)
        assert "skipped" not in row, row
        assert len(re.findall(r"\d+\.\d\dx", row)) == 3, row
    assert re.search(r"^counter activation, svit: [\d.]+ us bare; through the exec tool [\d.]+ us$", "\n".join(lines), re.M)
    verdicts = [line for line in lines if re.search(r"x \| target <= [\d.]+x: (holds|misses)$", line)]
    assert len(verdicts) == len(PEER_TARGETS), lines
    for name, line in zip(PEER_TARGETS, verdicts, strict=True):
        assert name in line, (name, line)
    assert lines[-1].endswith(f"of {len(PEER_TARGETS)} targets hold")


def test_the_peers_are_an_optional_bench_extra_only() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert extras["bench"] == ["pydantic-monty>=1.4", "starlark-pyo3>=2026.1"]
    for requirements in (project["dependencies"], extras["test"], extras["all"]):
        assert not [req for req in requirements if req.startswith(("pydantic-monty", "starlark"))], requirements
