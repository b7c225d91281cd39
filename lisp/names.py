"""Name mangling: how Lisp names become Python identifiers in generated code, and back.

Every guest global is ``g_<mangled>``; every local ``v<n>_<mangled>``; runtime helpers
start with ``_``, so a guest name can never reach one. :func:`mangle` is injective and
:func:`demangle` its inverse, which is how error messages and call stacks name the Lisp
function behind a Python frame.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["demangle", "global_name", "lisp_name_of", "mangle"]

#: Mangled names remembered (every name a program uses passes through here).
_NAMES_KEPT = 65536


@lru_cache(maxsize=_NAMES_KEPT)
def mangle(name: str) -> str:
    """An injective map from Lisp names to Python identifier tails."""
    out = []
    for ch in name:
        if ch.isascii() and ch.isalnum():
            out.append(ch)
        else:
            out.append(f"_{ord(ch):x}_")
    return "".join(out)


def demangle(tail: str) -> str:
    """The Lisp name behind a :func:`mangle` result (raises ``ValueError`` if it is not one)."""
    out, i = [], 0
    while i < len(tail):
        ch = tail[i]
        if ch == "_":
            end = tail.index("_", i + 1)
            out.append(chr(int(tail[i + 1 : end], 16)))
            i = end + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


@lru_cache(maxsize=_NAMES_KEPT)
def global_name(name: str) -> str:
    """The Python name of the guest global ``name``."""
    return "g_" + mangle(name)


def lisp_name_of(python_name: str) -> str:
    """The Lisp name behind a generated function or global name (``lambda`` for the rest)."""
    if python_name.startswith("g_"):
        try:
            return demangle(python_name[2:])
        except (ValueError, IndexError):
            return python_name
    return "lambda"
