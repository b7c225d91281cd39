"""Failures specific to the reasoning loop; each is a :class:`svit.errors.SvitError`."""

from __future__ import annotations

from ..errors import SvitError


class MissingReasoner(SvitError):
    code, prefix = "missing_reasoner", "Svit requires a reasoner"


class InboxClosed(SvitError):
    code, prefix = "inbox_closed", "Svit inbox is closed"


class TurnFailed(SvitError):
    code, prefix = "turn_failed", "reasoning turn failed"


class MissingOutboxMessage(SvitError):
    code, prefix = "missing_outbox_message", "reasoning turn produced no final agent message"


class InvalidThread(SvitError):
    code, prefix = "invalid_thread", "invalid /thread metadata"


class ReasonerUnavailable(SvitError):
    """The reasoner cannot be constructed (missing package, model or credentials)."""

    code, prefix = "reasoner_unavailable", "reasoner unavailable"


class ReasonerFailed(SvitError):
    """One model request failed (HTTP status, timeout, connection, malformed reply)."""

    code, prefix = "reasoner_failed", "reasoner request failed"


class ObserveError(SvitError):
    """Base of observer reports; not a failure of the process."""

    code, prefix = "observe_error", "observer error"


class Empty(ObserveError):
    code, prefix = "observer_empty", "nothing to receive"


class Closed(ObserveError):
    code, prefix = "observer_closed", "observer closed"


class Lagged(ObserveError):
    """The observer fell behind; ``missed`` items were dropped (the oldest first)."""

    code, prefix = "observer_lagged", "observer lagged"

    def __init__(self, missed: int) -> None:
        self.missed = missed
        super().__init__(f"{missed} items were dropped")


__all__ = [
    "Closed",
    "Empty",
    "InboxClosed",
    "InvalidThread",
    "Lagged",
    "MissingOutboxMessage",
    "MissingReasoner",
    "ObserveError",
    "ReasonerFailed",
    "ReasonerUnavailable",
    "TurnFailed",
]
