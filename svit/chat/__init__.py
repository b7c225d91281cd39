"""``svit chat ADDR``: a terminal conversation with the durable agent at an address.

The model is any OpenAI-compatible chat completions API (:mod:`svit.reasoners`); the
reply streams to the terminal as it arrives, tool calls and their results are shown in
a line or two each, and the conversation lives in the process's thread log, so the
next ``svit chat`` over the same address resumes it. Needs the ``chat`` extra
(``openai``, ``prompt_toolkit``).
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any, TextIO

from .config import ChatConfig, ConfigProblem, resolve_config
from .session import HELP, CancellableReasoner, ChatSession, ReplyCancelled
from .terminal import open_reader

__all__ = [
    "EXTRA_PACKAGES",
    "HELP",
    "CancellableReasoner",
    "ChatConfig",
    "ChatSession",
    "ConfigProblem",
    "ReplyCancelled",
    "missing_dependency",
    "resolve_config",
    "run",
]

#: What the ``chat`` extra installs (import names).
EXTRA_PACKAGES = ("openai", "prompt_toolkit")


def missing_dependency() -> str | None:
    """The first package of the ``chat`` extra that cannot be imported, if any."""
    for name in EXTRA_PACKAGES:
        if name in sys.modules:
            if sys.modules[name] is None:
                return name
            continue
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return name
    return None


def run(store: Any, address: str, config: ChatConfig, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """Talk to the agent at ``address`` until ``/quit`` or the end of input; returns 0."""
    stdin = stdin if stdin is not None else sys.stdin
    stdout = stdout if stdout is not None else sys.stdout
    reconfigure = getattr(stdout, "reconfigure", None)
    if callable(reconfigure):  # a model's text the terminal cannot encode is shown, not fatal
        reconfigure(errors="replace")
    session = ChatSession(store, address, config, stdout)
    try:
        session.greet()
        reader = open_reader(stdin, stdout)
        while True:
            try:
                line = reader.read()
                if not session.handle(line):
                    break
            except EOFError:
                break
            except KeyboardInterrupt:  # outside a reply (a long /tree, a plain read): back to the prompt
                session.say("interrupted")
    finally:
        session.close()
    stdout.write("bye\n")
    stdout.flush()
    return 0
