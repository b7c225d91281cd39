"""What ``svit console`` needs from the command line: the extra check, the sources, the run.

Kept apart from :mod:`svit.console.app` so the command can say which extra is missing
before anything imports Textual.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from ..errors import PersistenceUnavailable
from ..store import DurableProcess, ProcessStore
from .source import Unavailable

__all__ = ["EXTRA_HINT", "WRITER_OPEN_SECONDS", "missing_dependency", "run", "writer_on_demand"]

#: How long a send or run waits to open the store for writing before saying who holds it.
WRITER_OPEN_SECONDS = 5.0

EXTRA_HINT = 'svit console needs the "console" extra: pip install "svit[console]"'


def missing_dependency() -> str | None:
    """The hint to print when Textual is not installed, else None."""
    try:
        found = importlib.util.find_spec("textual")
    except ImportError:
        found = None
    return EXTRA_HINT if found is None else None


def run(source: Any, *, screenshot: Path | None = None) -> None:
    """Run the console on ``source`` in this terminal, or save one headless screenshot."""
    try:
        if screenshot is not None:
            from .screenshot import snap  # noqa: PLC0415 - needs the console extra

            snap(source, screenshot)
            return
        from .app import ConsoleApp  # noqa: PLC0415 - needs the console extra

        ConsoleApp(source).run()
    finally:
        source.close()


def writer_on_demand(path: str | Path, address: str, holder: str = "svit console") -> Callable[[], AbstractContextManager[DurableProcess]]:
    """A writer for a console that browses a store opened read-only: each send or run
    opens the store for writing, commits, and closes it again, so the console never keeps
    the lock a host or ``svit serve`` needs. When another process holds it, the refusal
    says so and names the way through the server."""

    @contextmanager
    def writing() -> Iterator[DurableProcess]:
        try:
            store = ProcessStore.open(path, open_deadline=WRITER_OPEN_SECONDS, holder=holder)
        except PersistenceUnavailable as exc:
            if exc.reason != "in_use":
                raise
            raise Unavailable(f"cannot write, another process holds the store ({exc.detail}); "
                              "send through it instead: svit console ADDR --serve URL") from None
        try:
            handle = store.resume(address)
            try:
                yield handle
            finally:
                handle.close()
        finally:
            store.close()

    return writing
