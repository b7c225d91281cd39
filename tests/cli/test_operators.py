"""``svit ls``, ``svit status`` and ``svit events``: what an operator sees, read without the store's lock."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from svit import Message, Process
from svit.cli import main
from svit.loop import LoopOptions, ReasonerFailed, run_next_turn
from svit.reasoners import ScriptedReasoner
from svit.store import ProcessStore
from svit.store.events import StoreEventLog
from svit.thread import TOOL_STARTED

ROOT = str(Path(__file__).resolve().parents[2])
AGENT = "svit://local/ops/agent"
PLAIN = "svit://local/ops/plain"
NOW = 2_000_000_000.0


def broken(conversation: Any) -> str:
    raise ReasonerFailed("model provider returned HTTP 400: bad request", status=400, retryable=False)


def flaky(conversation: Any) -> str:
    raise ReasonerFailed("model provider returned HTTP 429: slow down", status=429)


@pytest.fixture()
def store_path(tmp_path: Path) -> str:
    """Two processes: an agent with a set-aside item, a failing head, one more pending
    item and a turn that started a tool call and never finished; a plain one."""
    path = str(tmp_path / "store")
    with ProcessStore.open(path) as store:
        plain = store.create(Process.builder(PLAIN).memory("n", 0).build())
        plain.write("/memory/n", 1)
        handle = store.create(Process.builder(AGENT).build())
        for text in ("bad", "flaky", "later"):
            handle.enqueue_inbox(Message.user(text).to_json())
        options = LoopOptions().max_attempts(3).retry_backoff(30, 60)
        assert run_next_turn(handle, ScriptedReasoner([broken]), options, now=NOW).kind == "set_aside"
        assert run_next_turn(handle, ScriptedReasoner([flaky]), options, now=NOW).kind == "retry"
        handle = store.resume(AGENT)
        session = handle.read("/thread/session_id")
        StoreEventLog(store).append(AGENT, session, TOOL_STARTED, {"tool_call": {"id": "c1"}, "turn_id": "t-open"})
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_ls_lists_each_process_with_its_version_and_inbox(store_path, capsys):
    status, out, err = run(capsys, "ls", "--store", store_path, "--json")
    assert status == 0, err
    listing = json.loads(out)
    assert listing["more"] is False
    by_address = {entry["address"]: entry for entry in listing["processes"]}
    assert list(by_address) == [AGENT, PLAIN]
    assert by_address[PLAIN]["version"] == 1 and by_address[PLAIN]["inbox"] == 0
    assert by_address[AGENT]["inbox"] == 2 and len(by_address[AGENT]["root_hash"]) == 64
    status, out, _ = run(capsys, "ls", "--store", store_path, "--limit", "1")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"{AGENT}  version ") and "  inbox 2  last commit " in lines[0]
    assert lines[1] == "... more than 1: raise --limit"
    assert run(capsys, "ls", "--store", store_path, "--limit", "0")[0] == 2


def test_ls_of_a_store_that_does_not_exist_lists_nothing_and_creates_nothing(tmp_path, capsys):
    status, out, _ = run(capsys, "ls", "--store", str(tmp_path / "none"), "--json")
    assert status == 0 and json.loads(out) == {"more": False, "processes": []}
    assert not (tmp_path / "none").exists()


def test_status_reports_inbox_failures_and_the_unfinished_turn(store_path, capsys):
    status, out, err = run(capsys, "status", "--store", store_path, AGENT, "--json")
    assert status == 0, err
    report = json.loads(out)
    assert report["inbox"]["depth"] == 2
    oldest = report["inbox"]["oldest"]
    assert oldest["attempts"] == 1 and oldest["retry_at"] == NOW + 30
    assert type(oldest["arrived_at_version"]) is int and oldest["arrived_at_version"] >= 1
    assert report["set_aside"] == 1 and report["undeliverable"] == 0 and report["mail_waiting"] == 0
    assert report["last_failure"]["where"] == "inbox head"
    assert report["last_failure"]["error"]["status"] == 429
    assert report["unfinished_turn"] == {"last_event": TOOL_STARTED, "sequence": report["unfinished_turn"]["sequence"],
                                         "turn_id": "t-open"}
    status, out, _ = run(capsys, "status", "--store", store_path, AGENT)
    assert status == 0
    assert out.splitlines()[0].startswith(f"{AGENT} at version ")
    assert "  oldest item   " in out and "1 attempt(s), retry at 2033-05-18T03:33:50Z" in out
    assert "  set aside     1\n" in out and "turn t-open (last event tool.call.started" in out
    status, out, _ = run(capsys, "status", "--store", store_path, PLAIN, "--json")
    plain = json.loads(out)
    assert plain["inbox"] == {"depth": 0, "oldest": None} and plain["last_failure"] is None
    assert plain["unfinished_turn"] is None and plain["version"] == 1


def test_status_of_an_unknown_address_is_not_found(store_path, capsys):
    status, _, err = run(capsys, "status", "--store", store_path, "svit://local/ops/none")
    assert status == 1 and err.startswith("svit: persistence_not_found: ")


def test_events_prints_commits_then_thread_events_in_order(store_path, capsys):
    status, out, err = run(capsys, "events", "--store", store_path, AGENT)
    assert status == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    commits = [r for r in records if r["kind"] == "commit"]
    threads = [r for r in records if r["kind"] == "thread"]
    assert [c["version"] for c in commits] == sorted(c["version"] for c in commits)
    assert commits[0]["source"] == "inbox.enqueue" and commits[-1]["address"] == AGENT
    assert [t["sequence"] for t in threads] == list(range(1, len(threads) + 1))
    assert threads[-1]["type"] == TOOL_STARTED and threads[-1]["data"]["turn_id"] == "t-open"
    # The loop's own events carry the time they were recorded.
    assert all(type(t["at"]) is int for t in threads if t["type"] != TOOL_STARTED)
    status, out, _ = run(capsys, "events", "--store", store_path, PLAIN, "--after", "0")
    assert [json.loads(line)["version"] for line in out.splitlines()] == [1]


def test_events_follow_prints_new_commits_until_terminated(store_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    follower = subprocess.Popen([sys.executable, "-m", "svit.cli", "events", "--store", store_path, PLAIN, "--follow"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        assert follower.stdout is not None
        # Lines are read on a thread, so a follower that prints nothing fails the test at
        # a generous bound instead of hanging it (the bound is not a speed test).
        lines: queue.Queue[str] = queue.Queue()
        output = follower.stdout

        def pump() -> None:
            for line in output:
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
        assert json.loads(lines.get(timeout=60))["version"] == 1  # what was there
        with ProcessStore.open(store_path) as store:  # a writer while the follower reads
            handle = store.resume(PLAIN)
            for n in (2, 3):
                handle.write("/memory/n", n)
                record = json.loads(lines.get(timeout=60))
                assert record["kind"] == "commit" and record["version"] == n and record["changed"] == ["/memory/n"]
        follower.send_signal(signal.SIGTERM)
        assert follower.wait(timeout=30) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()


def test_a_writing_command_names_the_svit_command_holding_the_store(store_path, capsys):
    env = dict(os.environ, PYTHONPATH=ROOT)
    repl = subprocess.Popen([sys.executable, "-m", "svit.cli", "repl", "--store", store_path, PLAIN],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        assert repl.stdin is not None and repl.stdout is not None
        repl.stdin.write('(read "/memory/n")\n')
        repl.stdin.flush()
        assert repl.stdout.readline().strip() == "1"  # the repl has the store open
        status, _, err = run(capsys, "write", "--store", store_path, PLAIN, "/memory/n", "2")
        assert status == 1
        assert err.startswith("svit: persistence_unavailable: ")
        assert f"held by pid {repl.pid} (svit repl, since " in err and store_path not in err
        status, out, err = run(capsys, "read", "--store", store_path, PLAIN, "/memory/n")
        assert (status, out) == (0, "1\n"), err  # reading still works beside it
    finally:
        if repl.stdin is not None:
            repl.stdin.close()
        repl.wait(timeout=30)


def test_a_process_removed_while_listing_is_left_out(store_path, monkeypatch):
    from svit.operators import list_processes

    with ProcessStore.open(store_path) as store:
        listed = store.addresses()
        store.remove(PLAIN)
        monkeypatch.setattr(store, "addresses", lambda: listed)  # listed just before the removal
        listing = list_processes(store, 10)
    assert [entry["address"] for entry in listing["processes"]] == [AGENT] and listing["more"] is False
