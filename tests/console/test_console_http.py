"""The console over a running ``svit serve``: every panel (tree, previews, history as of a
version, diffs, mail, sending, running a /lib script, live commits) through the HTTP client."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("textual")
pytest.importorskip("starlette")

from svit import Process
from svit.client import Client
from svit.console.app import ConsoleApp
from svit.console.http_source import HttpSource
from svit.console.panels import ConversationPanel, HistoryPanel, ProcessTree, TextPanel
from svit.console.rendering import diff_renderable
from svit.console.screenshot import svg_text
from svit.store import ProcessStore
from tests.server.served import ADDRESS, Served, Tokens, seed, start_server

BROWSED = "svit://local/srv/browsed"
BUSY = "svit://local/srv/busy"
COUNTER = '(define (main input) (do (write "/memory/count" (+ (read "/memory/count") 1)) (read "/memory/count")))'


def seed_browsed(location: str) -> None:
    with ProcessStore.open(location) as store:
        store.create(Process.builder(BROWSED)
                     .memory("count", 1)
                     .memory("items", list(range(250)))
                     .memory("nested", {"deep": {"leaf": "hello"}})
                     .memory("big", "x" * (100 * 1024))
                     .library("bump", COUNTER, documentation="adds one to count")
                     .build())
        store.create(Process.builder(BUSY).build())
        items = [{"kind": "message", "message_id": f"m{i}", "from": "svit://local/srv/sender", "body": i} for i in range(230)]
        store.resume(BUSY).process.deliver_inbox(items)  # version 1: 230 inbox items in one commit


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    location = str(Path(tmp_path_factory.mktemp("console-serve")) / "store")
    seed(location, ADDRESS)
    seed_browsed(location)
    server = start_server(location, Tokens())
    try:
        yield server
    finally:
        server.stop()


def test_over_http_the_console_runs_scripts_follows_commits_and_shows_every_panel(served: Served) -> None:
    source = HttpSource(served.url, served.tokens.write, ADDRESS)
    app = ConsoleApp(source, poll_seconds=None)

    async def main() -> None:
        async with app.run_test(size=(140, 44)) as pilot:
            await pilot.pause()
            screen = "\n".join(svg_text(app.export_screenshot()))
            assert "unavailable" not in screen and "▼ /" in screen, screen
            assert dict(source.unavailable) == {}
            app.submit("run", "add")
            texts = app.query_one(ConversationPanel).texts
            assert any("/lib/add -> 1 (version 1)" in line for line in texts), texts
            # Another client commits; the stream brings it in with its changed paths.
            with Client(served.url, served.tokens.write) as other:
                other.activate(ADDRESS, "add", None, expected_version=1, client_id="other")
            deadline = time.monotonic() + 15  # the stream brings it within a poll on a quiet machine
            while app.seen_version < 2 and time.monotonic() < deadline:
                app.poll()
                await pilot.pause()
                await asyncio.sleep(0.02)
            assert app.seen_version == 2
            texts = app.query_one(ConversationPanel).texts
            assert any(line.strip().startswith("commit v2 ") and "/memory/count" in line for line in texts), texts
            commit = next(line for line in texts if line.strip().startswith("commit v2 "))
            assert re.fullmatch(r"commit v2 \d\d:\d\d:\d\d activation /lib/add -> 2  /memory/count", commit.strip()), commit
            assert app.query_one(HistoryPanel).versions[:2] == [2, 1]
            app.submit("run", "fail")
            assert any("script_failed" in line for line in app.query_one(ConversationPanel).texts)
            assert app.query_one("#mail", TextPanel).plain.startswith("inbox (not yet handled) (0)\n")

    try:
        asyncio.run(main())
    finally:
        source.close()


def test_the_http_history_is_read_from_the_log_with_times_scripts_and_outputs(served: Served) -> None:
    with Client(served.url, served.tokens.write) as writer:
        for _ in range(2):
            version = writer.process(ADDRESS)["version"]
            writer.activate(ADDRESS, "add", None, expected_version=version, client_id="history")
    source = HttpSource(served.url, served.tokens.read, ADDRESS)
    try:
        head = source.head()
        found: list[Any] = source.history(limit=2)
        assert [c.version for c in found] == [head, head - 1] and all(c.changed for c in found)
        assert all(c.committed_at > 0 and c.script == "/lib/add" and c.output for c in found)
    finally:
        source.close()


def test_a_stream_with_threads_on_a_process_without_a_thread_carries_its_commits(served: Served) -> None:
    """``/thread`` is null until a loop runs: asking for thread events must not end the stream."""
    found: list[tuple[str, Any]] = []
    with Client(served.url, served.tokens.write) as client, Client(served.url, served.tokens.write) as writer:
        head = writer.process(ADDRESS)["version"]
        writer.activate(ADDRESS, "add", None, expected_version=head, client_id="threads")
        for kind, data in client.stream(ADDRESS, head, threads=True, thread_from=0):
            found.append((kind, data["version"]))
            if len(found) == 1:  # the stream has looked for thread events by now: it must go on
                writer.activate(ADDRESS, "add", None, expected_version=head + 1, client_id="threads")
            else:
                break
    assert found == [("commit", head + 1), ("commit", head + 2)]


async def _until(pilot: Any, app: ConsoleApp, version: int) -> None:
    """Poll until the event stream brought ``version`` (within a few seconds on a quiet machine)."""
    deadline = time.monotonic() + 15
    while app.seen_version < version and time.monotonic() < deadline:
        app.poll()
        await pilot.pause()
        await asyncio.sleep(0.02)
    assert app.seen_version >= version


def test_over_http_the_tree_an_older_version_a_diff_and_sending_work(served: Served) -> None:
    source = HttpSource(served.url, served.tokens.write, BROWSED)
    app = ConsoleApp(source, poll_seconds=None)

    async def main() -> None:
        async with app.run_test(size=(140, 44)) as pilot:
            await pilot.pause()
            tree = app.query_one(ProcessTree)
            assert "/memory/items" not in tree.rows  # listed lazily, over HTTP too
            for path in ("/memory", "/memory/nested", "/memory/nested/deep", "/memory/items"):
                tree.rows[path].expand()
                await pilot.pause()
            rows = tree.row_text()
            assert '        leaf  text/plain (5 bytes)  = "hello"' in rows, "\n".join(rows)
            items = [path for path in tree.rows if path.startswith("/memory/items/")]
            assert len(items) == 200 and "/memory/items/200" not in tree.rows
            assert any("… 50 more (first 200 shown)" in row for row in tree.row_text())
            # A big leaf's preview is capped as over a local store, with the same count of bytes left out.
            tree.move_cursor(tree.rows["/memory/big"])
            await pilot.pause()
            preview = app.query_one("#preview", TextPanel).plain
            assert preview.count("x") <= 64 * 1024
            assert preview.rstrip().endswith(f"… {100 * 1024 + 2 - 64 * 1024} more bytes not shown (preview capped at 64 KiB)")
            # Two commits (count 2, then 3), brought back by the event stream.
            app.submit("run", "bump")
            app.submit("run", "bump")
            await _until(pilot, app, 2)
            history = app.query_one(HistoryPanel)
            assert history.versions == [2, 1], history.versions
            assert "count  = 3" in tree.rows["/memory/count"].label.plain
            # Pick version 1 in the history: the tree and preview as of then.
            history.focus()
            history.highlighted = history.versions.index(1)
            await pilot.press("enter")
            await pilot.pause()
            assert app.viewing == 1 and "as of version 1" in app.sub_title
            tree.rows["/memory"].expand()
            await pilot.pause()
            assert "count  = 2" in tree.rows["/memory/count"].label.plain
            tree.move_cursor(tree.rows["/memory/count"])
            await pilot.pause()
            preview = app.query_one("#preview", TextPanel).plain
            assert "(as of version 1)" in preview and preview.rstrip().endswith("2")
            # Mark version 1, diff to version 2.
            history.focus()
            await pilot.press("m")
            history.highlighted = history.versions.index(2)
            await pilot.press("d")
            await pilot.pause()
            diff = app.query_one("#diff", TextPanel).plain
            assert diff.startswith("diff version 1 -> 2: 1 path(s)")
            assert "~ /memory/count\n    before: 2\n    after:  3" in diff
            # Send a message through the input line: it lands in /inbox and in the mail panel.
            await pilot.press("L")
            await pilot.press("s")
            await pilot.press(*"hello over http")
            await pilot.press("enter")
            await pilot.pause()
            assert any(line.strip().startswith("sent hello over http (version 3)") for line in
                       app.query_one(ConversationPanel).texts), app.query_one(ConversationPanel).texts
            with Client(served.url, served.tokens.read) as reader:
                inbox = reader.read(BROWSED, "/inbox")
            assert inbox[-1]["role"] == "user" and inbox[-1]["content"] == [{"text": "hello over http", "type": "text"}]
            await _until(pilot, app, 3)
            mail = app.query_one("#mail", TextPanel).plain
            assert "inbox (not yet handled) (1)\n  user: hello over http" in mail, mail

    try:
        asyncio.run(main())
    finally:
        source.close()


def test_over_http_a_read_token_browses_but_cannot_send(served: Served) -> None:
    source = HttpSource(served.url, served.tokens.read, BROWSED)
    app = ConsoleApp(source, poll_seconds=None)

    async def main() -> None:
        async with app.run_test(size=(140, 44)) as pilot:
            await pilot.pause()
            head = source.head()
            assert "/memory" in app.query_one(ProcessTree).rows
            app.submit("send", "not allowed")
            texts = app.query_one(ConversationPanel).texts
            assert any(line.strip().startswith("error forbidden:") for line in texts), texts
            app.show_version(10_000)  # a version the store never had: said, and the tree stays live
            await pilot.pause()
            assert app.viewing is None
            with Client(served.url, served.tokens.read) as reader:
                assert reader.process(BROWSED)["version"] == head

    try:
        asyncio.run(main())
    finally:
        source.close()


def test_over_http_long_mail_lists_and_long_diffs_say_how_much_was_left_out(served: Served) -> None:
    source = HttpSource(served.url, served.tokens.read, BUSY)
    try:
        mail = source.mail()
        inbox = mail["inbox (not yet handled)"]
        assert len(inbox) == 201 and inbox[0]["message_id"] == "m0" and inbox[199]["message_id"] == "m199"
        assert inbox[200] == "… 30 more, not carried over HTTP"
        assert mail["undeliverable"] == [] and mail["waiting for delivery here"] == []
        source.diff_limit = 5
        found = source.diff(0, 1)
        assert [d.path for d in found[:5]] == [f"/inbox/{i}" for i in range(5)] and all(d.kind == "added" for d in found[:5])
        assert found[5].kind == "more" and found[5].before == 225
        text = diff_renderable(0, 1, found).plain
        assert text.startswith("diff version 0 -> 1: 230 path(s)\n") and text.rstrip().endswith(
            "… 225 more path(s), not carried over HTTP")
        commits = source.history()
        assert [c.version for c in commits] == [1] and commits[0].source == "mailbox.deliver" and commits[0].committed_at > 0
    finally:
        source.close()


def test_a_lost_event_stream_is_named_by_kind_never_by_its_url() -> None:
    """An HTTP error's text carries the request URL, which may hold credentials: the
    console's line names the failure's kind; a server refusal keeps its own words."""
    import time as _time

    import httpx as _httpx

    from svit.client import ClientError
    from svit.console.http_source import HttpSource

    secret_url = "http://operator:hunter2@127.0.0.1:9/v1/events/x"

    class LosingClient:
        def __init__(self, error: Exception) -> None:
            self.error = error

        def process(self, address: str) -> dict[str, int]:
            return {"version": 0}

        def stream(self, *args: object, **kwargs: object) -> object:
            raise self.error

    for error, expected in (
        (_httpx.ConnectError(f"cannot reach {secret_url}"), "event stream ended: ConnectError"),
        (ClientError(403, "forbidden", "this token does not cover the address"),
         "event stream ended: forbidden: this token does not cover the address"),
    ):
        source = HttpSource("http://127.0.0.1:9", "token", "svit://local/x/p", client=LosingClient(error))  # type: ignore[arg-type]
        deadline = _time.monotonic() + 10
        notes = source.conversation()
        while not notes and _time.monotonic() < deadline:
            _time.sleep(0.01)
            notes = source.conversation()
        assert [note.text for note in notes] == [expected]
        assert "hunter2" not in notes[0].text
