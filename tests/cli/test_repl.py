"""``svit repl`` driven through prompt_toolkit's pipe input, asserting on what it prints.

The screen (prompts, continuation prompts) is rendered by a VT100 output into a string;
what the REPL says about each entry goes to its own stream.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.data_structures import Size
from prompt_toolkit.document import Document
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output.vt100 import Vt100_Output

from svit import Ports, Process
from svit.repl import CONTINUATION, MAX_COMPLETIONS, MISSING_EDITOR, Session, history_path, prompt_session, run, run_prompt
from svit.store import ProcessStore
from tests.bounds import unchanged

ADDR = "svit://local/test/repl"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
UP, CTRL_C, CTRL_D = "\x1b[A", "\x03", "\x04"


def process(**ports: Any) -> Process:
    builder = (
        Process.builder(ADDR).memory("user", {"name": "Ada", "nick": "ada"})
        .memory("many", {f"k{i:03d}": i for i in range(250)})
        .library("counter", '(define (main input) (write "/memory/count" 1))')
    )
    if ports:
        registry = Ports()
        for name, port in ports.items():
            registry = registry.port(name, port)
        builder = builder.ports(registry)
    return builder.build()


def drive(keys: str, p: Any = None, history: Path | None = None) -> tuple[str, str]:
    """Type ``keys`` at a REPL over ``p``; returns (what it said, the screen without escapes).

    Every key sequence ends in Ctrl-D on an empty line, so the session always ends."""
    p = p if p is not None else process()
    said, screen = io.StringIO(), io.StringIO()
    session = Session(p, said)
    with create_pipe_input() as keyboard:
        keyboard.send_text(keys)
        output = Vt100_Output(screen, lambda: Size(rows=24, columns=100), term="xterm")
        run_prompt(session, prompt_session(session, history, input=keyboard, output=output))
    return said.getvalue(), ANSI.sub("", screen.getvalue())


def completions(text: str, p: Any = None, session: Session | None = None) -> list[tuple[str, int]]:
    session = session or Session(p if p is not None else process(), io.StringIO())
    found = prompt_session(session, None).completer.get_completions(Document(text), CompleteEvent(completion_requested=True))
    return [(c.text, c.start_position) for c in found]


# ---------------------------------------------------------------------- the line editor
def test_an_open_form_continues_on_the_next_line_with_the_continuation_prompt() -> None:
    said, screen = drive("(+ 1\r   2)\r" + CTRL_D)
    assert said == "3\n"
    assert "svit> (+ 1" in screen and CONTINUATION + "   2)" in screen


def test_ctrl_c_drops_the_line_and_the_session_goes_on() -> None:
    p = process()
    said, _ = drive('(write "/memory/dropped" 1' + CTRL_C + "(+ 2 3)\r" + CTRL_D, p)
    assert said == "5\n"
    assert p.version == 0 and p.read("/memory/dropped") is None


def test_history_is_kept_between_sessions_in_the_user_data_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    history = history_path()
    assert history == tmp_path / "data" / "svit" / "repl_history" and not history.exists()
    first, _ = drive("(do\r 7)\r(+ 40 2)\r" + CTRL_D, history=history)
    assert first == "7\n42\n"
    assert "+(+ 40 2)" in history.read_text() and "+(do\n+ 7)" in history.read_text()
    assert history.stat().st_mode & 0o077 == 0  # what a person typed is theirs only
    # Up twice: the entry before the last (two lines, recalled whole), from the file the
    # first session wrote.
    second, _ = drive(UP + UP + "\r" + CTRL_D, history=history_path())
    assert second == "7\n"


# ---------------------------------------------------------------------- completion
def test_tab_completes_guest_function_names_and_session_definitions() -> None:
    assert completions("(value-nu") == [("value-null?", -8)]
    assert ("write", -3) in completions("(wri") and ("runtime-builtins", -3) in completions("(run")
    session = Session(process(), io.StringIO())
    session.handle("(define (double-it x) (* 2 x))")
    assert completions("(map double", session=session) == [("double-it", -6)]


def test_tab_completes_lib_names_and_memory_paths_in_string_literals() -> None:
    assert completions('(exec "/lib/cou') == [("counter", -3)]
    assert completions('(read "/memory/user/ni') == [("nick", -2)]
    assert ("user", -2) in completions('(read "/memory/us')
    assert completions('(read "/mem') == [("memory", -3)]
    assert completions('(read "/memory/user" "/memory/u') == [("user", -1)]


def test_path_completion_is_bounded_and_only_inside_a_string() -> None:
    many = completions('(read "/memory/many/')
    assert len(many) == MAX_COMPLETIONS and many[0] == ("k000", 0)
    assert completions('(read "/memory/user") ; "/memory/') == []
    assert completions('(read "/nowhere/x') == []
    assert completions('(read "relative') == []


# ---------------------------------------------------------------------- errors
def caret_under(said: str, text: str) -> tuple[str, str]:
    """The shown source line containing ``text`` and the caret line under it."""
    lines = said.splitlines()
    index = next(i for i, line in enumerate(lines) if "| " in line and text in line)
    return lines[index], lines[index + 1]


def test_a_runtime_error_points_at_the_line_and_column_typed() -> None:
    said, _ = drive('(do\r  (+ 1 "a"))\r' + CTRL_D)
    assert said.splitlines()[0] == 'error: script_failed: runtime error: type error: expected number; found string: "a"'
    shown, caret = caret_under(said, '(+ 1 "a")')
    assert shown.startswith("  line 2 | ")
    assert caret.replace(" ", "") == "|^" and caret.index("^") == shown.index("(+")
    assert "stack (outermost first):" in said and "in <input> (line 2, column 3)" in said
    assert "Traceback" not in said and ".svit-script" not in said


def test_compile_and_syntax_errors_point_at_the_column() -> None:
    session_out = io.StringIO()
    session = Session(process(), session_out)
    session.handle('(do\n  (list (frob 1)))')
    shown, caret = caret_under(session_out.getvalue(), "(frob 1)")
    assert "compile error: unbound name `frob`" in session_out.getvalue()
    assert shown.startswith("  line 2 | ") and caret.index("^") == shown.index("frob")
    session_out.truncate(0)
    session_out.seek(0)
    session.handle("(+ 1 2))")
    said = session_out.getvalue()
    shown, caret = caret_under(said, "(+ 1 2))")
    assert said.startswith("error: script_failed: syntax error: unexpected `)`")
    assert caret.index("^") == shown.index("))") + 1


def test_an_error_inside_an_earlier_definition_shows_that_definition_and_the_stack() -> None:
    out = io.StringIO()
    session = Session(process(), out)
    session.handle("(define (half x)\n  (/ x \"two\"))")
    session.handle("(half 4)")
    said = out.getvalue()
    shown, caret = caret_under(said, '(/ x "two")')
    assert shown.startswith("  in a definition kept earlier, line 2 | ") and caret.index("^") == shown.index("(/")
    stack = said.split("stack (outermost first):\n", 1)[1].splitlines()
    assert stack[:2] == ["  in <input> (line 1, column 1)", "  in half (line 2 of a definition kept earlier, column 3)"]


# ---------------------------------------------------------------------- what commits
def test_a_reading_form_commits_nothing() -> None:
    p = process()
    out = io.StringIO()
    with unchanged(p):
        Session(p, out).handle('(do (log-info! "looked" 1) (read "/memory/user/name"))')
    assert out.getvalue() == '"Ada"\n; log: looked 1\n'


def test_a_writing_form_commits_one_version() -> None:
    p = process()
    out = io.StringIO()
    session = Session(p, out)
    session.handle('(write "/memory/count" (+ 1 41))')
    assert p.version == 1 and p.read("/memory/count") == 42
    assert out.getvalue() == "null\n; version 1 committed (/memory/count)\n"


def test_a_message_is_queued_once_and_shown() -> None:
    p = process()
    out = io.StringIO()
    Session(p, out).handle('(send! "svit://local/test/other" (value-map "hi" 1))')
    assert p.version == 1 and [m["body"] for m in p.message_intents()] == [{"hi": 1}]
    assert '; message to svit://local/test/other: {"hi": 1}' in out.getvalue().splitlines()


def test_a_port_call_runs_once() -> None:
    calls: list[Any] = []
    p = process(echo=lambda value: calls.append(value) or value)
    out = io.StringIO()
    Session(p, out).handle('(port-call "echo" 7)')
    assert calls == [7] and p.version == 1
    assert out.getvalue().startswith("7\n; version 1 committed")


def test_a_durable_process_commits_only_what_writes(tmp_path: Path) -> None:
    store = ProcessStore.open(tmp_path / "store")
    try:
        h = store.create(process())
        records = store.record_digests()
        out = io.StringIO()
        session = Session(h, out)
        with unchanged(h):
            session.handle('(read "/memory/user/nick")')
        assert store.record_digests() == records
        session.handle('(exec "/lib/counter" ())')
        assert h.version == 1 and store.resume(ADDR).read("/memory/count") == 1
    finally:
        store.close()


# ---------------------------------------------------------------------- without the line editor
class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_without_prompt_toolkit_a_terminal_gets_plain_lines_and_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prompt_toolkit", None)  # importing it fails
    screen = Terminal()
    run(process(), Terminal("(+ 1\n 2)\n"), screen)
    lines = screen.getvalue().splitlines()
    assert MISSING_EDITOR in lines and "svit> " + CONTINUATION + "3" in lines


def test_the_command_commits_only_forms_that_write(tmp_path: Path) -> None:
    env = {**os.environ, "SVIT_STORE": str(tmp_path / "store")}
    env.pop("SVIT_DEBUG", None)

    def svit(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "svit.cli", *args], capture_output=True, text=True, env=env,
                              input=stdin, timeout=60, cwd=tmp_path)

    assert svit("new", ADDR, "--memory", "n=1").returncode == 0
    typed = '(read "/memory/n")\n(write "/memory/n" (+ 1 (read "/memory/n")))\n(+ 1\n   (read "/memory/n"))\n'
    result = svit("repl", ADDR, stdin=typed)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout == "1\nnull\n; version 1 committed (/memory/n)\n3\n"
    assert [entry["version"] for entry in json.loads(svit("log", ADDR).stdout)] == [1]
    assert json.loads(svit("read", ADDR, "/memory/n").stdout) == 2


def test_the_line_editor_is_installed_with_svit() -> None:
    # `svit repl` is a core command, so its editor is a core dependency, not an extra.
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert any(re.split(r"[<>=\[ ]", req)[0].lower() == "prompt_toolkit" for req in project["dependencies"])
