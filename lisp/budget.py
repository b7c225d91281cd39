"""Budgets: the deterministic step fuel and the wall-clock backstop.

One :class:`Budget` is shared by everything an activation runs, nested runs
included. Generated code counts steps in a fast per-run counter and draws them
from the budget in slices (:meth:`Budget.draw`), so the point at which fuel runs
out is exact and the same on every machine; the wall clock is only looked at when
a slice is drawn or a costly builtin charges.
"""

from __future__ import annotations

import time

from .errors import BudgetExhausted
from .memory import Meter

__all__ = ["SLICE", "Budget", "CompileMeter"]

SLICE = 1024


class Budget:
    """Remaining steps plus a wall-clock deadline, shared by nested runs."""

    __slots__ = ("max_steps", "remaining", "deadline", "max_millis", "clock", "meter")

    def __init__(self, max_steps: int = 1_000_000, max_millis: int | None = 1_000) -> None:
        self.max_steps = max_steps
        self.remaining = max_steps
        self.max_millis = max_millis
        #: The wall clock the deadline is read from (host calls read it inline).
        self.clock = time.monotonic
        self.deadline = None if max_millis is None else self.clock() + max_millis / 1000.0
        #: The guest memory meter of the runs sharing this budget (made by their context).
        self.meter: Meter | None = None

    @property
    def used(self) -> int:
        """Steps consumed so far (exact once every run has returned its slice)."""
        return self.max_steps - self.remaining

    def draw(self) -> int:
        """Hand out the next slice of steps, or raise when fuel or time has run out."""
        if self.deadline is not None and self.clock() > self.deadline:  # check_clock, written out
            raise BudgetExhausted("time")
        if self.remaining <= 0:
            raise BudgetExhausted("steps")
        grant = SLICE if self.remaining > SLICE else self.remaining
        self.remaining -= grant
        return grant

    def give_back(self, unused: int) -> None:
        """Return the unused part of a slice (before a nested run, or at the end)."""
        if unused > 0:
            self.remaining += unused

    def charge(self, steps: int) -> None:
        """Charge work proportional to its size (long strings, big lists)."""
        self.remaining -= steps
        if self.remaining < 0:
            self.remaining = 0
            raise BudgetExhausted("steps")
        # check_clock, written out: charged once per host call.
        if self.deadline is not None and self.clock() > self.deadline:
            raise BudgetExhausted("time")

    def take(self, steps: int) -> None:
        """Charge steps without looking at the clock (the rest of a batch of work)."""
        self.remaining -= steps
        if self.remaining < 0:
            self.remaining = 0
            raise BudgetExhausted("steps")

    def check_clock(self) -> None:
        if self.deadline is not None and self.clock() > self.deadline:
            raise BudgetExhausted("time")


class CompileMeter:
    """The compiler's own work, charged to a compilation's budget in small batches.

    Every pass (expansion, resolution, code generation) counts one unit per form it
    visits, so a macro expansion whose parts are shared (walked as a tree, it doubles
    per level) runs out of steps, or of time, instead of running on unmetered.
    Batching keeps the count cheap. As generated code looks at the clock once per
    slice of steps, the meter looks at it once per batch of a slice's size; whatever
    is left at the end is charged by :meth:`flush` (steps only).
    """

    __slots__ = ("budget", "pending")

    BATCH = SLICE

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.pending = 0

    def visit(self, units: int = 1) -> None:
        self.pending += units
        if self.pending >= self.BATCH:
            units, self.pending = self.pending, 0
            self.budget.charge(units)

    def flush(self) -> None:
        units, self.pending = self.pending, 0
        if units:
            self.budget.take(units)
