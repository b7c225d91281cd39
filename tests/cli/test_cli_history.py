"""``svit read|discover|stat --at``, ``svit diff`` and ``svit log``: retained versions
from the command line, read from the store without replaying the history."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from svit import Process
from svit.cli import main
from svit.cli_history import VALUE_BYTES
from svit.store import ProcessStore

ADDRESS = "svit://local/cli/history"


def run(capsys, *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture
def prepared(tmp_path: Path, capsys):
    """A process with four versions after its base: n 0 -> 5, m added, n removed, m.a grown."""
    store = str(tmp_path / "store")
    steps = [("new", "--store", store, ADDRESS, "--memory", "n=0"),
             ("write", "--store", store, ADDRESS, "/memory/n", "5"),
             ("write", "--store", store, ADDRESS, "/memory/m", json.dumps({"a": [1, 2], "big": "x" * 500})),
             ("remove", "--store", store, ADDRESS, "/memory/n"),
             ("write", "--store", store, ADDRESS, "/memory/m/a", "[1, 2, 3]")]
    before = int(time.time() * 1000)
    for step in steps:
        assert run(capsys, *step)[0] == 0
    return store, before, int(time.time() * 1000)


def test_readers_take_a_version(prepared, capsys):
    store, _, _ = prepared
    assert json.loads(run(capsys, "read", "--store", store, ADDRESS, "/memory", "--at", "1")[1]) == {"n": 5}
    assert json.loads(run(capsys, "read", "--store", store, ADDRESS, "/memory/n", "--at", "0")[1]) == 0
    assert json.loads(run(capsys, "read", "--store", store, ADDRESS, "/memory/n")[1]) is None
    assert json.loads(run(capsys, "discover", "--store", store, ADDRESS, "/memory", "--at", "2")[1]) == ["m", "n"]
    facts = json.loads(run(capsys, "stat", "--store", store, ADDRESS, "/memory/n", "--at", "1")[1])
    assert facts["path"] == "/memory/n" and facts["kind"] == "leaf"
    assert json.loads(run(capsys, "stat", "--store", store, ADDRESS, "/memory/n", "--at", "3")[1]) is None


def test_readers_refuse_versions_that_are_not_retained(prepared, capsys):
    store, _, _ = prepared
    for version in ("5", "-1"):
        status, out, err = run(capsys, "read", "--store", store, ADDRESS, "/memory", "--at", version)
        assert status == 1 and out == ""
        assert err == (f"svit: persistence_not_found: persisted process not found: {ADDRESS}: version {version} "
                       "is not retained (retained versions 0..4)\n")
    status, _, err = run(capsys, "discover", "--store", store, ADDRESS, "/memory/n", "--at", "1")
    assert status == 1 and err.startswith("svit: invalid_path:")
    status, _, err = run(capsys, "read", "--store", store, "not-an-address", "/memory", "--at", "1")
    assert status == 1 and err.startswith("svit: invalid_value:")
    with pytest.raises(SystemExit) as caught:
        main(["read", "--store", store, ADDRESS, "/memory", "--at", "one"])
    assert caught.value.code == 2


def test_diff_prints_json_lines_or_a_table(prepared, capsys):
    store, _, _ = prepared
    status, out, _ = run(capsys, "diff", "--store", store, ADDRESS, "0", "4")
    lines = [json.loads(line) for line in out.splitlines()]
    assert status == 0 and [(d["kind"], d["path"]) for d in lines] == [("added", "/memory/m"), ("removed", "/memory/n")]
    assert lines[1] == {"before": 0, "kind": "removed", "path": "/memory/n"}
    added = lines[0]
    assert added["after_truncated"] is True and "before" not in added
    assert added["after"].endswith("…") and len(added["after"].encode()) <= VALUE_BYTES + len("…".encode())
    status, out, _ = run(capsys, "diff", "--store", store, ADDRESS, "4", "3", "--table")
    assert status == 0 and out == "- /memory/m/a/2: 3\n"
    status, out, _ = run(capsys, "diff", "--store", store, ADDRESS, "2", "2", "--table")
    assert out == "(no differences)\n"
    status, out, err = run(capsys, "diff", "--store", store, ADDRESS, "0", "9")
    assert status == 1 and out == "" and "version 9 is not retained" in err


def test_log_is_newest_first_with_times_sources_and_values(prepared, capsys):
    store, before, after = prepared
    status, out, _ = run(capsys, "log", "--store", store, ADDRESS)
    entries = json.loads(out)
    assert status == 0 and [e["version"] for e in entries] == [4, 3, 2, 1]
    assert [e["source"] for e in entries] == ["host.write", "host.remove", "host.write", "host.write"]
    assert entries[1]["changes"] == ["remove /memory/n"] and entries[3]["changes"] == ["set /memory/n = 5"]
    assert entries[0]["touched_paths"] == ["/memory/m/a"]
    stamps = [datetime.strptime(e["committed_at"], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() * 1000 for e in entries]
    assert all(before - 1 <= s <= after + 1 for s in stamps) and stamps == sorted(stamps, reverse=True)
    assert "diff" not in entries[0]

    status, out, _ = run(capsys, "log", "--store", store, ADDRESS, "--values", "--limit", "2")
    entries = json.loads(out)
    assert [e["version"] for e in entries] == [4, 3]
    assert entries[0]["diff"] == [{"after": 3, "kind": "added", "path": "/memory/m/a/2"}]
    assert entries[1]["diff"] == [{"before": 5, "kind": "removed", "path": "/memory/n"}]

    status, out, _ = run(capsys, "log", "--store", store, ADDRESS, "--path", "/memory/n")
    assert [e["version"] for e in json.loads(out)] == [3, 1]

    status, out, _ = run(capsys, "log", "--store", store, ADDRESS, "--table", "--diff", "--limit", "1")
    assert out.splitlines()[0].startswith("version 4  ") and out.splitlines()[0].endswith("  host.write")
    assert out.splitlines()[1:] == ["    + /memory/m/a/2: 3"]


def test_log_is_bounded(tmp_path: Path, capsys):
    store = str(tmp_path / "store")
    with ProcessStore.open(store) as opened:
        h = opened.create(Process.builder(ADDRESS).memory("n", 0).build())
        for i in range(25):
            h.write("/memory/n", i + 1)
    entries = json.loads(run(capsys, "log", "--store", store, ADDRESS)[1])
    assert [e["version"] for e in entries] == list(range(25, 5, -1))  # the default limit is 20
    status, _, err = run(capsys, "log", "--store", store, ADDRESS, "--limit", "0")
    assert status == 1 and err.startswith("svit: resource_limit_exceeded")


def test_the_commands_as_a_subprocess(prepared):
    store, _, _ = prepared
    env = {**os.environ, "SVIT_STORE": store}
    env.pop("SVIT_DEBUG", None)
    done = subprocess.run([sys.executable, "-m", "svit.cli", "diff", ADDRESS, "1", "0", "--table"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0 and done.stdout == "~ /memory/n: 5 -> 0\n", done.stderr


def test_log_names_the_script_and_summarises_the_output(tmp_path: Path, capsys):
    store = str(tmp_path / "store")
    script = tmp_path / "bump.svit"
    script.write_text('(define (main input) (do (write "/memory/n" 7) (value-map "was" input)))')
    assert run(capsys, "new", "--store", store, ADDRESS, "--memory", "n=0")[0] == 0
    assert run(capsys, "run", "--store", store, ADDRESS, str(script), "3")[0] == 0
    entry = json.loads(run(capsys, "log", "--store", store, ADDRESS)[1])[0]
    assert (entry["source"], entry["script"], entry["output"]) == ("activation", "inline", '{"was":3}')
    out = run(capsys, "log", "--store", store, ADDRESS, "--table")[1].splitlines()
    assert out[0].endswith("  activation inline") and out[1:] == ['    => {"was":3}', "    set /memory/n = 7"]
