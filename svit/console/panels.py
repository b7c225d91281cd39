"""The console's panels (Textual widgets); each draws one thing and reads through a view.

The tree lists a node's children only when it is first expanded (at most
:data:`~svit.console.tree.MAX_CHILDREN`, the rest counted on a last row) and, on a
commit, redraws only the rows whose paths the commit names (and their parents' rows):
every other row keeps its widget node and label untouched.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, ClassVar

from rich.console import RenderableType
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import OptionList, RichLog, Static, Tree
from textual.widgets.option_list import Option
from textual.widgets.tree import TreeNode

from ..errors import SvitError
from .rendering import commit_line, row_label
from .source import Commit, Note, TreeView, item_text, listed_total
from .tree import MAX_CHILDREN

__all__ = ["ConversationPanel", "HistoryPanel", "ProcessTree", "TextPanel", "join", "parent_of"]

VIM_KEYS: list[BindingType] = [
    Binding("j", "cursor_down", "Down", show=False),
    Binding("k", "cursor_up", "Up", show=False),
]


def join(path: str, name: str) -> str:
    return (path.rstrip("/") or "") + "/" + name


def parent_of(path: str) -> str:
    head = path.rstrip("/").rsplit("/", 1)[0]
    return head or "/"


class ProcessTree(Tree[str]):
    """The process tree, browsed lazily through discover, stat and read."""

    BINDINGS: ClassVar[list[BindingType]] = [
        *VIM_KEYS,
        Binding("right,l", "expand", "Expand", show=False),
        Binding("left,h", "collapse", "Collapse", show=False),
        Binding("enter", "toggle_node", "Expand", show=False),
    ]

    def __init__(self, view: TreeView, **kwargs: Any) -> None:
        super().__init__("/", data="/", **kwargs)
        self.view = view
        self.auto_expand = False
        self.rows: dict[str, TreeNode[str]] = {"/": self.root}
        self.listed: set[str] = set()
        #: How often each path's row was redrawn after the first draw (tests and curiosity).
        self.redrawn: Counter[str] = Counter()
        self.show_root = True

    def on_mount(self) -> None:
        self.reload(self.view)

    def reload(self, view: TreeView) -> None:
        """Start over on ``view`` (another version): only the root's listing is read."""
        self.view = view
        self.clear()
        self.rows = {"/": self.root}
        self.listed = set()
        self.root.set_label(row_label("/", self._stat("/")))
        self.list_children("/")
        self.root.expand()

    def _stat(self, path: str) -> dict[str, Any] | None:
        try:
            return self.view.stat(path)
        except SvitError:
            return None

    def _label(self, path: str, name: str) -> tuple[Text, bool]:
        try:
            stat = self.view.stat(path)
        except SvitError as error:
            return Text(f"{name}  (error: {error.code})", style="red"), False
        leaf = stat is not None and stat.get("kind") == "leaf"
        value = None
        if leaf:
            try:
                value = self.view.read(path)
            except SvitError:
                value = None
        return row_label(name, stat, value, leaf=leaf), not leaf and stat is not None

    def list_children(self, path: str) -> None:
        """Read ``path``'s listing (first expansion, or a commit that changed it) and
        bring the rows in line with it, keeping the rows of names still there."""
        node = self.rows.get(path)
        if node is None:
            return
        try:
            names = self.view.discover(path)
        except SvitError as error:
            node.remove_children()
            node.add_leaf(Text(f"(error: {error.code}: {error.detail})", style="red"))
            self.listed.add(path)
            return
        shown = names[:MAX_CHILDREN]
        existing = {child.data: child for child in node.children}
        wanted = [join(path, name) for name in shown]
        for child_path, child in existing.items():
            if child_path not in wanted:
                if child_path is not None:
                    self._forget(child_path)
                child.remove()
        for index, (name, child_path) in enumerate(zip(shown, wanted)):
            if child_path in existing:
                continue
            label, expandable = self._label(child_path, name)
            child = node.add(label, data=child_path, allow_expand=expandable, before=index if index < len(node.children) else None)
            self.rows[child_path] = child
        total = listed_total(names)
        if total > len(shown):
            node.add_leaf(Text(f"… {total - len(shown)} more (first {len(shown)} shown)", style="yellow"))
        self.listed.add(path)

    def _forget(self, path: str) -> None:
        for known in [p for p in self.rows if p == path or p.startswith(path.rstrip("/") + "/")]:
            del self.rows[known]
            self.listed.discard(known)

    def redraw_row(self, path: str) -> None:
        node = self.rows.get(path)
        if node is None:
            return
        name = path.rsplit("/", 1)[-1] or "/"
        label, expandable = self._label(path, name)
        node.set_label(label)
        node.allow_expand = expandable
        self.redrawn[path] += 1
        if path in self.listed:
            self.list_children(path)

    def apply_commit(self, changed: Iterable[str]) -> set[str]:
        """Redraw the rows a commit's changed paths name: each shown path, its shown
        parent, or else its nearest shown ancestor. Returns the paths redrawn."""
        targets: set[str] = set()
        for path in changed:
            probe = path
            while probe not in self.rows and probe != "/":
                probe = parent_of(probe)
            targets.add(probe)
            if probe == path and path != "/" and parent_of(path) in self.rows:
                targets.add(parent_of(path))
        for path in sorted(targets, key=len):
            if path in self.rows:
                self.redraw_row(path)
        return targets

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[str]) -> None:
        path = event.node.data
        if path is not None and path not in self.listed:
            self.list_children(path)

    def action_expand(self) -> None:
        node = self.cursor_node
        if node is not None and node.allow_expand and not node.is_expanded:
            node.expand()

    def action_collapse(self) -> None:
        node = self.cursor_node
        if node is None:
            return
        if node.is_expanded:
            node.collapse()
        elif node.parent is not None:
            self.move_cursor(node.parent)

    def row_text(self) -> list[str]:
        """Every shown row's plain text, top to bottom (what a reader of the screen sees)."""
        out: list[str] = []

        def walk(node: TreeNode[str], depth: int) -> None:
            label = node.label
            out.append("  " * depth + (label.plain if isinstance(label, Text) else str(label)))
            if node.is_expanded:
                for child in node.children:
                    walk(child, depth + 1)

        walk(self.root, 0)
        return out


