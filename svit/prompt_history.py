"""The line history of the people-facing prompts (``svit repl``, ``svit chat``).

One rule for both: what a person typed is theirs only (the file is made mode 0600), and a
home that cannot be written keeps the history for this run alone instead of failing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["kept_history"]


def kept_history(path: Path | None) -> Any:
    """A ``prompt_toolkit`` history kept in ``path`` (in memory when None or unwritable)."""
    from prompt_toolkit.history import FileHistory, InMemoryHistory  # noqa: PLC0415 - only on a terminal

    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600, exist_ok=True)  # what the person typed is theirs only
            return FileHistory(str(path))
        except OSError:
            pass  # a read-only home: the history lasts for this run only
    return InMemoryHistory()
