"""Where ``svit chat`` reads the person's lines from.

On a terminal (stdin and stdout both TTYs) the line editor of ``prompt_toolkit``, with
the history kept in the platform user-data directory (``chat_history`` next to the
default store); Ctrl-C at the prompt clears the line, Ctrl-D leaves. Otherwise plain
lines from stdin (a pipe, a file), each echoed after the prompt so a transcript reads
like the screen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, TextIO

from ..prompt_history import kept_history

__all__ = ["PROMPT", "LineReader", "PlainReader", "PromptReader", "history_path", "open_reader"]

PROMPT = "you> "


class LineReader(Protocol):
    def read(self) -> str:
        """The next line without its newline; :class:`EOFError` at the end of input."""
        ...


class PlainReader:
    def __init__(self, stdin: TextIO, stdout: TextIO) -> None:
        self._stdin = stdin
        self._stdout = stdout

    def read(self) -> str:
        line = self._stdin.readline()
        if not line:
            raise EOFError
        text = line.rstrip("\r\n")
        self._stdout.write(PROMPT + text + "\n")
        self._stdout.flush()
        return text


class PromptReader:
    def __init__(self, history: Path | None) -> None:
        from prompt_toolkit import PromptSession  # noqa: PLC0415 - the chat extra, only on a terminal
        self._session: Any = PromptSession(history=kept_history(history))

    def read(self) -> str:
        while True:
            try:
                line: str = self._session.prompt(PROMPT)
                return line
            except KeyboardInterrupt:  # Ctrl-C at the prompt clears the line, as in a shell
                continue


def history_path() -> Path:
    import platformdirs  # noqa: PLC0415 - only an interactive chat keeps a history

    return Path(platformdirs.user_data_dir("svit", appauthor=False)) / "chat_history"


def open_reader(stdin: TextIO, stdout: TextIO) -> LineReader:
    """The line editor on a terminal, plain lines otherwise."""
    if stdin.isatty() and stdout.isatty():
        return PromptReader(history_path())
    return PlainReader(stdin, stdout)
