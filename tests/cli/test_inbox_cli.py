"""``svit inbox``: pending and set-aside items, ``retry`` and ``drop``, as text or JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from svit import Message, Process
from svit.cli import main
from svit.loop import LoopOptions, ReasonerFailed, run_next_turn
from svit.reasoners import ScriptedReasoner
from svit.store import ProcessStore

ADDRESS = "svit://local/tests/inbox-cli"
NOW = 2_000_000_000.0  # 2033-05-18T03:33:20Z


def broken(conversation: Any) -> str:
    raise ReasonerFailed("model provider returned HTTP 400: bad request", status=400, retryable=False)


def flaky(conversation: Any) -> str:
    raise ReasonerFailed("model provider returned HTTP 429: slow down", status=429)


@pytest.fixture()
def prepared(tmp_path: Path) -> tuple[str, list[Message]]:
    """A store whose process has one set-aside item, a failing head and one more pending item."""
    path = str(tmp_path / "store")
    store = ProcessStore.open(path)
    handle = store.create(Process.builder(ADDRESS).build())
    sent = [Message.user(text) for text in ("bad", "flaky", "later")]
    for message in sent:
        handle.enqueue_inbox(message.to_json())
    options = LoopOptions().max_attempts(3).retry_backoff(30, 60)
    assert run_next_turn(handle, ScriptedReasoner([broken]), options, now=NOW).kind == "set_aside"
    assert run_next_turn(handle, ScriptedReasoner([flaky]), options, now=NOW).kind == "retry"
    store.close()
    return path, sent


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_listing_as_text_and_json(prepared, capsys):
    path, sent = prepared
    status, out, err = run(capsys, "inbox", "--store", path, ADDRESS)
    assert status == 0, err
    lines = out.splitlines()
    assert lines[1:] == [
        "pending (2):",
        f"  {sent[1].id}  attempts 1, retry at 2033-05-18T03:33:50Z: reasoner_failed (HTTP 429): "
        "reasoner request failed: model provider returned HTTP 429: slow down",
        f"  {sent[2].id}",
        "set aside (1):",
        f"  {sent[0].id}  attempts 1, set aside 2033-05-18T03:33:20Z: reasoner_failed (HTTP 400), not retryable: "
        "reasoner request failed: model provider returned HTTP 400: bad request",
    ]
    assert lines[0].startswith(f"{ADDRESS} at version ")
    status, out, _ = run(capsys, "inbox", "--store", path, "--json", ADDRESS)
    report = json.loads(out)
    assert [p["id"] for p in report["pending"]] == [sent[1].id, sent[2].id]
    assert report["pending"][0]["attempts"] == 1 and report["pending"][0]["retry_at"] == NOW + 30
    assert report["set_aside"][0]["item"] == sent[0].to_json()
    assert report["set_aside"][0]["error"]["status"] == 400


def test_retry_and_drop_each_commit_once_and_say_so(prepared, capsys):
    path, sent = prepared
    status, out, _ = run(capsys, "inbox", "--store", path, "--json", "retry", ADDRESS, sent[0].id)
    assert status == 0
    record = json.loads(out)
    assert (record["action"], record["id"], record["committed"]) == ("retry", sent[0].id, True)
    status, out, _ = run(capsys, "inbox", "--store", path, "--json", ADDRESS)
    report = json.loads(out)
    assert [p["id"] for p in report["pending"]] == [sent[1].id, sent[2].id, sent[0].id] and report["set_aside"] == []
    version = report["version"]

    # It is no longer set aside: dropping it is refused, naming it.
    status, out, err = run(capsys, "inbox", "--store", path, "drop", ADDRESS, sent[0].id)
    assert status == 1 and out == ""
    assert err == f"svit: set_aside_not_found: no set-aside inbox item with that id: {sent[0].id} " \
                  "(svit inbox ADDR lists the set-aside items)\n"
    status, out, _ = run(capsys, "log", "--store", path, ADDRESS)
    entries = json.loads(out)
    assert entries[0]["source"] == "inbox.retry" and entries[0]["version"] == version  # newest first
    assert entries[0]["touched_paths"] == ["/inbox", "/thread"]


def test_drop_removes_the_item_for_good(prepared, capsys):
    path, sent = prepared
    status, out, _ = run(capsys, "inbox", "--store", path, "drop", ADDRESS, sent[0].id)
    assert status == 0 and out.startswith(f"{sent[0].id}: dropped (version ")
    status, out, _ = run(capsys, "inbox", "--store", path, "--json", ADDRESS)
    assert json.loads(out)["set_aside"] == []
    status, out, _ = run(capsys, "log", "--store", path, ADDRESS)
    assert json.loads(out)[0]["source"] == "inbox.drop"  # newest first


def test_usage_and_unknown_names_are_clear(prepared, capsys):
    path, _ = prepared
    assert run(capsys, "inbox", "--store", path, "retry", ADDRESS) == (2, "", "svit: usage: svit inbox retry ADDR ID\n")
    status, _, err = run(capsys, "inbox", "--store", path, ADDRESS, "extra")
    assert status == 2 and err == "svit: usage: svit inbox ADDR, or svit inbox retry|drop ADDR ID\n"
    status, _, err = run(capsys, "inbox", "--store", path, "retry", ADDRESS, "no-such-id")
    assert status == 1 and err.startswith("svit: set_aside_not_found: ")
    status, _, err = run(capsys, "inbox", "--store", path, "svit://local/tests/nobody")
    assert status == 1 and err.startswith("svit: persistence_not_found") and "Traceback" not in err
