"""The tunable bounds of ``svit serve`` (what one client or one stream may cost)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_LISTEN_PORT", "ServeOptions"]

DEFAULT_LISTEN_PORT = 8470


@dataclass(frozen=True)
class ServeOptions:
    #: A request body longer than this is refused (413), before and while it is read.
    max_body_bytes: int = 1024 * 1024
    #: Requests one token may have in flight at once (event streams included); beyond: 429.
    max_concurrent_per_token: int = 8
    #: How often an event stream looks at the store for commits made elsewhere (another
    #: process or machine writing the same PostgreSQL database); commits made through this
    #: server wake the stream at once.
    poll_interval_seconds: float = 1.0
    #: A comment line sent to an idle event stream this often, so proxies keep it open.
    idle_ping_seconds: float = 15.0
    #: Transactions read from the store per step of an event stream (one page is all a
    #: stream holds in memory, however slow its client reads).
    events_page: int = 256
    #: Per-address controllers (each holding a durable handle) kept at once (LRU).
    handle_cache_size: int = 64
    #: Receipts kept per address (``svit-control@1``).
    receipt_limit: int = 256
    #: A whole value read (``/v1/read``) whose encoding is larger than this is refused
    #: (422): read below it, or ask for a capped preview.
    max_answer_bytes: int = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_concurrent_per_token", "events_page", "handle_cache_size", "receipt_limit",
                     "max_answer_bytes"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive integer")
        if not 1 <= self.events_page <= 4096:
            raise ValueError("events_page must be 1-4096")
        for name in ("poll_interval_seconds", "idle_ping_seconds"):
            value = getattr(self, name)
            if type(value) not in (int, float) or not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds")