class HistoryPanel(OptionList):
    """Retained commits, newest first; Enter shows the tree as of one."""

    BINDINGS: ClassVar[list[BindingType]] = [*VIM_KEYS]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commits: dict[int, Commit] = {}
        self.versions: list[int] = []

    def show(self, commits: list[Commit]) -> None:
        """Replace the list with ``commits``."""
        self.commits = {}
        self.add(commits)

    def add(self, commits: list[Commit]) -> None:
        """Merge newer commits in; the newest :data:`MAX_CHILDREN` stay listed."""
        cursor = self.version_at_cursor()
        for commit in commits:
            self.commits[commit.version] = commit
        self.versions = sorted(self.commits, reverse=True)[:MAX_CHILDREN]
        self.commits = {v: self.commits[v] for v in self.versions}
        self.clear_options()
        self.add_options([Option(commit_line(self.commits[v]), id=f"v{v}") for v in self.versions])
        if self.versions:
            self.highlighted = self.versions.index(cursor) if cursor in self.versions else 0

    def version_at_cursor(self) -> int | None:
        if self.highlighted is None or self.highlighted >= len(self.versions):
            return None
        return self.versions[self.highlighted]


class ConversationPanel(RichLog):
    """Inbox, outbox and runtime events as they arrive; each item once."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(wrap=True, markup=False, max_lines=2000, **kwargs)
        self.seen: set[str] = set()
        self.texts: list[str] = []

    STYLES: ClassVar[dict[str, str]] = {"inbox": "green", "outbox": "cyan", "event": "blue", "error": "red", "run": "white"}

    def say(self, kind: str, text: str | Text) -> None:
        line = Text(f"{kind:>6} ", style=self.STYLES.get(kind, "magenta"))
        line.append(text if isinstance(text, Text) else Text(text))
        self.texts.append(line.plain)
        self.write(line)

    def add_notes(self, notes: list[Note]) -> None:
        for note in notes:
            if note.key not in self.seen:
                self.seen.add(note.key)
                self.say(note.kind, note.text)

    def add_commit(self, commit: Commit) -> None:
        self.say("commit", commit_line(commit))


class TextPanel(VerticalScroll):
    """A scrolling panel of one renderable (the preview, the diff, the mail lists)."""

    def __init__(self, placeholder: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._body = Static(Text(placeholder, style="dim"))
        self.plain = placeholder

    def compose(self) -> Any:
        yield self._body

    def show(self, renderable: RenderableType, plain: str) -> None:
        """Draw ``renderable``; ``plain`` is its text, kept for readers and tests."""
        self.plain = plain
        self._body.update(renderable)


def mail_renderable(mail: dict[str, list[Any]]) -> tuple[RenderableType, str]:
    text = Text()
    for name, items in mail.items():
        text.append(f"{name} ({len(items)})\n", style="bold")
        for item in items[:MAX_CHILDREN]:
            text.append("  " + item_text(item) + "\n")
        if len(items) > MAX_CHILDREN:
            text.append(f"  … {len(items) - MAX_CHILDREN} more\n", style="yellow")
    return text, text.plain
