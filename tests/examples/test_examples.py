"""Every example runs as a newcomer would run it and prints its one checkable line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

EXPECTED = {
    "agent_scripted.py": r'^reply: Remembered blue; the sky is blue\. memory: \{"color": "blue", "mentions": 1\} inbox: 0$',
    "agent_openai.py": r"^agent_openai: skipped .*$",
    "durable_counter.py": r"^durable-counter: resumed_at=2 count=10 transactions=3$",
    "atomic_outbox.py": r"^atomic-outbox: failure=script_failed rolled_back=True balance=75 intent=svit://local/examples/payer:2:0$",
    "fork_research.py": r"^fork-research: optimist=25 skeptic=-5 parent_has_analysis=False lineage=svit://local/examples/research$",
    "sandbox_limits.py": r"^sandbox-limits: recursion=call stack spin=steps bomb=guest memory huge=integer bits use=script_failed memory_intact=True$",
    "mounted_resources.py": r"^mounted-resources: files=guide.md,notes.txt first=/mounts/docs/guide.md write=mount_denied content_in_snapshot=False$",
    "self_authoring.py": r"^self-authoring: first='Hello, Svit' later='Hello, Ada' doc='Greets input.name' library=\['greeter', 'teacher'\]$",
}


def test_every_example_has_a_check() -> None:
    present = {path.name for path in EXAMPLES.glob("*.py")}
    assert present <= set(EXPECTED) | OPTIONAL, f"examples without a check: {sorted(present - set(EXPECTED) - OPTIONAL)}"


OPTIONAL: set[str] = set()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_prints_its_line(name: str, tmp_path: Path) -> None:
    import os

    # Offline by design: the OpenAI example must skip cleanly without configuration.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines and re.match(EXPECTED[name], lines[-1]), result.stdout


def test_cli_quick_start_counter(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "svit.cli", "exec", str(EXAMPLES / "counter.svit-script"), '{"by": 2}'],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    import json

    assert json.loads(result.stdout) == {"memory": {"count": 2}, "output": {"count": 2}, "version": 2}
