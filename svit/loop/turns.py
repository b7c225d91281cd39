"""The host's entry point to the turn loop: one reason/act turn for the committed inbox
head of a process, without a thread of its own (see :mod:`svit.loop.attempts` for what
a failed turn does: retries with backoff, then the set-aside list)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from .attempts import TurnOutcome, next_turn
from .svit import Svit

if TYPE_CHECKING:
    from ..protocol import HostedProcess
    from ..reasoners import Reasoner
    from .builders import LoopOptions

__all__ = ["TurnOutcome", "run_next_turn"]


def run_next_turn(
    process: HostedProcess | Svit, reasoner: Reasoner, options: LoopOptions, *, now: float | None = None
) -> TurnOutcome:
    """Handle the committed inbox head of ``process`` with one reason/act turn.

    Never sleeps and starts no thread: an item not due for its retry yet returns
    ``"retry"`` at once with its ``retry_at``. ``process`` is a durable handle or an
    in-memory process (opened as a Svit with ``options`` and ``reasoner``, which commits
    ``/thread`` and ``/ports`` when they differ) or a :class:`Svit` itself. ``now`` is
    the wall-clock time in seconds (default: ``time.time()``); retry times are kept in the
    store, so they are wall-clock times.

    An in-memory process keeps no conversation of its own between calls: give
    ``options`` an event log (``options.event_log(log)``) to keep one.
    """
    if isinstance(process, Svit):
        agent = process
    else:
        opened = copy.copy(options)  # the caller's options stay as they were
        opened.reasoner(reasoner)
        agent = Svit(process, opened)
    return next_turn(agent, reasoner=reasoner, now=now)
