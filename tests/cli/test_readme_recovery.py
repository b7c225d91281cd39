"""The README's recovery drill, run exactly as written."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def drill() -> str:
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    found = [block for block in blocks if "svit archive restore" in block and "mktemp" in block]
    assert len(found) == 1, "the README has exactly one recovery drill"
    return found[0]


def test_readme_recovery_drill_restores_the_lost_store(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SVIT_")}
    env["TMPDIR"] = str(tmp_path)
    script = "set -e\n" + drill()
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == '"keep me"'
    assert '"outcome": "restored"' in result.stdout


def test_drill_without_the_archive_loses_the_process(tmp_path: Path) -> None:
    """Control: the same loss without the export step cannot be recovered."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SVIT_")}
    env["TMPDIR"] = str(tmp_path)
    script = drill().replace("svit archive export\n", "")
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert result.returncode != 0
    assert "persistence_not_found" in result.stderr
