"""``svit repl``: type Svit Lisp forms against a process and see what they do.

A form that changes nothing is evaluated read-only (``evaluate``) and commits no
version; a form that writes, removes, sends or calls a port runs as one activation
(``exec_inline``) and commits one. The form is always tried read-only first: that
attempt is stopped by the first change it asks for, before anything happens (a port is
not called, a message not queued, a mount not written), so running it again as an
activation repeats no effect.

``(define ...)``, ``(macro ...)`` and ``(const ...)`` are kept for the session (not
stored) and run before every later form. Errors show the line typed with a caret under
the column, and the Lisp call stack of a runtime error; never a Python traceback.

On a terminal the line editor is ``prompt_toolkit``: a continuation prompt while a form
is open, Ctrl-C drops the line being typed, Ctrl-D leaves, the history is kept in the
platform user-data directory (``repl_history``), and Tab completes guest function names,
names defined in this session, and paths in string literals (through ``discover``, at
most :data:`MAX_COMPLETIONS`). From a pipe or a file, lines are read plainly.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from .activation import INLINE_NAME, Activation, compile_check, script_filename
from .builtins import runtime_catalogue
from .console import render_tree
from .errors import ReadOnlyEvaluation, ScriptFailed, SvitError
from .lisp.errors import Frame, ReadError
from .lisp.reader import read
from .lisp.syntax import SPECIAL_FORMS
from .prompt_history import kept_history

__all__ = [
    "CONTINUATION",
    "HELP",
    "HISTORY_FILE",
    "MAX_COMPLETIONS",
    "PROMPT",
    "balanced",
    "Completions",
    "Session",
    "complete",
    "completer",
    "history_path",
    "prompt_session",
    "run",
    "run_lines",
    "run_prompt",
]


def balanced(text: str) -> bool:
    """True when ``text`` reads as complete forms (no unclosed list or string)."""
    try:
        read(text)
    except ReadError as error:
        return "unbalanced" not in error.detail and "unterminated" not in error.detail
    return True

PROMPT = "svit> "
CONTINUATION = "  ... "
HISTORY_FILE = "repl_history"
MAX_COMPLETIONS = 200
MISSING_EDITOR = "; no line editing, history or completion: prompt_toolkit is not installed (pip install prompt_toolkit)"
#: Where a form typed at the REPL is, in the messages of the errors it causes.
INPUT_FILE = script_filename(INLINE_NAME)
_LOCATION = re.compile(r"(?P<file>/[^\s:]+\.svit-script)(?::(?P<line>\d+)(?::(?P<column>\d+))?)?: ")
_DEFINITION = re.compile(r"\(\s*(?:define|macro|const)\s+\(?\s*([^\s()\[\]\"';]+)")
_SYMBOL_TAIL = re.compile(r"[^\s()\[\]{}\"';`,]+$")
_KEPT_HEADS = ("define", "macro", "const")

HELP = """Svit REPL: a form that changes nothing is evaluated read-only and commits nothing;
a form that writes, removes, sends or calls a port runs as one activation and commits one version.
  (define ...) (macro ...) (const ...)   kept for this session, not stored
  any other form                          the body of main(input), input null
  :read PATH        print the value at PATH
  :tree [PATH] [N]  draw the tree (default /, depth 2)
  :snapshot FILE    write a snapshot of the process to FILE
  :help             this text
  :quit             leave (also Ctrl-D or end of input)
On a terminal: Tab completes names and "/paths; Ctrl-C drops the line; history is kept."""


@dataclass(frozen=True)
class _Chunk:
    """A piece of what the person typed, placed in the composed source at ``first`` (1-based)."""

    first: int
    lines: tuple[str, ...]
    earlier: bool  # a kept definition rather than the form being evaluated

    def holds(self, line: int) -> bool:
        return self.first <= line < self.first + len(self.lines)


def complete(text: str) -> bool:
    """True when ``text`` is a whole entry: blank, a ``:command``, or complete forms."""
    stripped = text.strip()
    return not stripped or stripped.startswith(":") or balanced(text)


def _head(entry: str) -> str:
    stripped = entry.lstrip()
    if not stripped.startswith("("):
        return ""
    words = stripped[1:].split(None, 1)
    return words[0] if words else ""


