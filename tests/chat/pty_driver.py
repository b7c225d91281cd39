"""Drive ``svit chat`` through a pseudo-terminal, the way a person at a terminal does.

The program runs in its own session with the pty as its controlling terminal, so
Ctrl-C typed at the terminal reaches it as SIGINT, exactly as from a real one. A
thread reads everything the program writes; :meth:`Terminal.expect` waits (with a
deadline, never a fixed sleep) until the cleaned output, escape sequences and carriage
returns removed, contains the expected text after what was already matched.
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]|\r|\x07")

#: Become the session leader's controlling terminal, then run the command.
LAUNCH = "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execv(sys.executable, [sys.executable] + sys.argv[1:])"


def clean(raw: str) -> str:
    """``raw`` without escape sequences and carriage returns; a sequence still arriving
    at the end is left out until it is complete, so positions in the result never move."""
    last = raw.rfind("\x1b")
    if last >= 0 and not ESCAPES.match(raw, last):
        raw = raw[:last]
    return ESCAPES.sub("", raw)


def chat_env(tmp_path: Path, base_url: str, key: str, **extra: str) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path / "home"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "PYTHONPATH": str(ROOT),
        "SVIT_STORE": str(tmp_path / "store"),
        "SVIT_CHAT_MODEL": "fake-model",
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": key,
        "TERM": "xterm",
        "PROMPT_TOOLKIT_NO_CPR": "1",
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
    }
    env.update(extra)
    return env


class Terminal:
    """``with Terminal([...chat args], env) as term:``; ``term.expect(...)``, ``term.line(...)``."""

    def __init__(self, args: list[str], env: dict[str, str], *, rows: int = 40, columns: int = 120) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self._master = master
        self.process = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, "-m", "svit.cli", *args],
            stdin=slave, stdout=slave, stderr=slave, env=env, cwd=str(ROOT), start_new_session=True, close_fds=True,
        )
        os.close(slave)
        self._raw = ""
        self._position = 0
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, 65536)
            except OSError:  # EIO: the program closed the terminal
                data = b""
            with self._changed:
                if not data:
                    self._raw += "\0"  # end marker for waiters
                    self._changed.notify_all()
                    return
                self._raw += data.decode("utf-8", "replace")
                self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return clean(self._raw).replace("\0", "")

    def expect(self, text: str, timeout: float = 15.0) -> str:
        """Wait for ``text`` after the last match; returns the output up to and including it."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                seen = clean(self._raw)
                found = seen.find(text, self._position)
                if found >= 0:
                    segment = seen[self._position : found + len(text)]
                    self._position = found + len(text)
                    return segment
                remaining = deadline - time.monotonic()
                if remaining <= 0 or "\0" in self._raw:
                    tail = seen[self._position :].replace("\0", "")
                    raise AssertionError(f"did not see {text!r}; the terminal shows after the last match:\n{tail[-3000:]}")
                self._changed.wait(remaining)

    def type(self, keys: str) -> None:
        os.write(self._master, keys.encode())

    def line(self, text: str) -> None:
        """Wait for the prompt, then type ``text`` and Enter (the caller then expects
        the answer, so the next prompt is never mistaken for this line's echo)."""
        self.at_prompt()
        self.type(text + "\r")

    def at_prompt(self) -> None:
        self.expect("you>")

    def wait(self, timeout: float = 15.0) -> int:
        return self.process.wait(timeout)

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)
        self._reader.join(5)
        os.close(self._master)
