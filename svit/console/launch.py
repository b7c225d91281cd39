"""What ``svit console`` needs from the command line: the extra check, the sources, the run.

Kept apart from :mod:`svit.console.app` so the command can say which extra is missing
before anything imports Textual.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

__all__ = ["EXTRA_HINT", "missing_dependency", "run"]

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
