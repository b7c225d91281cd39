"""Failures specific to the reasoning loop; each is a :class:`svit.errors.SvitError`.

A failure that fails a turn says whether trying the same inbox item again could succeed
(``retryable``); the loop sets a non-retryable one aside at once instead of retrying it.
"""

from __future__ import annotations

from typing import Any

from ..errors import SvitError


class MissingReasoner(SvitError):
    code, prefix = "missing_reasoner", "Svit requires a reasoner"


class InboxClosed(SvitError):
    code, prefix = "inbox_closed", "Svit inbox is closed"


class TurnFailed(SvitError):
    code, prefix = "turn_failed", "reasoning turn failed"


class ReplyTruncated(SvitError):
    """The model stopped at its length limit (``finish_reason: "length"``): the reply is cut
    off, so it is not a final answer and its tool calls may be incomplete."""

    code, prefix = "reply_truncated", "the model's reply was cut off at its length limit"

    def __init__(self, detail: str = "", *, usage: dict[str, int] | None = None) -> None:
        super().__init__(detail)
        self.usage = usage


class InvalidInboxItem(SvitError):
    """An inbox item the loop cannot show the model; trying it again cannot help."""

    code, prefix = "invalid_inbox_item", "inbox item is not a message"
    retryable = False


class SetAsideNotFound(SvitError):
    """An operator named a set-aside item the process does not hold."""

    code, prefix = "set_aside_not_found", "no set-aside inbox item with that id"


class MissingOutboxMessage(SvitError):
    code, prefix = "missing_outbox_message", "reasoning turn produced no final agent message"


class InvalidThread(SvitError):
    code, prefix = "invalid_thread", "invalid /thread metadata"


class ReasonerUnavailable(SvitError):
    """The reasoner cannot be constructed or used (missing package, model, credentials or
    event loop); a configuration problem, so retrying the same item cannot help."""

    code, prefix = "reasoner_unavailable", "reasoner unavailable"
    retryable = False


class ReasonerFailed(SvitError):
    """One model request failed (HTTP status, timeout, connection, malformed reply).

    ``status`` is the HTTP status when the provider answered; ``retryable`` whether the
    same request may succeed later (rate limits, server errors, timeouts, lost
    connections) or never will (a bad request, credentials or a missing model);
    ``error_type`` and ``provider_message`` are the provider's own error type and text,
    credentials removed. The client's exception is chained as ``__cause__``.
    """

    code, prefix = "reasoner_failed", "reasoner request failed"

    def __init__(
        self,
        detail: str = "",
        *,
        status: int | None = None,
        retryable: bool = True,
        error_type: str | None = None,
        provider_message: str | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.retryable = retryable
        self.error_type = error_type
        self.provider_message = provider_message

    def facts(self) -> dict[str, Any]:
        """The structured part of the failure, for the turn's record (absent facts left out)."""
        found: dict[str, Any] = {}
        if self.status is not None:
            found["status"] = self.status
        if self.error_type is not None:
            found["error_type"] = self.error_type
        if self.provider_message is not None:
            found["provider_message"] = self.provider_message
        return found


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
    "InvalidInboxItem",
    "InvalidThread",
    "Lagged",
    "MissingOutboxMessage",
    "MissingReasoner",
    "ObserveError",
    "ReasonerFailed",
    "ReasonerUnavailable",
    "ReplyTruncated",
    "SetAsideNotFound",
    "TurnFailed",
]
