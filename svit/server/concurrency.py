"""How many requests one token may have in flight: beyond the bound, 429 at once.

Counted on the event loop (one thread), so no lock is needed; event streams hold their
slot for as long as they are open.
"""

from __future__ import annotations

from collections.abc import Callable

from .refusals import HttpRefusal
from .tokens import Grant

__all__ = ["TokenConcurrency"]


class TokenConcurrency:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._in_flight: dict[bytes, int] = {}

    def in_flight(self, grant: Grant) -> int:
        return self._in_flight.get(grant.token_digest, 0)

    def acquire(self, grant: Grant) -> Callable[[], None]:
        """Take a slot for ``grant``'s token (429 when all are taken); returns the release,
        which is safe to call more than once."""
        key = grant.token_digest
        count = self._in_flight.get(key, 0)
        if count >= self.limit:
            raise HttpRefusal(429, "too_many_requests", f"this token already has {self.limit} requests in flight")
        self._in_flight[key] = count + 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            left = self._in_flight.get(key, 1) - 1
            if left > 0:
                self._in_flight[key] = left
            else:
                self._in_flight.pop(key, None)

        return release
