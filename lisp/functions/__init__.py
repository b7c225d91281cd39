"""The system functions of Svit Lisp (reference §4.5), registered by name.

Each system function is a plain Python function over Lisp values (see
:mod:`lisp.values`). Arity is checked by the caller against ``min_args`` /
``max_args`` before the function runs, so implementations may assume a valid
argument count. Functions raise only :mod:`lisp.errors` types.

A function registered with ``takes_depth=True`` receives the caller's call depth
first (``fn(depth, *args)``), so it can call guest functions it was given
(``f(depth + 1, ...)``) under the same call-stack bound. ``signature``,
``description`` and ``category`` feed the catalogue a script reads with
``(runtime-builtins)``.

Functions registered with ``extension=True`` are Svit's own additions under names
Ketos does not use (``map``, ``split``...). Unlike Ketos's standard names a script
may define its own function under such a name; its definition then wins in that
script, as it would in Ketos, where the name is free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class SystemFunction:
    name: str
    fn: Callable[..., Any]
    min_args: int
    max_args: int | None  # None: no upper bound
    takes_depth: bool = False
    signature: str | None = None
    description: str | None = None
    category: str | None = None
    extension: bool = False


SYSTEM_FUNCTIONS: dict[str, SystemFunction] = {}


def system(
    name: str,
    min_args: int,
    max_args: int | None = -1,
    *,
    takes_depth: bool = False,
    signature: str | None = None,
    description: str | None = None,
    category: str | None = None,
    extension: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` as the system function ``name``; ``max_args=-1`` means exactly ``min_args``."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        upper = min_args if max_args == -1 else max_args
        SYSTEM_FUNCTIONS[name] = SystemFunction(name, fn, min_args, upper, takes_depth, signature, description, category, extension)
        return fn

    return register


def _load() -> None:
    # Importing the family modules registers their functions.
    from . import collections, compare, formatting, lists, numbers, strings, text, types  # noqa: F401


_load()