class Session:
    """One REPL session over a process: reads entries, prints what they did to ``out``."""

    def __init__(self, process: Any, out: TextIO, *, debug: bool = False) -> None:
        self.process = process
        self.out = out
        self.prelude: list[str] = []
        self.debug = debug

    def say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def defined_names(self) -> list[str]:
        """The names this session's kept definitions introduce."""
        return [m.group(1) for entry in self.prelude for m in _DEFINITION.finditer(entry)]

    # ------------------------------------------------------------------ entries
    def handle(self, text: str) -> bool:
        """Handle one complete entry; False when the session should end."""
        entry = text.strip("\n")
        if not entry.strip():
            return True
        try:
            if entry.strip().startswith(":"):
                return self.command(entry.strip())
            self.evaluate(entry)
        except SvitError as error:
            self.say(f"error: {error.code}: {error.message}")
        except KeyboardInterrupt:
            self.say("; interrupted")
        except Exception as error:  # a bug of the host: one line, never a traceback (unless debugging)
            if self.debug:
                raise
            self.say(f"error: internal_error: {type(error).__name__} (set SVIT_DEBUG=1 to see where)")
        return True

    def command(self, entry: str) -> bool:
        word, _, rest = entry.partition(" ")
        args = rest.split()
        if word in (":quit", ":q", ":exit"):
            return False
        if word == ":help":
            self.say(HELP)
        elif word == ":read":
            self.say(json.dumps(_plain(self.process.read(args[0] if args else "/memory")), ensure_ascii=False, indent=2))
        elif word == ":tree":
            path = args[0] if args else "/"
            try:
                depth = int(args[1]) if len(args) > 1 else 2
            except ValueError:
                self.say("error: depth must be a number")
                return True
            self.say(render_tree(self.process, path, depth))
        elif word == ":snapshot":
            if not args:
                self.say("usage: :snapshot FILE")
            else:
                Path(args[0]).write_bytes(self.process.snapshot())
                self.say(f"; wrote {args[0]} (version {self.process.version})")
        else:
            self.say(f"unknown command {word}; try :help")
        return True

    def _compose(self, entry: str, *, as_main: bool) -> tuple[str, list[_Chunk]]:
        """The kept definitions, then ``entry`` (as ``main``'s body when ``as_main``), each
        on lines of its own starting at column 1, so positions map back to what was typed."""
        parts: list[str] = []
        chunks: list[_Chunk] = []
        line = 1
        for kept in self.prelude:
            chunks.append(_Chunk(line, tuple(kept.split("\n")), True))
            parts.append(kept)
            line += kept.count("\n") + 1
        if as_main:
            parts.append("(define (main input) (do")
            line += 1
        chunks.append(_Chunk(line, tuple(entry.split("\n")), False))
        parts.append(entry)
        if as_main:
            parts.append("))")
        return "\n".join(parts), chunks

    def evaluate(self, entry: str) -> None:
        try:
            read(entry)
        except ReadError as error:
            # Read on its own, so a stray `)` is reported where it was typed.
            span = error.span
            chunk = _Chunk(1, tuple(entry.split("\n")), False)
            self._report(f"error: script_failed: {error.kind}: {error.detail}", [chunk],
                         (span.line, span.column) if span else None, ())
            return
        if _head(entry) in _KEPT_HEADS:
            source, chunks = self._compose(entry, as_main=False)
            try:
                compile_check(INLINE_NAME, source, self.process.limits)
            except SvitError as error:
                self.report(error, chunks)
                return
            self.prelude.append(entry)
            self.say("; kept for this session")
            return
        source, chunks = self._compose(entry, as_main=True)
        try:
            try:
                activation = self.process.evaluate(source, None)
            except ReadOnlyEvaluation:
                # It asked for a change before making any: run it for real, once.
                activation = self.process.exec_inline(source, None)
        except SvitError as error:
            self.report(error, chunks)
            return
        self.show(activation)

    def show(self, activation: Activation) -> None:
        self.say(json.dumps(activation.output, ensure_ascii=False))
        for log in activation.logs:
            self.say(f"; log: {log['message']} {json.dumps(log['fields'], ensure_ascii=False)}")
        for message in activation.messages:
            self.say(f"; message to {message['to']}: {json.dumps(message['body'], ensure_ascii=False)}")
        if activation.committed:
            self.say(f"; version {activation.version} committed ({', '.join(activation.changed) or 'no paths'})")

    # ------------------------------------------------------------------ errors
    def report(self, error: SvitError, chunks: list[_Chunk]) -> None:
        """The error, the typed line it points at with a caret, and the Lisp stack."""
        if not isinstance(error, ScriptFailed):
            self.say(f"error: {error.code}: {error.message}")
            return
        detail = error.detail
        position: tuple[int, int | None] | None = None
        found = _LOCATION.match(detail)
        here = found is not None and found.group("file") == INPUT_FILE
        if found is not None and here:
            detail = detail[found.end():]
            if found.group("line"):
                line = int(found.group("line"))
                column = int(found.group("column")) if found.group("column") else None
                if column is None and error.stack and error.stack[-1].line == line:
                    column = error.stack[-1].column
                position = (line, column)
        kind = f"{error.kind}: " if error.kind not in ("error", "") and not detail.startswith(error.kind) else ""
        self._report(f"error: {error.code}: {kind}{detail}", chunks, position, error.stack if here else ())
        if error.stack and not here:
            self.say("stack (outermost first):")
            for frame in error.stack:
                self.say(f"  {frame}")

    def _report(self, headline: str, chunks: list[_Chunk], position: tuple[int, int | None] | None,
                stack: Iterable[Frame]) -> None:
        self.say(headline)
        if position is not None:
            line, column = position
            chunk = next((c for c in chunks if c.holds(line)), None)
            if chunk is not None:
                self.say(_pointer(chunk, line, column))
        frames = list(stack)
        if frames:
            self.say("stack (outermost first):")
            for frame in frames:
                self.say("  " + _frame_text(frame, chunks))


