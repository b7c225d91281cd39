"""The run context that system functions consult: limits and the shared budget.

System functions are plain Python functions shared by every run; the limits that
bound them (integer bits, guest memory) and the budget they charge for costly work
belong to the run that called them. That run is found through :func:`current`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .budget import Budget
from .errors import InternalError, LimitError
from .memory import Meter
from .values import Foreign, LispList, LispValue

__all__ = ["LIST_UNIT", "RUN_LOCAL", "UNITS_PER_STEP", "Context", "LispLimits", "active", "current", "enter", "leave"]

#: Element types that hold guest memory of their own inside a list.
_HOLDING = frozenset((tuple, str, bytes))

#: A string or list costs one extra step for every this many units it holds.
UNITS_PER_STEP = 64
#: Guest memory units per list element.
LIST_UNIT = 8
#: Lists whose size is remembered (with the lists themselves, so their ids stay theirs).
_SIZES_KEPT = 1024


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

    __slots__ = ("limits", "budget", "max_bits", "max_memory", "sizes", "meter")

    def __init__(self, limits: LispLimits, budget: Budget) -> None:
        self.limits = limits
        self.budget = budget
        self.max_bits = limits.max_integer_bits
        self.max_memory = limits.max_guest_memory
        #: id -> (list, size) of recently built lists, so a list built from them is
        #: measured without walking them again.
        self.sizes: dict[int, tuple[LispList, int]] = {}
        #: What the runs sharing the budget hold in total (one meter per budget).
        meter = budget.meter
        if meter is None or meter.limit != self.max_memory:
            meter = budget.meter = Meter(self.max_memory)
        self.meter = meter

    def rebind(self, budget: Budget) -> None:
        """Serve a new run drawing on ``budget`` (a renewed namespace), as a new context would."""
        self.budget = budget
        self.sizes.clear()
        meter = budget.meter
        if meter is None or meter.limit != self.max_memory:
            meter = budget.meter = Meter(self.max_memory)
        self.meter = meter

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
        """Account for creating a value of ``units`` size: memory bound plus step cost.

        The value is refused on its own above the limit, and the units count toward
        what the run holds in total (see :mod:`lisp.memory`).
        """
        if units > self.max_memory:
            raise LimitError("guest memory")
        meter = self.meter
        meter.total += units
        if meter.total > meter.next_check:
            meter.check(self, units)
        if units >= UNITS_PER_STEP:
            self.budget.charge(units // UNITS_PER_STEP)

    def new_list(self, items: LispList | list[LispValue]) -> LispList | None:
        """A new Lisp list of ``items``, refused if it would exceed guest memory.

        As in Ketos, a list's size is its own elements plus the size of every list,
        string, byte string and host value inside it (counted each time it occurs), so
        a structure that nests or repeats its parts grows toward the guest memory limit
        however each piece was built. The sizes of recently built lists are remembered,
        so building a list from lists made before costs O(1) per element.
        """
        if not items:
            return None
        own = LIST_UNIT * len(items)
        if own > self.max_memory:
            raise LimitError("guest memory")
        size = own + self._held_inside(items)
        if size > self.max_memory:
            raise LimitError("guest memory")
        meter = self.meter
        meter.total += own
        if meter.total > meter.next_check:
            meter.check(self, own)
        if own >= UNITS_PER_STEP:
            self.budget.charge(own // UNITS_PER_STEP)
        value = tuple(items)
        self._remember(value, size)
        return value

    def _remember(self, value: LispList, size: int) -> None:
        sizes = self.sizes
        if len(sizes) >= _SIZES_KEPT:
            sizes.pop(next(iter(sizes)))  # the oldest
        sizes[id(value)] = (value, size)

    def _held_inside(self, items: LispList | list[LispValue]) -> int:
        kinds = set(map(type, items))
        if not kinds.intersection(_HOLDING) and not any(issubclass(k, Foreign) for k in kinds):
            return 0
        total = 0
        limit = self.max_memory
        for item in items:
            if type(item) is tuple:
                total += self.size_of(item)
            elif type(item) is str or type(item) is bytes:
                total += len(item)
            elif isinstance(item, Foreign):
                total += item.memory_size()
            if total > limit:
                raise LimitError("guest memory")
        return total

    def _known(self, value: LispList) -> int | None:
        found = self.sizes.get(id(value))
        return found[1] if found is not None and found[0] is value else None

    def size_of(self, value: LispList) -> int:
        """The size of a list with everything inside it (walked once if not remembered)."""
        known = self._known(value)
        if known is not None:
            return known
        # Walk the structure bottom-up, each distinct list measured once, charging a step
        # per 64 elements visited and stopping as soon as a part exceeds the limit.
        limit = self.max_memory
        measured: dict[int, int] = {}
        pending: list[tuple[LispList, int]] = [(value, 0)]
        visited = 0
        while pending:
            node, start = pending.pop()
            if start == 0:
                visited += len(node)
            descended = False
            for i in range(start, len(node)):
                item = node[i]
                if type(item) is tuple and id(item) not in measured:
                    inner = self._known(item)
                    if inner is not None:
                        measured[id(item)] = inner
                        continue
                    pending.append((node, i))
                    pending.append((item, 0))
                    descended = True
                    break
            if descended:
                continue
            size = LIST_UNIT * len(node)
            for item in node:
                if type(item) is tuple:
                    size += measured[id(item)]
                elif type(item) is str or type(item) is bytes:
                    size += len(item)
                elif isinstance(item, Foreign):
                    size += item.memory_size()
            if size > limit:
                raise LimitError("guest memory")
            measured[id(node)] = size
        if visited >= UNITS_PER_STEP:
            self.budget.charge(visited // UNITS_PER_STEP)
        size = measured[id(value)]
        self._remember(value, size)
        return size


class _RunLocal(threading.local):
    """The context of the run executing on each thread (none between runs)."""

    context: Context | None = None


_local = _RunLocal()
#: The per-thread holder of the current context, for the interpreter's run guard, which
#: enters and leaves a run with it directly (:func:`enter` and :func:`leave`, written out).
RUN_LOCAL = _local


def current() -> Context:
    """The context of the run executing on this thread.

    System functions charge and bound their work through it, so running them with no
    run in progress is a failure of the caller (the interpreter enters a context for
    every run; a host calling them directly enters one with :func:`enter`).
    """
    context = _local.context
    if context is None:
        raise InternalError("Lisp code ran outside a run: no run context is active")
    return context


def active() -> Context | None:
    """The context of the run executing on this thread, or ``None`` between runs."""
    return _local.context


def enter(context: Context) -> Context | None:
    """Make ``context`` current; returns the previous one for :func:`leave`."""
    previous = _local.context
    _local.context = context
    return previous


def leave(previous: Context | None) -> None:
    _local.context = previous
