"""The `svit` command driven as a subprocess, the way users and scripts drive it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
COUNTER = """(define (main input)
  (let ((n (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" n) (value-map "count" n))))
"""


@pytest.fixture()
def svit(tmp_path: Path):
    env = {**os.environ, "SVIT_STORE": str(tmp_path / "store")}
    env.pop("SVIT_DEBUG", None)

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "svit.cli", *args], capture_output=True, text=True, env=env, cwd=tmp_path,
            input=stdin, timeout=60,
        )

    return run


def ok(result: subprocess.CompletedProcess):
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def fails(result: subprocess.CompletedProcess, code: str, status: int = 1) -> str:
    assert result.returncode == status, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"svit: {code}"), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_exec_with_and_without_input(svit, tmp_path: Path) -> None:
    script = tmp_path / "counter.svit-script"
    script.write_text("(define (main input) (let ((count (value-get input \"/by\"))) (do (write \"/memory/count\" count) (value-map \"count\" count))))")
    assert ok(svit("exec", str(script), '{"by":2}')) == {"memory": {"count": 2}, "output": {"count": 2}, "version": 2}
    plain = tmp_path / "plain.svit"
    plain.write_text("(define (main input) (value-null? input))")
    assert ok(svit("exec", str(plain))) == {"memory": {}, "output": True, "version": 2}


def test_exec_errors(svit, tmp_path: Path) -> None:
    bad = tmp_path / "bad.svit"
    bad.write_text("(define (main input)")
    line = fails(svit("exec", str(bad)), "script_failed")
    assert "unbalanced" in line
    fails(svit("exec", str(tmp_path / "missing.svit")), "file_not_found")
    good = tmp_path / "good.svit"
    good.write_text("(define (main input) input)")
    fails(svit("exec", str(good), "{not json"), "invalid_value")
    fails(svit("check", str(bad)), "script_failed")
    assert ok(svit("check", str(good)))["ok"] is True


def test_check_refuses_a_mistake_in_a_branch_that_never_runs(svit, tmp_path: Path) -> None:
    unbound = tmp_path / "unbound.svit"
    unbound.write_text("(define (main input)\n  (if (value-null? input) 0 (string-append \"a\" \"b\")))")
    line = fails(svit("check", str(unbound)), "script_failed")
    assert "2:30: unbound name `string-append`" in line and "(concat a b ...)" in line
    arity = tmp_path / "arity.svit"
    arity.write_text("(define (main input)\n  (if (value-null? input) 0 (read)))")
    assert "2:30: read expects 1 argument, found 0" in fails(svit("check", str(arity)), "script_failed")
    # exec refuses it too, before anything runs, and leaves the memory as it was.
    assert "2:30: unbound name `string-append`" in fails(svit("exec", str(unbound)), "script_failed")


def test_usage_errors_exit_2(svit) -> None:
    result = svit()
    assert result.returncode == 2 and result.stderr.startswith("svit: usage:")
    assert svit("read").returncode == 2
    assert svit("nonsense").returncode == 2


def test_every_command_has_help(svit) -> None:
    for command in ["exec", "check", "new", "run", "read", "discover", "stat", "write", "remove", "snapshot",
                    "restore", "fork", "log", "tree", "repl", "spec"]:
        result = svit(command, "--help")
        assert result.returncode == 0 and "usage:" in result.stdout, command
    assert svit("store", "reset-index", "--help").returncode == 0


def test_durable_flow(svit, tmp_path: Path) -> None:
    created = svit("new", "svit://local/cli/c", "--memory", "count=0")
    assert created.returncode == 0 and "created a process store" in created.stderr
    assert ok(created)["version"] == 0
    again = svit("new", "svit://local/cli/other")
    assert "created a process store" not in again.stderr  # said once
    source = json.dumps({"source": COUNTER, "documentation": "adds input.by"})
    assert ok(svit("write", "svit://local/cli/c", "/lib/counter", source))["version"] == 1
    first = ok(svit("run", "svit://local/cli/c", "/lib/counter", '{"by": 2}'))
    second = ok(svit("run", "svit://local/cli/c", "/lib/counter", '{"by": 3}'))
    assert first["output"] == {"count": 2} and second["output"] == {"count": 5} and second["version"] == 3
    assert ok(svit("read", "svit://local/cli/c", "/memory/count")) == 5
    assert ok(svit("discover", "svit://local/cli/c", "/memory")) == ["count"]
    assert ok(svit("stat", "svit://local/cli/c", "/memory/count"))["kind"] == "leaf"
    snap = tmp_path / "c.snapshot"
    assert ok(svit("snapshot", "svit://local/cli/c", str(snap)))["version"] == 3
    restored = ok(svit("restore", str(snap), "svit://local/cli/copy"))
    assert restored["address"] == "svit://local/cli/copy" and restored["version"] == 3
    assert ok(svit("read", "svit://local/cli/copy", "/memory")) == {"count": 5}

    assert ok(svit("fork", "svit://local/cli/c", "svit://local/cli/child"))["version"] == 3
    assert ok(svit("run", "svit://local/cli/child", "/lib/counter", '{"by": 10}'))["output"] == {"count": 15}
    assert ok(svit("run", "svit://local/cli/c", "/lib/counter", '{"by": 1}'))["output"] == {"count": 6}
    assert ok(svit("read", "svit://local/cli/child", "/memory/count")) == 15

    log = ok(svit("log", "svit://local/cli/c", "--path", "/memory"))
    assert [entry["version"] for entry in log] == [4, 3, 2]  # newest first
    assert all(entry["touched_paths"] == ["/memory/count"] for entry in log)

    tree = svit("tree", "svit://local/cli/c", "/memory", "--depth", "1")
    assert tree.returncode == 0 and "count  = 6" in tree.stdout

    assert ok(svit("remove", "svit://local/cli/c", "/memory/count"))["paths"] == ["/memory/count"]
    assert ok(svit("read", "svit://local/cli/c", "/memory/count")) is None
    counts = ok(svit("store", "reset-index"))
    assert counts["path_entries"] > 0
    assert ok(svit("read", "svit://local/cli/child", "/memory/count")) == 15


def test_run_a_script_file_once(svit, tmp_path: Path) -> None:
    ok(svit("new", "svit://local/cli/f", "--memory", "n=1"))
    script = tmp_path / "once.svit"
    script.write_text('(define (main input) (do (write "/memory/n" (+ 1 (read "/memory/n"))) (discover "/lib")))')
    result = ok(svit("run", "svit://local/cli/f", str(script)))
    assert result["output"] == [] and result["version"] == 1
    assert ok(svit("read", "svit://local/cli/f", "/memory/n")) == 2


def test_bad_input_for_every_command(svit, tmp_path: Path) -> None:
    ok(svit("new", "svit://local/cli/b"))
    fails(svit("new", "not-an-address"), "invalid_value")
    fails(svit("new", "svit://local/cli/b"), "persistence_already_exists")
    fails(svit("run", "svit://local/cli/b", "/lib/missing"), "script_not_found")
    fails(svit("run", "svit://local/cli/b", str(tmp_path / "nope.svit")), "file_not_found")
    fails(svit("run", "svit://local/cli/b", "/lib/x", "{bad"), "invalid_value")
    fails(svit("read", "svit://local/cli/absent", "/memory"), "persistence_not_found")
    fails(svit("read", "svit://local/cli/b", "memory"), "invalid_path")
    fails(svit("discover", "svit://local/cli/b", "/memory/none"), "invalid_path")
    fails(svit("stat", "bad", "/memory"), "invalid_value")
    fails(svit("write", "svit://local/cli/b", "/system/x", "1"), "invalid_path")
    fails(svit("write", "svit://local/cli/b", "/memory/x", "nope"), "invalid_value")
    fails(svit("remove", "svit://local/cli/b", "/memory/none"), "invalid_path")
    fails(svit("snapshot", "svit://local/cli/absent", str(tmp_path / "s")), "persistence_not_found")
    fails(svit("restore", str(tmp_path / "missing.snapshot")), "file_not_found")
    junk = tmp_path / "junk.snapshot"
    junk.write_bytes(b"not a snapshot")
    fails(svit("restore", str(junk)), "invalid_snapshot")
    fails(svit("fork", "svit://local/cli/absent", "svit://local/cli/c2"), "persistence_not_found")
    fails(svit("log", "svit://local/cli/b", "--limit", "5000"), "resource_limit_exceeded")
    fails(svit("tree", "svit://local/cli/b", "relative"), "invalid_path")
    fails(svit("spec", str(tmp_path / "nowhere")), "file_not_found")


def test_debug_shows_traceback(svit, tmp_path: Path) -> None:
    env = {**os.environ, "SVIT_STORE": str(tmp_path / "store"), "SVIT_DEBUG": "1"}
    result = subprocess.run([sys.executable, "-m", "svit.cli", "read", "bad", "/x"], capture_output=True, text=True, env=env)
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_repl_with_piped_input(svit) -> None:
    session = "\n".join([
        "(define (double x)",
        "  (* 2 x))",
        '(write "/memory/x" (double 21))',
        ":read /memory/x",
        '(panic "boom")',
        ":tree /memory",
        ":help",
        ":quit",
        '(write "/memory/never" 1)',
    ]) + "\n"
    result = svit("repl", stdin=session)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "; kept for this session" in out and "; version 1" in out
    assert "42" in out and "error: script_failed" in out and "boom" in out
    assert "x  = 42" in out and ":snapshot FILE" in out
    assert "never" not in out.split(":quit")[-1]


def test_repl_on_a_durable_process(svit) -> None:
    ok(svit("new", "svit://local/cli/r", "--memory", "n=1"))
    result = svit("repl", "svit://local/cli/r", stdin='(write "/memory/n" (+ 1 (read "/memory/n")))\n')
    assert result.returncode == 0 and "; version 1" in result.stdout
    assert ok(svit("read", "svit://local/cli/r", "/memory/n")) == 2


def test_spec_command_runs_fixtures(svit) -> None:
    fixtures = Path(__file__).resolve().parents[2] / "spec" / "fixtures" / "reference"
    result = svit("spec", str(fixtures))
    assert result.returncode == 0 and result.stdout.strip().endswith("0 failed")


def test_archive_flow(svit, tmp_path: Path) -> None:
    fails(svit("archive", "export"), "archive_not_configured")
    archive = tmp_path / "archive"
    archive.mkdir()
    ok(svit("new", "svit://local/cli/keep", "--memory", "n=7"))
    written = ok(svit("archive", "export", "--archive", str(archive)))
    assert written["outcome"] == "written" and written["record_count"] == 1
    status = ok(svit("archive", "status", "--archive", str(archive)))
    assert len(status["generations"]) == 1 and status["flags"]["archive_inside_store"] is False
    import shutil

    shutil.rmtree(tmp_path / "store")
    refused = svit("archive", "export", "--archive", str(archive))
    assert refused.returncode == 1 and "archive_refused_empty" in refused.stderr
    restored = ok(svit("archive", "restore", "--archive", str(archive)))
    assert restored["outcome"] == "restored" and restored["written"] == ["svit://local/cli/keep"]
    assert ok(svit("read", "svit://local/cli/keep", "/memory/n")) == 7