def _pointer(chunk: _Chunk, line: int, column: int | None) -> str:
    """``  N | text`` and, when the column is known, a caret under it."""
    number = line - chunk.first + 1
    text = chunk.lines[number - 1]
    where = "in a definition kept earlier, " if chunk.earlier else ""
    label = f"{where}line {number}"
    gutter = " " * (len(label) + 1)
    shown = f"  {label} | {text}"
    if column is None or column < 1:
        return shown
    # Tabs stay tabs so the caret lines up with what the terminal shows.
    lead = "".join(ch if ch == "\t" else " " for ch in text[: column - 1])
    return f"{shown}\n  {gutter}| {lead}^"


def _frame_text(frame: Frame, chunks: list[_Chunk]) -> str:
    chunk = next((c for c in chunks if frame.line is not None and c.holds(frame.line)), None)
    name = frame.function
    if chunk is not None and not chunk.earlier and name == "main":
        name = "<input>"
    if chunk is None or frame.line is None:
        return f"in {name}"
    number = frame.line - chunk.first + 1
    where = f"line {number}" + (" of a definition kept earlier" if chunk.earlier else "")
    if frame.column is not None:
        where += f", column {frame.column}"
    return f"in {name} ({where})"


def _plain(value: Any) -> Any:
    if hasattr(value, "source") and hasattr(value, "documentation"):
        return {"documentation": value.documentation, "source": value.source}
    return value


# ---------------------------------------------------------------------- completion
def _open_string(text: str) -> str | None:
    """The contents of the string literal ``text`` ends inside, or None when it ends outside one."""
    inside = False
    escaped = False
    start = 0
    comment = False
    for index, ch in enumerate(text):
        if comment:
            comment = ch != "\n"
        elif inside:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                inside = False
        elif ch == '"':
            inside, start = True, index + 1
        elif ch == ";":
            comment = True
    return text[start:] if inside else None


