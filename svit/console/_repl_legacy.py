"""The line REPL of ``svit repl``: each form runs as one inline activation."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TextIO

from ..activation import compile_check
from ..errors import SvitError
from ..lisp.errors import ReadError
from ..lisp.reader import read
from .tree import render_tree

__all__ = ["HELP", "Repl", "balanced"]


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
