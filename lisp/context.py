"""The run context that system functions consult: limits and the shared budget.

System functions are plain Python functions shared by every run; the limits that
bound them (integer bits, guest memory) and the budget they charge for costly work
belong to the run that called them. That run is found through :func:`current`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .budget import Budget
from .errors import LimitError

#: A string or list costs one extra step for every this many units it holds.
UNITS_PER_STEP = 64


@dataclass(frozen=True)
class LispLimits:
    """The limits the language itself enforces (a subset of a process's limits)."""

    max_call_stack: int = 64
    max_value_stack: int = 4096
    max_namespace_entries: int = 256
    max_syntax_depth: int = 64
    max_integer_bits: int = 64
    max_guest_memory: int = 8 * 1024 * 1024
    max_steps: int = 1_000_000
    max_execution_millis: int = 1_000


class Context:
    """Limits plus the budget of the run in progress."""

    __slots__ = ("limits", "budget", "max_bits", "max_memory")

    def __init__(self, limits: LispLimits, budget: Budget) -> None:
        self.limits = limits
        self.budget = budget
        self.max_bits = limits.max_integer_bits
        self.max_memory = limits.max_guest_memory

    def check_int(self, value: int) -> int:
        """Return ``value`` if its magnitude fits ``max_integer_bits``."""
        if value.bit_length() > self.max_bits:
            raise LimitError("integer bits")
        return value

    def check_memory(self, units: int) -> None:
        """Refuse a single value whose estimated size exceeds the guest memory limit."""
        if units > self.max_memory:
            raise LimitError("guest memory")

    def allocate(self, units: int) -> None:
        """Account for creating a value of ``units`` size: memory bound plus step cost."""
        if units > self.max_memory:
            raise LimitError("guest memory")
        if units >= UNITS_PER_STEP:
            self.budget.charge(units // UNITS_PER_STEP)


_local = threading.local()
_DEFAULT = Context(LispLimits(), Budget(max_steps=1_000_000_000, max_millis=None))


def current() -> Context:
    """The context of the run executing on this thread (a lenient default outside runs)."""
    return getattr(_local, "context", None) or _DEFAULT


def enter(context: Context) -> Context | None:
    """Make ``context`` current; returns the previous one for :func:`leave`."""
    previous = getattr(_local, "context", None)
    _local.context = context
    return previous


def leave(previous: Context | None) -> None:
    _local.context = previous
