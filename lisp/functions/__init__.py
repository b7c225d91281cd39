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

# Importing the family modules registers their functions.
from . import collections, compare, format, lists, numbers, strings, text, types
from .registry import SYSTEM_FUNCTIONS, SystemFunction, order_by_family, system

#: The catalogue order of the families (``runtime-builtins`` lists them so).
order_by_family(["numbers", "compare", "collections", "format", "lists", "strings", "text", "types"])

__all__ = [
    "SYSTEM_FUNCTIONS",
    "SystemFunction",
    "collections",
    "compare",
    "format",
    "lists",
    "numbers",
    "strings",
    "system",
    "text",
    "types",
]
