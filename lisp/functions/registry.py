"""The table of system functions and the decorator that fills it.

Each family module (``numbers``, ``lists``...) registers its functions here when it is
imported; :mod:`lisp.functions` imports every family, so the table is complete once
the package is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar

__all__ = ["SYSTEM_FUNCTIONS", "SystemFunction", "order_by_family", "system"]

_Function = TypeVar("_Function", bound=Callable[..., Any])


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
) -> Callable[[_Function], _Function]:
    """Register ``fn`` as the system function ``name``; ``max_args=-1`` means exactly ``min_args``."""

    def register(fn: _Function) -> _Function:
        upper = min_args if max_args == -1 else max_args
        SYSTEM_FUNCTIONS[name] = SystemFunction(name, fn, min_args, upper, takes_depth, signature, description, category, extension)
        return fn

    return register


def order_by_family(families: list[str]) -> None:
    """Put the table in catalogue order: family by family as listed, each in its own order.

    Families import one another, so the order they register in depends on imports;
    the catalogue (``runtime-builtins``) must not.
    """
    rank = {module: i for i, module in enumerate(families)}
    ordered = sorted(SYSTEM_FUNCTIONS.values(), key=lambda spec: rank[spec.fn.__module__.rsplit(".", 1)[-1]])
    SYSTEM_FUNCTIONS.clear()
    SYSTEM_FUNCTIONS.update((spec.name, spec) for spec in ordered)
