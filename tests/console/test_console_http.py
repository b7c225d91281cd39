"""The console over a running ``svit serve``: live commits, history and running a /lib script;
the panels HTTP has no route for say so."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("textual")
pytest.importorskip("starlette")

from svit.client import Client
from svit.console.app import ConsoleApp
from svit.console.http_source import HTTP_UNAVAILABLE, HttpSource
from svit.console.panels import ConversationPanel, HistoryPanel, TextPanel
from svit.console.screenshot import svg_text
from tests.server.served import ADDRESS, Served, Tokens, seed, start_server


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    location = str(Path(tmp_path_factory.mktemp("console-serve")) / "store")
    seed(location, ADDRESS)
    server = start_server(location, Tokens())
    try:
        yield server
    finally:
        server.stop()


def test_over_http_the_console_runs_scripts_follows_commits_and_names_what_it_cannot_show(served: Served) -> None:
    source = HttpSource(served.url, served.tokens.write, ADDRESS)
    app = ConsoleApp(source, poll_seconds=None)

    async def main() -> None:
        async with app.run_test(size=(140, 44)) as pilot:
            await pilot.pause()
            screen = "\n".join(svg_text(app.export_screenshot()))
            assert "tree and preview unavailable: svit serve has no" in screen, screen
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
            assert app.query_one(HistoryPanel).versions[:2] == [2, 1]
            app.submit("run", "fail")
            assert any("script_failed" in line for line in app.query_one(ConversationPanel).texts)
            await pilot.press("s")  # sending needs the inbox: not over HTTP
            await pilot.pause()
            assert "send" in source.unavailable
            assert app.query_one("#mail", TextPanel).plain == f"unavailable here: {HTTP_UNAVAILABLE['mail']}"

    try:
        asyncio.run(main())
    finally:
        source.close()


def test_the_http_history_is_read_from_the_event_stream(served: Served) -> None:
    with Client(served.url, served.tokens.write) as writer:
        for _ in range(2):
            version = writer.process(ADDRESS)["version"]
            writer.activate(ADDRESS, "add", None, expected_version=version, client_id="history")
    source = HttpSource(served.url, served.tokens.read, ADDRESS)
    try:
        head = source.head()
        found: list[Any] = source.history(limit=2)
        assert [c.version for c in found] == [head, head - 1] and all(c.changed for c in found)
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
