"""exec_inbox_item: a handler's activation and the acknowledgement of its inbox item are
one commit, or nothing."""

from __future__ import annotations

import pytest

from svit import Process
from svit.errors import InboxConflict, InvalidPath, ScriptFailed
from svit.store import ProcessStore
from tests.host.scripts import FAIL_ON, RECORD

ADDR = "svit://local/test/handler"


def recorder() -> Process:
    return Process.builder(ADDR).memory("seen", []).library("on_message", RECORD).library("fails", FAIL_ON).build()


def test_the_item_is_handled_and_removed_in_one_version() -> None:
    p = recorder()
    p.enqueue_inbox({"body": "a"})
    p.enqueue_inbox({"body": "b"})
    before = p.version
    activation = p.exec_inbox_item("/lib/on_message", {"body": "a"})
    assert activation.version == before + 1 == p.version
    assert p.read("/memory/seen") == ["a"]
    assert p.read("/inbox") == [{"body": "b"}]
    assert "/inbox" in activation.changed and "/memory/seen" in activation.changed


def test_an_item_that_is_not_the_head_is_refused_and_nothing_runs() -> None:
    p = recorder()
    p.enqueue_inbox({"body": "a"})
    before = (p.version, p.root_hash)
    with pytest.raises(InboxConflict):
        p.exec_inbox_item("/lib/on_message", {"body": "b"})
    with pytest.raises(InboxConflict):
        Process.builder(ADDR).library("on_message", RECORD).build().exec_inbox_item("/lib/on_message", {"body": "a"})
    assert (p.version, p.root_hash) == before


def test_a_failed_handler_leaves_the_item_and_the_memory() -> None:
    p = recorder()
    p.enqueue_inbox({"body": "boom"})
    before = (p.version, p.root_hash)
    with pytest.raises(ScriptFailed):
        p.exec_inbox_item("/lib/fails", {"body": "boom"})
    assert (p.version, p.root_hash) == before
    assert p.inbox_front() == {"body": "boom"}


def test_only_lib_paths_run() -> None:
    p = recorder()
    p.enqueue_inbox({"body": "a"})
    with pytest.raises(InvalidPath):
        p.exec_inbox_item("/memory/seen", {"body": "a"})


def test_a_durable_handle_commits_it_once_and_resume_replays_it(store: ProcessStore) -> None:
    handle = store.create(recorder())
    handle.enqueue_inbox({"body": "a"})
    handle.exec_inbox_item("/lib/on_message", {"body": "a"})
    version = handle.version
    resumed = store.resume(ADDR)
    assert resumed.version == version
    assert resumed.read("/memory/seen") == ["a"]
    assert resumed.read("/inbox") == []
    sources = [t.source for t in resumed.query()]
    assert sources.count("activation") == 1 and "inbox.acknowledge" not in sources
