"""``svit console``: a terminal console on one process (Textual; the ``console`` extra).

Panels: the tree (lazy, bounded), a preview / diff / mail area, the conversation
(inbox, outbox, runtime events and commits, live) and the history of versions. A poll
asks the source for commits above the last one seen and hands each commit's changed
paths to the tree, which redraws only those rows. Picking a version in the history shows
the tree and previews as of then (``L`` returns to live); ``m`` marks a version and ``d``
shows the diff from it (default: the version before) to the highlighted one. ``s``
sends a message to ``/inbox``; ``x`` runs a ``/lib`` script.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.widgets import Footer, Header, Input, OptionList, Static, TabbedContent, TabPane, Tree

from ..errors import SvitError
from ..values import from_json_text
from .panels import ConversationPanel, HistoryPanel, ProcessTree, TextPanel, mail_renderable
from .rendering import diff_renderable, preview_renderable
from .source import ConsoleSource, TreeView, listed_total

__all__ = ["POLL_SECONDS", "RECENT_COMMITS", "ConsoleApp"]

POLL_SECONDS = 0.5
#: The newest commits the conversation starts with.
RECENT_COMMITS = 10

CSS = """
#top { height: 2fr; }
#bottom { height: 1fr; min-height: 8; }
#tree, #tree-off { width: 40%; border: round $primary; }
#right { width: 60%; }
#conversation { width: 2fr; border: round $secondary; }
#history, #history-off { width: 1fr; border: round $secondary; }
#command { dock: bottom; display: none; }
#command.open { display: block; }
.off { color: $warning; padding: 1 2; }
"""


class ConsoleApp(App[None]):
    """The console on one :class:`~svit.console.source.ConsoleSource`."""

    CSS = CSS
    TITLE = "svit console"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("tab", "focus_next", "Next panel", show=False),
        Binding("shift+tab", "focus_previous", "Previous panel", show=False),
        Binding("s", "open_command('send')", "Send"),
        Binding("x", "open_command('run')", "Run /lib"),
        Binding("m", "mark", "Mark"),
        Binding("d", "diff", "Diff"),
        Binding("L", "live", "Live"),
        Binding("r", "reload", "Reload"),
        Binding("escape", "close_command", "Cancel", show=False),
    ]

    def __init__(self, source: ConsoleSource, *, poll_seconds: float | None = POLL_SECONDS) -> None:
        super().__init__()
        self.source = source
        self.poll_seconds = poll_seconds
        self.seen_version = source.head()
        self.viewing: int | None = None  # None: live
        self.marked: int | None = None
        self.command_mode = "send"
        self.selected = "/"

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        missing = self.source.unavailable
        yield Header()
        with Horizontal(id="top"):
            if "tree" in missing:
                yield Static(Text(f"tree and preview unavailable: {missing['tree']}"), id="tree-off", classes="off")
            else:
                yield ProcessTree(self.source.view(), id="tree")
            with TabbedContent(id="right"):
                with TabPane("Preview", id="preview-tab"):
                    yield TextPanel(self._off("tree") or "select a node", id="preview")
                with TabPane("Diff", id="diff-tab"):
                    yield TextPanel(self._off("diff") or "m marks a version in the history, d shows the diff", id="diff")
                with TabPane("Mail", id="mail-tab"):
                    yield TextPanel(self._off("mail") or "", id="mail")
        with Horizontal(id="bottom"):
            yield ConversationPanel(id="conversation")
            if "history" in missing:
                yield Static(Text(f"history unavailable: {missing['history']}"), id="history-off", classes="off")
            else:
                yield HistoryPanel(id="history")
        yield Input(id="command")
        yield Footer()

    def _off(self, feature: str) -> str:
        reason = self.source.unavailable.get(feature)
        return f"unavailable here: {reason}" if reason else ""

    def on_mount(self) -> None:
        self._set_title()
        conversation = self.query_one(ConversationPanel)
        conversation.border_title = "conversation and events"
        if "history" not in self.source.unavailable:
            history = self.query_one(HistoryPanel)
            history.border_title = "history"
            history.border_subtitle = "Enter: as of · m mark · d diff · L live"
            commits = self.source.history()
            history.show(commits)
            for commit in reversed(commits[:RECENT_COMMITS]):
                conversation.add_commit(commit)
        if "tree" not in self.source.unavailable:
            self.query_one(ProcessTree).border_title = "tree"
            self.query_one(ProcessTree).border_subtitle = "j/k move · Enter/→ open · ← close"
            self.query_one(ProcessTree).focus()
        self.refresh_mail()
        conversation.add_notes(self.source.conversation())
        if self.poll_seconds:
            self.set_interval(self.poll_seconds, self.poll)

    def _set_title(self) -> None:
        where = "live" if self.viewing is None else f"as of version {self.viewing}"
        self.sub_title = f"{self.source.address}  v{self.seen_version}  ({where})"

    # ------------------------------------------------------------------ live updates
    def poll(self) -> None:
        """Take the commits made since the last poll and redraw what they name."""
        try:
            conversation = self.query_one(ConversationPanel)
        except NoMatches:  # the timer fired while the app is closing
            return
        try:
            commits = self.source.commits_after(self.seen_version)
            notes = self.source.conversation()
        except SvitError as error:
            conversation.say("error", f"{error.code}: {error.detail}")
            return
        conversation.add_notes(notes)
        if not commits:
            return
        changed: set[str] = set()
        for commit in commits:
            conversation.add_commit(commit)
            changed.update(commit.changed)
        self.seen_version = max(c.version for c in commits)
        if "history" not in self.source.unavailable:
            self.query_one(HistoryPanel).add(commits)
        if self.viewing is None and "tree" not in self.source.unavailable:
            tree = self.query_one(ProcessTree)
            tree.view = self.source.view()
            tree.apply_commit(changed)
            if any(_related(self.selected, path) for path in changed):
                self.show_preview(self.selected)
        if any(path in ("/", "/inbox", "/system", "/system/outbox", "/thread") or path.startswith(("/inbox/", "/system/outbox/",
               "/thread/turns")) for path in changed):
            self.refresh_mail()
        self._set_title()

    # ------------------------------------------------------------------ panels
    def current_view(self) -> TreeView:
        return self.source.view(self.viewing)

    def show_preview(self, path: str) -> None:
        self.selected = path
        panel = self.query_one("#preview", TextPanel)
        try:
            view = self.current_view()
            stat = view.stat(path)
            value = view.read(path) if stat is not None and stat.get("kind") == "leaf" else _bounded_read(view, path, stat)
        except SvitError as error:
            panel.show(Text(f"{path}: {error.code}: {error.detail}", style="red"), f"{path}: {error.code}")
            return
        renderable = preview_renderable(path, stat, value, version=self.viewing)
        panel.show(renderable, _plain_of(renderable))

    def refresh_mail(self) -> None:
        if "mail" in self.source.unavailable:
            return
        try:
            renderable, plain = mail_renderable(self.source.mail())
        except SvitError as error:
            renderable, plain = Text(f"{error.code}: {error.detail}", style="red"), error.code
        self.query_one("#mail", TextPanel).show(renderable, plain)

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[str]) -> None:
        if event.node.data is not None:
            self.show_preview(event.node.data)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option_id and event.option_id.startswith("v"):
            self.show_version(int(event.option_id[1:]))

    def show_version(self, version: int | None) -> None:
        """Show the tree and previews as of ``version`` (None: live)."""
        if version is not None and version != self.source.head() and "at" in self.source.unavailable:
            self.notify(f"cannot show version {version}: {self.source.unavailable['at']}", severity="warning")
            return
        self.viewing = None if version is None or version == self.source.head() else version
        if "tree" not in self.source.unavailable:
            try:
                self.query_one(ProcessTree).reload(self.current_view())
            except SvitError as error:
                self.notify(f"{error.code}: {error.detail}", severity="error")
                self.viewing = None
                return
            self.show_preview(self.selected)
        self._set_title()

    # ------------------------------------------------------------------ actions
    def action_live(self) -> None:
        self.show_version(None)

    def action_reload(self) -> None:
        self.show_version(self.viewing)

    def action_mark(self) -> None:
        if "history" in self.source.unavailable:
            return
        self.marked = self.query_one(HistoryPanel).version_at_cursor()
        self.notify(f"marked version {self.marked}")

    def action_diff(self) -> None:
        if "diff" in self.source.unavailable:
            self.notify(self._off("diff"), severity="warning")
            return
        history = self.query_one(HistoryPanel)
        after = history.version_at_cursor() or self.source.head()
        before = self.marked if self.marked is not None and self.marked != after else max(0, after - 1)
        self.show_diff(min(before, after), max(before, after))

    def show_diff(self, before: int, after: int) -> None:
        panel = self.query_one("#diff", TextPanel)
        try:
            differences = self.source.diff(before, after)
        except SvitError as error:
            panel.show(Text(f"{error.code}: {error.detail}", style="red"), error.code)
        else:
            renderable = diff_renderable(before, after, differences)
            panel.show(renderable, renderable.plain if isinstance(renderable, Text) else "")
        self.query_one(TabbedContent).active = "diff-tab"

    def action_open_command(self, mode: str) -> None:
        if mode in self.source.unavailable:
            self.notify(self._off(mode), severity="warning")
            return
        self.command_mode = mode
        command = self.query_one("#command", Input)
        command.placeholder = "message for /inbox (Enter sends, Esc cancels)" if mode == "send" \
            else "NAME [INPUT JSON]: runs /lib/NAME (Enter runs, Esc cancels)"
        command.value = ""
        command.add_class("open")
        command.focus()

    def action_close_command(self) -> None:
        command = self.query_one("#command", Input)
        command.remove_class("open")
        if "tree" not in self.source.unavailable:
            self.query_one(ProcessTree).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        self.action_close_command()
        if text:
            self.submit(self.command_mode, text)

    def submit(self, mode: str, text: str) -> None:
        """Send ``text`` to the inbox, or run ``NAME [JSON]``; the outcome goes to the conversation."""
        conversation = self.query_one(ConversationPanel)
        try:
            if mode == "send":
                version = self.source.send(text)
                conversation.say("sent", f"{text} (version {version})")
            else:
                name, _, raw = text.partition(" ")
                conversation.say("run", self.source.run(name, from_json_text(raw) if raw.strip() else None))
        except SvitError as error:
            conversation.say("error", f"{error.code}: {error.detail}")
        self.poll()


def _related(a: str, b: str) -> bool:
    """True when one path is the other or below it."""
    a, b = a.rstrip("/") or "/", b.rstrip("/") or "/"
    return a == b or a == "/" or b == "/" or a.startswith(b + "/") or b.startswith(a + "/")


def _bounded_read(view: TreeView, path: str, stat: dict[str, Any] | None) -> Any:
    """A directory's preview: its child names (bounded), never the whole subtree."""
    if stat is None:
        return None
    names = view.discover(path)
    shown, total = names[:200], listed_total(names)
    return {"children": shown, **({"more": total - len(shown)} if total > len(shown) else {})}


def _plain_of(renderable: Any) -> str:
    parts = getattr(renderable, "renderables", [renderable])
    out = []
    for part in parts:
        if isinstance(part, Text):
            out.append(part.plain)
        elif hasattr(part, "code"):
            out.append(part.code)
    return "\n".join(out)
