"""``svit console`` driven headless (Textual's pilot), asserting on what the panels draw."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("textual")

from textual.widgets import TabbedContent

from svit import Mount, Process
from svit.console.app import ConsoleApp
from svit.console.launch import writer_on_demand
from svit.console.panels import ConversationPanel, HistoryPanel, ProcessTree, TextPanel
from svit.console.screenshot import svg_text
from svit.console.store_source import StoreSource
from svit.store import ProcessStore

ADDRESS = "svit://local/console/demo"
COUNTER = '(define (main input) (do (write "/memory/count" (+ (read "/memory/count") 1)) (read "/memory/count")))'


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ProcessStore]:
    opened = ProcessStore.open(tmp_path / "store")
    process = (Process.builder(ADDRESS)
               .memory("count", 1)
               .memory("items", list(range(250)))
               .memory("nested", {"deep": {"leaf": "hello"}})
               .memory("other", "untouched")
               .library("bump", COUNTER, documentation="adds one to count")
               .build())
    opened.create(process)
    yield opened
    opened.close()


def run(app: ConsoleApp, body: Callable[[Any], Awaitable[None]]) -> None:
    async def main() -> None:
        async with app.run_test(size=(140, 44)) as pilot:
            await pilot.pause()
            await body(pilot)

    asyncio.run(main())


def node(tree: ProcessTree, path: str) -> Any:
    return tree.rows[path]


async def expand(pilot: Any, tree: ProcessTree, path: str) -> None:
    node(tree, path).expand()
    await pilot.pause()


def test_browsing_a_nested_tree_lists_lazily_and_bounds_each_listing(store: ProcessStore) -> None:
    app = ConsoleApp(StoreSource(store, ADDRESS), poll_seconds=None)

    async def body(pilot: Any) -> None:
        tree = app.query_one(ProcessTree)
        assert "/memory/items" not in tree.rows  # nothing below the root is read yet
        await expand(pilot, tree, "/memory")
        await expand(pilot, tree, "/memory/nested")
        await expand(pilot, tree, "/memory/nested/deep")
        rows = tree.row_text()
        assert '        leaf  text/plain (5 bytes)  = "hello"' in rows, "\n".join(rows)
        assert "/memory/nested/deep/leaf" in tree.rows
        await expand(pilot, tree, "/memory/items")
        items = [path for path in tree.rows if path.startswith("/memory/items/")]
        assert len(items) == 200 and "/memory/items/199" in tree.rows and "/memory/items/200" not in tree.rows
        assert any("… 50 more (first 200 shown)" in row for row in tree.row_text())
        # The keyboard: down arrows move, j/k too; the highlighted row is previewed.
        tree.focus()
        tree.move_cursor(node(tree, "/memory/nested/deep/leaf"))
        await pilot.pause()
        assert '"hello"' in app.query_one("#preview", TextPanel).plain
        await pilot.press("k")
        assert tree.cursor_node is node(tree, "/memory/nested/deep")
        await pilot.press("left")  # collapse
        assert not node(tree, "/memory/nested/deep").is_expanded
        await pilot.press("enter")  # toggles open again
        assert node(tree, "/memory/nested/deep").is_expanded
        screen = "\n".join(svg_text(app.export_screenshot()))
        assert "▼ deep  object (1 entries)" in screen

    run(app, body)


def test_a_live_commit_from_another_thread_redraws_only_the_rows_it_names(store: ProcessStore) -> None:
    source = StoreSource(store, ADDRESS)
    app = ConsoleApp(source, poll_seconds=None)

    async def body(pilot: Any) -> None:
        tree = app.query_one(ProcessTree)
        await expand(pilot, tree, "/memory")
        await expand(pilot, tree, "/memory/nested")
        before = {path: (row, row.label.plain) for path, row in tree.rows.items()}
        writer = store.resume(ADDRESS)  # another handle, as another writer would be
        done = threading.Thread(target=lambda: writer.write("/memory/count", 42))
        done.start()
        done.join()
        app.poll()
        await pilot.pause()
        assert dict(tree.redrawn) == {"/memory/count": 1, "/memory": 1}
        assert "count  = 42" in tree.rows["/memory/count"].label.plain
        for path, (row, label) in before.items():
            assert tree.rows[path] is row  # no row was rebuilt
            if path not in ("/memory/count", "/memory"):
                assert row.label.plain == label
        conversation = app.query_one(ConversationPanel)
        assert any("/memory/count" in line and "v1" in line for line in conversation.texts)
        assert app.query_one(HistoryPanel).versions[0] == 1
        # A new child appears under its shown parent without redrawing its siblings.
        writer.write("/memory/fresh", True)
        app.poll()
        await pilot.pause()
        assert "/memory/fresh" in tree.rows and tree.rows["/memory/other"] is before["/memory/other"][0]
        assert tree.redrawn["/memory/other"] == 0

    run(app, body)


def test_the_tree_follows_commits_on_the_poll_timer(store: ProcessStore) -> None:
    app = ConsoleApp(StoreSource(store, ADDRESS), poll_seconds=0.05)

    async def body(pilot: Any) -> None:
        tree = app.query_one(ProcessTree)
        await expand(pilot, tree, "/memory")
        store.resume(ADDRESS).write("/memory/other", "changed")
        for _ in range(500):  # up to 10 s on a loaded machine; a few polls on a quiet one
            await asyncio.sleep(0.02)
            if "changed" in tree.rows["/memory/other"].label.plain:
                break
        assert '= "changed"' in tree.rows["/memory/other"].label.plain

    run(app, body)


def test_sending_a_message_lands_in_the_inbox(store: ProcessStore) -> None:
    source = StoreSource(store, ADDRESS)
    app = ConsoleApp(source, poll_seconds=None)

    async def body(pilot: Any) -> None:
        await pilot.press("s")
        await pilot.press(*"hello there")
        await pilot.press("enter")
        await pilot.pause()
        inbox = store.resume(ADDRESS).read("/inbox")
        assert [item["content"][0]["text"] for item in inbox] == ["hello there"]
        assert inbox[0]["role"] == "user"
        texts = app.query_one(ConversationPanel).texts
        assert any("inbox" in line and "user: hello there" in line for line in texts)
        assert "hello there" in app.query_one("#mail", TextPanel).plain

    run(app, body)


def test_running_a_lib_script_commits_and_shows_its_output(store: ProcessStore) -> None:
    app = ConsoleApp(StoreSource(store, ADDRESS), poll_seconds=None)

    async def body(pilot: Any) -> None:
        await pilot.press("x")
        await pilot.press(*"bump")
        await pilot.press("enter")
        await pilot.pause()
        assert store.resume(ADDRESS).read("/memory/count") == 2
        texts = app.query_one(ConversationPanel).texts
        assert any("/lib/bump -> 2 (version 1)" in line for line in texts)
        commit = next(line for line in texts if line.split()[:2] == ["commit", "v1"])
        assert "activation /lib/bump -> 2" in commit and "/memory/count" in commit  # script and output from the record
        await pilot.press("x")
        await pilot.press(*"missing")
        await pilot.press("enter")
        await pilot.pause()
        assert any("error" in line and "script_not_found" in line for line in app.query_one(ConversationPanel).texts)

    run(app, body)


def test_a_lib_script_is_previewed_as_highlighted_lisp(store: ProcessStore) -> None:
    app = ConsoleApp(StoreSource(store, ADDRESS), poll_seconds=None)

    async def body(pilot: Any) -> None:
        tree = app.query_one(ProcessTree)
        await expand(pilot, tree, "/lib")
        tree.move_cursor(node(tree, "/lib/bump"))
        await pilot.pause()
        preview = app.query_one("#preview", TextPanel).plain
        assert "adds one to count" in preview and "(define (main input)" in preview
        screen = svg_text(app.export_screenshot())
        assert any("(define (main input)" in line for line in screen), "\n".join(screen)

    run(app, body)


def _three_versions(store: ProcessStore) -> None:
    writer = store.resume(ADDRESS)
    writer.write("/memory/count", 2)            # version 1
    writer.write("/memory/count", 3)            # version 2
    writer.write("/memory/added", {"k": "v"})   # version 3


def test_picking_an_older_version_shows_the_tree_and_previews_as_of_then(store: ProcessStore) -> None:
    _three_versions(store)
    app = ConsoleApp(StoreSource(store, ADDRESS), poll_seconds=None)

    async def body(pilot: Any) -> None:
        history = app.query_one(HistoryPanel)
        assert history.versions == [3, 2, 1]
        starts = [line.split()[:2] for line in app.query_one(ConversationPanel).texts]
        assert starts == [["commit", "v1"], ["commit", "v2"], ["commit", "v3"]]  # the recent commits, oldest first
        history.focus()
        await pilot.press("j", "j", "enter")  # down to version 1, pick it
        await pilot.pause()
        assert app.viewing == 1 and "as of version 1" in app.sub_title
        tree = app.query_one(ProcessTree)
        await expand(pilot, tree, "/memory")
        assert "count  = 2" in tree.rows["/memory/count"].label.plain
        assert "/memory/added" not in tree.rows
        tree.move_cursor(tree.rows["/memory/count"])
        await pilot.pause()
        preview = app.query_one("#preview", TextPanel).plain
        assert "(as of version 1)" in preview and preview.rstrip().endswith("2")
        # A commit while looking at the past leaves the tree as it was, then L goes live.
        store.resume(ADDRESS).write("/memory/count", 9)
        app.poll()
        await pilot.pause()
        assert "count  = 2" in tree.rows["/memory/count"].label.plain and history.versions[0] == 4
        await pilot.press("L")
        await pilot.pause()
        assert app.viewing is None
        await expand(pilot, tree, "/memory")
        assert "count  = 9" in tree.rows["/memory/count"].label.plain and "/memory/added" in tree.rows

    run(app, body)


def test_the_diff_view_compares_two_versions(store: ProcessStore) -> None:
    _three_versions(store)
    app = ConsoleApp(StoreSource(store, ADDRESS), poll_seconds=None)

    async def body(pilot: Any) -> None:
        history = app.query_one(HistoryPanel)
        history.focus()
        await pilot.press("j", "j", "m")  # mark version 1
        await pilot.press("k", "k", "d")  # diff 1 -> 3
        await pilot.pause()
        diff = app.query_one("#diff", TextPanel).plain
        assert diff.startswith("diff version 1 -> 3: 2 path(s)")
        assert "+ /memory/added" in diff and '{"k": "v"}' in diff
        assert "~ /memory/count\n    before: 2\n    after:  3" in diff
        screen = "\n".join(svg_text(app.export_screenshot()))
        assert "+ /memory/added" in screen  # the diff tab is the one shown
        app.marked = None
        await pilot.press("j", "d")  # no mark: the version before the highlighted one
        await pilot.pause()
        assert app.query_one("#diff", TextPanel).plain.startswith("diff version 1 -> 2: 1 path(s)")

    run(app, body)


def test_a_read_only_console_takes_the_lock_only_to_send(tmp_path: Path, store: ProcessStore) -> None:
    location = store.path
    store.close()
    reader = ProcessStore.open(location, read_only=True)
    try:
        source = StoreSource(reader, ADDRESS, writer=writer_on_demand(location, ADDRESS))
        app = ConsoleApp(source, poll_seconds=None)

        async def body(pilot: Any) -> None:
            app.submit("send", "from a reader")
            with ProcessStore.open(location) as writer:  # the lock was let go again
                assert [i["content"][0]["text"] for i in writer.resume(ADDRESS).read("/inbox")] == ["from a reader"]
                app.submit("send", "while held")
                texts = app.query_one(ConversationPanel).texts
                assert any("another process holds the store" in line and "--serve" in line for line in texts), texts
            app.poll()
            await pilot.pause()
            assert "from a reader" in app.query_one("#mail", TextPanel).plain

        run(app, body)
    finally:
        reader.close()


def test_mounts_browse_like_memory_and_an_unattached_one_says_so(tmp_path: Path) -> None:
    with ProcessStore.open(tmp_path / "store") as mounted:
        process = Process.builder(ADDRESS).mount("data", Mount.value("demo", {"shelf": {"jar": "honey"}})).build()
        handle = mounted.create(process)
        app = ConsoleApp(StoreSource(mounted, ADDRESS, handle=handle), poll_seconds=None)

        async def body(pilot: Any) -> None:
            tree = app.query_one(ProcessTree)
            for path in ("/mounts", "/mounts/data", "/mounts/data/shelf"):
                await expand(pilot, tree, path)
            assert '= "honey"' in tree.rows["/mounts/data/shelf/jar"].label.plain
            assert "mount: demo" in tree.rows["/mounts/data"].label.plain

        run(app, body)
        unattached = ConsoleApp(StoreSource(mounted, ADDRESS), poll_seconds=None)

        async def without_provider(pilot: Any) -> None:
            tree = unattached.query_one(ProcessTree)
            await expand(pilot, tree, "/mounts")
            await expand(pilot, tree, "/mounts/data")
            assert any("not attached" in row for row in tree.row_text())
            assert any("(error: mount_unavailable" in row for row in tree.row_text()), tree.row_text()

        run(unattached, without_provider)


SEND_TWO = '(define (main input) (do (send! "svit://local/console/gone" "lost") (send! "svit://local/console/peer" "kept") 0))'


def test_the_mail_panel_shows_pending_and_undeliverable_messages(store: ProcessStore) -> None:
    store.create(Process.builder("svit://local/console/peer").build())
    writer = store.resume(ADDRESS)
    writer.write("/lib/send_two", {"source": SEND_TWO, "documentation": "sends two"})
    writer.exec("/lib/send_two", None)
    store.mailbox.refuse_absent("svit://local/console/gone")
    store.mailbox.settle(writer)
    app = ConsoleApp(StoreSource(store, ADDRESS), poll_seconds=None)

    async def body(pilot: Any) -> None:
        mail = app.query_one("#mail", TextPanel).plain
        undeliverable = mail[mail.index("undeliverable ("):]
        assert undeliverable.startswith("undeliverable (1)")
        assert 'to svit://local/console/gone: "lost" [undeliverable: no such address]' in undeliverable
        pending = mail[mail.index("outbox (pending delivery)"):mail.index("undeliverable (")]
        assert pending.startswith("outbox (pending delivery) (1)") and '"kept"' in pending and '"lost"' not in pending
        app.query_one(TabbedContent).active = "mail-tab"
        await pilot.pause()
        assert any("no such address" in line for line in svg_text(app.export_screenshot()))

    run(app, body)


def test_a_huge_leaf_preview_is_capped(store: ProcessStore) -> None:
    store.resume(ADDRESS).write("/memory/big", "x" * (100 * 1024))
    app = ConsoleApp(StoreSource(store, ADDRESS), poll_seconds=None)

    async def body(pilot: Any) -> None:
        tree = app.query_one(ProcessTree)
        await expand(pilot, tree, "/memory")
        tree.move_cursor(tree.rows["/memory/big"])
        await pilot.pause()
        preview = app.query_one("#preview", TextPanel).plain
        assert len(preview) < 70 * 1024 and preview.count("x") <= 64 * 1024
        assert preview.rstrip().endswith(f"… {100 * 1024 + 2 - 64 * 1024} more bytes not shown (preview capped at 64 KiB)")

    run(app, body)


def test_tab_moves_between_panels_and_q_quits(store: ProcessStore) -> None:
    app = ConsoleApp(StoreSource(store, ADDRESS), poll_seconds=None)

    async def body(pilot: Any) -> None:
        assert isinstance(app.focused, ProcessTree)
        seen = []
        for _ in range(4):
            await pilot.press("tab")
            seen.append(type(app.focused).__name__)
        assert "HistoryPanel" in seen and "ConversationPanel" in seen
        await pilot.press("shift+tab")
        assert type(app.focused).__name__ == seen[-2]
        footer = "\n".join(svg_text(app.export_screenshot()))
        assert "q Quit" in footer and "s Send" in footer and "d Diff" in footer
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running

    run(app, body)
