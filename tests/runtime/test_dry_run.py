"""Dry runs: an activation that runs and is validated in full, reports what it would
commit, and leaves the process exactly as it was."""

from __future__ import annotations

import json

import pytest

from svit import Mount, Ports, Process
from svit.errors import SvitError
from svit.loop.messages import ToolCall
from svit.loop.tools import run_tool
from svit.store import ProcessStore

ADDRESS = "svit://local/t/dry"

BUMP = """
(define (main input)
  (let ((next (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" next)
        (write "/lib/made" (value-map "source" "(define (main input) 1)"))
        (log-info! "bumped" (value-map "count" next))
        (send! "svit://local/t/peer" (value-map "count" next))
        next)))
"""


def counter() -> Process:
    return Process.builder(ADDRESS).memory("count", 1).library("bump", BUMP).build()


def test_a_dry_run_reports_what_it_would_commit_and_changes_nothing():
    p = counter()
    before = p.snapshot()
    a = p.exec("/lib/bump", {"by": 2}, dry_run=True)
    assert a.committed is False
    assert a.output == 3
    assert a.changed == ["/lib/made", "/memory/count", "/system/outbox"]
    assert [m["to"] for m in a.messages] == ["svit://local/t/peer"]
    assert a.logs == [{"message": "bumped", "fields": {"count": 3}}]
    assert a.version == 0 and a.root_hash == p.root_hash
    assert p.snapshot() == before
    # The real run then commits exactly what the dry run reported.
    real = p.exec("/lib/bump", {"by": 2})
    assert real.committed is True
    assert (real.output, real.changed, real.messages) == (a.output, a.changed, a.messages)
    assert real.version == 1 and p.read("/memory/count") == 3


def test_an_inline_dry_run_changes_nothing():
    p = counter()
    before = p.snapshot()
    a = p.exec_inline('(define (main input) (do (write "/memory/count" 9) (remove "/lib/bump") 9))', None, dry_run=True)
    assert (a.output, a.changed, a.committed) == (9, ["/lib/bump", "/memory/count"], False)
    assert p.snapshot() == before


def test_a_failing_dry_run_raises_the_same_error_as_a_real_run():
    p = counter()
    before = p.snapshot()
    with pytest.raises(SvitError) as dry:
        p.exec("/lib/bump", {"by": "two"}, dry_run=True)
    with pytest.raises(SvitError) as real:
        p.exec("/lib/bump", {"by": "two"})
    assert (dry.value.code, dry.value.message) == (real.value.code, real.value.message)
    assert p.snapshot() == before


def test_a_dry_run_is_validated_like_a_commit():
    # A staged script that does not compile fails the dry run as it fails a real run.
    p = counter()
    src = '(define (main input) (write "/lib/bad" (value-map "source" "(define (main input) (nope))")))'
    with pytest.raises(SvitError) as error:
        p.exec_inline(src, None, dry_run=True)
    assert error.value.code == "script_failed" and "nope" in error.value.message


def test_a_dry_run_never_calls_a_port_and_no_safe_helper_can_hide_that():
    calls = []

    def port(value):
        calls.append(value)
        return {"ok": True}

    p = Process.builder(ADDRESS).ports(Ports().port("effect", port)).build()
    for src in (
        '(define (main input) (port-call "effect" 1))',
        '(define (main input) (safe-call (lambda () (port-call "effect" 1))))',
    ):
        with pytest.raises(SvitError) as error:
            p.exec_inline(src, None, dry_run=True)
        assert error.value.code == "script_failed"
        assert "dry run" in error.value.message
    assert calls == []
    assert p.exec_inline('(define (main input) (port-call "effect" 1))', None).committed
    assert calls == [1]


def test_a_dry_run_leaves_mounts_untouched(tmp_path):
    p = Process.builder(ADDRESS).mount("out", Mount.writable_folder(tmp_path)).build()
    a = p.exec_inline('(define (main input) (write "/mounts/out/note.txt" "hello"))', None, dry_run=True)
    assert a.changed == ["/mounts/out/note.txt"]
    assert list(tmp_path.iterdir()) == []


def test_a_dry_run_does_not_involve_the_activation_hooks():
    seen = []

    class Hook:
        def before_activation(self, request):
            seen.append("before")
            return request

        def after_activation(self, event):
            seen.append(event.status)

    p = Process.builder(ADDRESS).memory("count", 1).library("bump", BUMP).hook(Hook()).build()
    p.exec("/lib/bump", {"by": 1}, dry_run=True)
    assert seen == []
    p.exec("/lib/bump", {"by": 1})
    assert seen == ["before", "committed"]


def test_dry_run_must_be_a_boolean():
    p = counter()
    with pytest.raises(SvitError) as error:
        p.exec("/lib/bump", {"by": 1}, dry_run="yes")  # type: ignore[arg-type]
    assert error.value.code == "invalid_value"


def test_a_durable_dry_run_writes_nothing_to_the_store(tmp_path):
    store = ProcessStore.open(str(tmp_path / "store"))
    try:
        h = store.create(counter())
        a = h.exec("/lib/bump", {"by": 5}, dry_run=True)
        assert (a.output, a.committed, h.version) == (6, False, 0)
        h.exec("/lib/bump", {"by": 1})
    finally:
        store.close()
    store = ProcessStore.open(str(tmp_path / "store"))
    try:
        resumed = store.resume(ADDRESS)
        assert resumed.version == 1 and resumed.read("/memory/count") == 2
    finally:
        store.close()


def test_the_exec_tool_takes_dry_run():
    p = counter()
    text, ok = run_tool(p, ToolCall(id="1", name="exec", arguments={"path": "/lib/bump", "input": {"by": 2}, "dry_run": True}))
    assert ok
    result = json.loads(text)
    assert result["dry_run"] is True and result["version"] == 0 and result["output"] == 3
    assert result["changed"] == ["/lib/made", "/memory/count", "/system/outbox"]
    assert p.version == 0
    text, ok = run_tool(p, ToolCall(id="2", name="exec", arguments={"path": "/lib/bump", "input": {"by": 2}}))
    assert ok and "dry_run" not in json.loads(text) and json.loads(text)["version"] == 1
    text, ok = run_tool(p, ToolCall(id="3", name="exec", arguments={"path": "/lib/bump", "dry_run": "no"}))
    assert not ok and text.startswith("error: invalid_tool_arguments:")
