"""`svit archive` prints the archive's findings: refusals, rollbacks and fallbacks."""

# RocksDB only: the CLI's default store directory and the archive beside it (the CLI on PostgreSQL: test_postgres.py).

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from svit.store.archive import generation_name

ADDRESS = "svit://local/cli/keep"


@pytest.fixture()
def svit(tmp_path: Path):
    env = {**os.environ, "SVIT_STORE": str(tmp_path / "store"), "SVIT_ARCHIVE": str(tmp_path / "archive")}
    env.pop("SVIT_DEBUG", None)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "svit.cli", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=60)

    return run


def ok(result: subprocess.CompletedProcess):
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_stale_store_is_refused_reported_and_can_be_superseded(svit, tmp_path: Path) -> None:
    ok(svit("new", ADDRESS, "--memory", "n=1"))
    assert ok(svit("archive", "export"))["outcome"] == "written"  # version 0 archived; the store has its id
    stale = tmp_path / "stale"
    shutil.copytree(tmp_path / "store", stale)  # version 0
    ok(svit("write", ADDRESS, "/memory/n", "2"))
    assert ok(svit("archive", "export"))["outcome"] == "written"  # version 1 archived
    shutil.rmtree(tmp_path / "store")
    shutil.copytree(stale, tmp_path / "store")  # the stale copy comes back

    status = svit("archive", "status")
    assert status.returncode == 0
    assert json.loads(status.stdout)["rollbacks"] == [
        {"address": ADDRESS, "store_version": 0, "archived_version": 1, "generation": 2}]
    assert f"svit: warning: store rolled back below an acknowledged version: {ADDRESS}" in status.stderr

    refused = svit("archive", "export")
    assert refused.returncode == 1 and "svit: archive_refused_older:" in refused.stderr
    assert json.loads(refused.stdout)["behind"][0]["address"] == ADDRESS
    assert sorted(p.name for p in (tmp_path / "archive").iterdir()) == [generation_name(1), generation_name(2)]

    forced = ok(svit("archive", "export", "--supersede"))
    assert forced["outcome"] == "written" and forced["generation"] == 3
    assert ok(svit("archive", "status"))["rollbacks"] == []  # control: nothing is behind any more


def test_restore_says_it_fell_back(svit, tmp_path: Path) -> None:
    ok(svit("new", ADDRESS, "--memory", "n=1"))
    assert ok(svit("archive", "export"))["outcome"] == "written"
    ok(svit("write", ADDRESS, "/memory/n", "2"))
    assert ok(svit("archive", "export"))["outcome"] == "written"
    newest = tmp_path / "archive" / generation_name(2)
    data = bytearray(newest.read_bytes())
    data[-1] ^= 1
    newest.write_bytes(bytes(data))
    shutil.rmtree(tmp_path / "store")
    restored = svit("archive", "restore")
    assert restored.returncode == 0, restored.stderr
    result = json.loads(restored.stdout)
    assert result["outcome"] == "restored" and result["generation"] == 1 and result["fell_back"] is True
    assert result["skipped"] == [{"number": 2, "reason": "digest mismatch"}]
    assert "svit: warning: fell back to generation 1" in restored.stderr
    assert ok(svit("read", ADDRESS, "/memory/n")) == 1


def test_the_generation_bound_is_an_option_and_a_bad_one_is_refused(svit, tmp_path: Path) -> None:
    ok(svit("new", ADDRESS, "--memory", "n=1"))
    small = svit("archive", "export", "--max-generation-bytes", "200")
    assert small.returncode == 1 and "over the archive's limit of 200" in small.stderr
    assert not (tmp_path / "archive").exists() or list((tmp_path / "archive").glob("generation-*")) == []
    assert ok(svit("archive", "export", "--max-generation-bytes", str(1 << 20)))["outcome"] == "written"
    # The bound applies to reading too: a generation over it is not read.
    refused = svit("archive", "status", "--max-generation-bytes", "200")
    assert "larger than the limit" in refused.stdout + refused.stderr
    for bad in ("0", "-5", "many", "1e9"):
        result = svit("archive", "status", "--max-generation-bytes", bad)
        assert result.returncode == 2, (bad, result.stdout, result.stderr)
        assert "--max-generation-bytes" in result.stderr and "Traceback" not in result.stderr
