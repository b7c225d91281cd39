"""What a person sees: a bounded tree view of a process and an interactive REPL.

Both work on anything with the process host API (an in-memory :class:`Process` or a
durable handle). Neither walks a mount or the whole tree unless asked to.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TextIO

from .activation import compile_check
from .errors import SvitError
from .lisp.errors import ReadError
from .lisp.reader import read
from .paths import Segments, split_mount

__all__ = ["HELP", "MAX_CHILDREN", "PREVIEW", "Repl", "balanced", "render_tree"]

MAX_CHILDREN = 200
PREVIEW = 60


def _mount_of(path: str) -> tuple[str, Segments] | None:
    """``(mount name, rest)`` of a path below ``/mounts/<name>``; None otherwise (or unparseable)."""
    try:
        return split_mount(path)
    except SvitError:
        return None


def _preview(value: Any, width: int = PREVIEW) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def _describe(stat: dict[str, Any] | None) -> str:
    if stat is None:
        return "(absent)"
    facts = stat.get("facts") or {}
    if stat.get("mount") is not None and stat.get("path") == "/":
        attached = "attached" if stat.get("attached") else "not attached"
        return f"[mount: {stat.get('source')}, {stat.get('locality')}, {stat.get('access')}, {attached}]"
    content = facts.get("content")
    if "entries" in facts:
        return f"{content} ({facts['entries']} entries)"
    if "bytes" in facts:
        return f"{content} ({facts['bytes']} bytes)"
    return "" if content == "scalar" else str(content or stat.get("kind"))


def render_tree(process: Any, path: str = "/", depth: int = 2, *, max_children: int = MAX_CHILDREN) -> str:
    """The subtree at ``path`` as indented lines: kinds, sizes, short previews.

    A mount is shown by its descriptor and only walked when ``path`` is inside it.
    """
    lines: list[str] = []
    root_stat = process.stat(path)
    label = path if path not in ("", "/") else "/"
    lines.append(f"{label}  {_describe(root_stat)}")
    inside_mount = _mount_of(path) is not None

    def walk(node_path: str, level: int, indent: str) -> None:
        if level >= depth:
            return
        try:
            names = process.discover(node_path)
        except SvitError:
            return
        shown = names[:max_children]
        for index, name in enumerate(shown):
            child = (node_path.rstrip("/") or "") + "/" + name
            last = index == len(shown) - 1 and len(names) <= max_children
            branch = "└── " if last else "├── "
            try:
                stat = process.stat(child)
            except SvitError as error:
                lines.append(f"{indent}{branch}{name}  (error: {error.code})")
                continue
            child_mount = _mount_of(child)
            is_mount_root = child_mount is not None and not child_mount[1]
            text = f"{indent}{branch}{name}  {_describe(stat)}"
            if stat is not None and stat.get("kind") == "leaf":
                try:
                    value = process.read(child)
                except SvitError:
                    value = None
                if not isinstance(value, dict):
                    shown_value = getattr(value, "source", value)
                    text = text.rstrip() + f"  = {_preview(shown_value)}"
            lines.append(text)
            if stat is not None and stat.get("kind") == "directory" and (not is_mount_root or inside_mount):
                walk(child, level + 1, indent + ("    " if last else "│   "))
        if len(names) > max_children:
            lines.append(f"{indent}└── … {len(names) - max_children} more")

    if root_stat is not None and root_stat.get("kind") == "directory":
        walk(path if path not in ("",) else "/", 0, "")
    return "\n".join(lines)


HELP = """Svit REPL: each form runs as one activation and commits one version.
  (define ...) (macro ...) (const ...)   kept for this session, not stored
  any other form                          run as main(input); prints output and version
  :read PATH        print the value at PATH
  :tree [PATH] [N]  draw the tree (default /, depth 2)
  :snapshot FILE    write a snapshot of the process to FILE
  :help             this text
  :quit             leave (also end of input)"""


def balanced(text: str) -> bool:
    """True when ``text`` reads as complete forms (no unclosed list or string)."""
    try:
        read(text)
    except ReadError as error:
        return "unbalanced" not in error.detail and "unterminated" not in error.detail
    return True


class Repl:
    """Reads forms, runs each as an inline activation, prints results."""

    def __init__(self, process: Any, out: TextIO, *, write_file: Callable[[str, bytes], None] | None = None) -> None:
        self.process = process
        self.out = out
        self.prelude: list[str] = []
        self.write_file = write_file or _write_file

    def say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def handle(self, text: str) -> bool:
        """Handle one complete entry; returns False when the session should end."""
        entry = text.strip()
        if not entry:
            return True
        if entry.startswith(":"):
            return self.command(entry)
        return self.evaluate(entry)

    def command(self, entry: str) -> bool:
        word, _, rest = entry.partition(" ")
        args = rest.split()
        try:
            if word in (":quit", ":q", ":exit"):
                return False
            if word == ":help":
                self.say(HELP)
            elif word == ":read":
                self.say(json.dumps(_plain(self.process.read(args[0] if args else "/memory")), ensure_ascii=False, indent=2))
            elif word == ":tree":
                path = args[0] if args else "/"
                depth = int(args[1]) if len(args) > 1 else 2
                self.say(render_tree(self.process, path, depth))
            elif word == ":snapshot":
                if not args:
                    self.say("usage: :snapshot FILE")
                else:
                    self.write_file(args[0], self.process.snapshot())
                    self.say(f"; wrote {args[0]} (version {self.process.version})")
            else:
                self.say(f"unknown command {word}; try :help")
        except SvitError as error:
            self.say(f"error: {error.code}: {error.message}")
        except ValueError:
            self.say("error: depth must be a number")
        return True

    def evaluate(self, entry: str) -> bool:
        prelude = "\n".join(self.prelude)
        head = entry.lstrip("(").split(None, 1)[0] if entry.startswith("(") else ""
        try:
            if head in ("define", "macro", "const"):
                compile_check("<inline>", prelude + "\n" + entry, self.process.limits)
                self.prelude.append(entry)
                self.say("; kept for this session")
                return True
            source = f"{prelude}\n(define (main input)\n{entry}\n)"
            activation = self.process.exec_inline(source, None)
            self.say(json.dumps(activation.output, ensure_ascii=False))
            for log in activation.logs:
                self.say(f"; log: {log['message']} {json.dumps(log['fields'], ensure_ascii=False)}")
            self.say(f"; version {activation.version}")
        except SvitError as error:
            self.say(f"error: {error.code}: {error.message}")
        return True

    def run(self, lines: Any, prompt: Callable[[str], None] | None = None) -> None:
        """Consume lines (an iterator), joining them until each entry is complete."""
        buffer: list[str] = []
        if prompt:
            prompt("svit> ")
        for line in lines:
            buffer.append(line.rstrip("\n"))
            text = "\n".join(buffer)
            if text.strip().startswith(":") or balanced(text):
                buffer = []
                if not self.handle(text):
                    return
                if prompt:
                    prompt("svit> ")
            elif prompt:
                prompt("  ... ")


def _plain(value: Any) -> Any:
    if hasattr(value, "source") and hasattr(value, "documentation"):
        return {"documentation": value.documentation, "source": value.source}
    return value


def _write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