class Completions:
    """What Tab offers: words (guest functions, special forms, this session's names) and,
    inside a string literal that starts with ``/``, the children of the path typed so far."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.signatures: dict[str, str] = {}
        for entry in runtime_catalogue():
            self.signatures.setdefault(entry["name"], entry.get("signature", ""))
        for name in sorted(SPECIAL_FORMS | {"true", "false", "else"}):
            self.signatures.setdefault(name, "special form")

    def candidates(self, before: str) -> list[tuple[str, int, str]]:
        """``(text, start offset (<= 0), description)`` for the text before the cursor."""
        literal = _open_string(before)
        if literal is not None:
            return self.paths(literal)
        tail = _SYMBOL_TAIL.search(before)
        if tail is None:
            return []
        word = tail.group(0)
        found = [(name, -len(word), "defined in this session") for name in self.session.defined_names()
                 if name.startswith(word)]
        known = {name for name, _, _ in found}
        found += [(name, -len(word), signature) for name, signature in sorted(self.signatures.items())
                  if name.startswith(word) and name not in known]
        return found[:MAX_COMPLETIONS]

    def paths(self, literal: str) -> list[tuple[str, int, str]]:
        if not literal.startswith("/"):
            return []
        parent, _, partial = literal.rpartition("/")
        try:
            names = self.session.process.discover(parent or "/")
        except SvitError:
            return []
        found: list[tuple[str, int, str]] = []
        for name in names:
            if name.startswith(partial):
                found.append((name, -len(partial), (parent or "") + "/" + name))
                if len(found) >= MAX_COMPLETIONS:
                    break
        return found


# ---------------------------------------------------------------------- reading lines
def history_path() -> Path:
    """``repl_history`` in the platform user-data directory (beside the default store)."""
    import platformdirs  # noqa: PLC0415 - only an interactive session keeps a history

    return Path(platformdirs.user_data_dir("svit", appauthor=False)) / HISTORY_FILE


def completer(session: Session) -> Any:
    """:class:`Completions` as a ``prompt_toolkit`` completer."""
    from prompt_toolkit.completion import Completer, Completion  # noqa: PLC0415 - only on a terminal

    completions = Completions(session)

    class _Completer(Completer):
        def get_completions(self, document: Any, complete_event: Any) -> Iterator[Completion]:
            for text, start, meta in completions.candidates(document.text_before_cursor):
                yield Completion(text, start_position=start, display_meta=meta)

    return _Completer()


def prompt_session(session: Session, history: Path | None, *, input: Any = None, output: Any = None) -> Any:
    """A ``prompt_toolkit`` prompt: Enter submits a complete entry and opens a new line in
    an unfinished one (shown with the continuation prompt); Tab completes."""
    from prompt_toolkit import PromptSession  # noqa: PLC0415 - only on a terminal
    from prompt_toolkit.key_binding import KeyBindings  # noqa: PLC0415 - as above

    keys = KeyBindings()

    @keys.add("enter")
    def _enter(event: Any) -> None:
        buffer = event.current_buffer
        if complete(buffer.text):
            buffer.validate_and_handle()
        else:
            buffer.insert_text("\n")

    return PromptSession(
        PROMPT, multiline=True, prompt_continuation=CONTINUATION, history=kept_history(history), completer=completer(session),
        complete_while_typing=False, key_bindings=keys, input=input, output=output,
    )


def run_prompt(session: Session, prompter: Any) -> None:
    """Prompt until Ctrl-D or ``:quit``; Ctrl-C drops the line being typed."""
    while True:
        try:
            text: str = prompter.prompt()
        except KeyboardInterrupt:
            continue
        except EOFError:
            return
        if not session.handle(text):
            return


def run_lines(session: Session, lines: Iterable[str], prompt: TextIO | None = None) -> None:
    """Join plain lines until each entry is complete (``prompt``: where to show prompts)."""
    buffer: list[str] = []

    def show(text: str) -> None:
        if prompt is not None:
            prompt.write(text)
            prompt.flush()

    show(PROMPT)
    for line in lines:
        buffer.append(line.rstrip("\r\n"))
        text = "\n".join(buffer)
        if complete(text):
            buffer = []
            if not session.handle(text):
                return
            show(PROMPT)
        else:
            show(CONTINUATION)


def run(process: Any, stdin: TextIO, stdout: TextIO) -> None:
    """``svit repl``: the line editor on a terminal, plain lines from anything else."""
    session = Session(process, stdout, debug=os.environ.get("SVIT_DEBUG") == "1")
    if not (stdin.isatty() and stdout.isatty()):
        run_lines(session, stdin)
        return
    session.say(f"Svit REPL on {process.address} (:help for commands, Ctrl-D to leave)")
    try:
        prompter = prompt_session(session, history_path())
    except ImportError:
        session.say(MISSING_EDITOR)
        run_lines(session, _typed(stdin), stdout)
        return
    run_prompt(session, prompter)


def _typed(stdin: TextIO) -> Iterator[str]:
    while True:
        line = stdin.readline()
        if not line:
            return
        yield line
