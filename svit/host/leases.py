"""Leases: which host owns an address on a shared store.

A lease is one key per address (:func:`svit.store.keys.lease_key`) holding
``{owner, epoch, expires}``. It is only ever written with an expectation on its
current bytes (a compare-and-swap), so two hosts cannot both believe they took it.
A holder renews it before it expires; anyone may take an expired lease over with
``epoch + 1``. The holder's durable handle carries the lease bytes as a fence
(:attr:`DurableProcess.fences`), so once another host has taken the address over (or
merely renewed nothing and lost it), every commit the old holder attempts is refused
with ``PersistenceConflict``: a stale owner can never commit.

Expiry is wall-clock time (seconds since the epoch), since the hosts are separate OS
processes, possibly on separate machines; keep the TTL well above their clock skew.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import PersistenceConflict
from ..store import keys
from ..store.engine import StorageEngine

__all__ = ["Lease", "LeaseKeeper", "decode_lease", "encode_lease"]


@dataclass(frozen=True)
class Lease:
    """One held (or observed) lease: ``raw`` is its exact stored bytes (the fence value)."""

    address: str
    owner: str
    epoch: int
    expires: float
    raw: bytes

    @property
    def fence(self) -> tuple[str, bytes, bytes | None]:
        """The expectation every commit of the owned address carries."""
        return (keys.CF_DEFAULT, keys.lease_key(self.address), self.raw)


def encode_lease(owner: str, epoch: int, expires: float) -> bytes:
    return json.dumps({"owner": owner, "epoch": epoch, "expires": round(expires, 6)},
                      sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode_lease(address: str, raw: bytes) -> Lease | None:
    """The lease ``raw`` describes; None for bytes that are not a lease record (treated as
    expired, so a damaged record is taken over rather than blocking the address forever)."""
    try:
        record: Any = json.loads(raw.decode("utf-8"))
        owner, epoch, expires = record["owner"], record["epoch"], record["expires"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
    if type(owner) is not str or type(epoch) is not int or not isinstance(expires, (int, float)):
        return None
    return Lease(address, owner, epoch, float(expires), raw)


class LeaseKeeper:
    """Takes, renews and releases the leases of one host (``owner``) in one engine.

    Every write is a single batch with one expectation on the lease key; a lost race is
    a ``PersistenceConflict`` from the engine and just means "not ours".
    """

    def __init__(self, engine: StorageEngine, owner: str, ttl: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.owner = owner
        self.ttl = ttl
        self.clock = clock

    def read(self, address: str) -> tuple[bytes | None, Lease | None]:
        raw = self.engine.get(keys.CF_DEFAULT, keys.lease_key(address))
        return raw, (None if raw is None else decode_lease(address, raw))

    def _swap(self, address: str, expected: bytes | None, new: bytes) -> bool:
        batch = self.engine.batch()
        key = keys.lease_key(address)
        batch.expect(keys.CF_DEFAULT, key, expected)
        batch.put(keys.CF_DEFAULT, key, new)
        try:
            self.engine.write(batch)
        except PersistenceConflict:
            return False
        return True

    def acquire(self, address: str) -> Lease | None:
        """Take ``address``'s lease when it is free, expired or already ours; None when
        another live holder has it or a racing host took it first."""
        return self.claim(address)[0]

    def claim(self, address: str) -> tuple[Lease | None, Lease | None]:
        """``(ours, theirs)``: the lease taken (as :meth:`acquire`), or the live lease of
        the other holder that kept us from it (None when a racing host won the swap)."""
        raw, current = self.read(address)
        now = self.clock()
        if current is not None and current.owner == self.owner:
            return self.renew(current), None
        if current is not None and current.expires > now:
            return None, current
        epoch = 1 if current is None else current.epoch + 1
        if raw is not None and current is None:
            epoch = 1  # an unreadable record: start the count again
        new = encode_lease(self.owner, epoch, now + self.ttl)
        if not self._swap(address, raw, new):
            return None, None
        return Lease(address, self.owner, epoch, now + self.ttl, new), None

    def renew(self, lease: Lease) -> Lease | None:
        """Extend a held lease (same epoch); None when it was lost (taken over)."""
        now = self.clock()
        new = encode_lease(self.owner, lease.epoch, now + self.ttl)
        if not self._swap(lease.address, lease.raw, new):
            return None
        return Lease(lease.address, self.owner, lease.epoch, now + self.ttl, new)

    def renew_many(self, leases: list[Lease]) -> dict[str, Lease | None]:
        """Renew several held leases in ONE write (each with its own expectation); when any
        was lost the batch is refused as a whole, and each is then renewed on its own.
        Returns each address's renewed lease, or None for one that was lost."""
        if len(leases) <= 1:
            return {lease.address: self.renew(lease) for lease in leases}
        now = self.clock()
        batch = self.engine.batch()
        renewed: dict[str, Lease | None] = {}
        for lease in leases:
            key = keys.lease_key(lease.address)
            new = encode_lease(self.owner, lease.epoch, now + self.ttl)
            batch.expect(keys.CF_DEFAULT, key, lease.raw)
            batch.put(keys.CF_DEFAULT, key, new)
            renewed[lease.address] = Lease(lease.address, self.owner, lease.epoch, now + self.ttl, new)
        try:
            self.engine.write(batch)
        except PersistenceConflict:
            return {lease.address: self.renew(lease) for lease in leases}
        return renewed

    def release(self, lease: Lease) -> bool:
        """Give a held lease up (so anyone may take it at once); False when already lost.

        The record stays, expired, so the next holder's epoch still counts up."""
        return self._swap(lease.address, lease.raw, encode_lease(self.owner, lease.epoch, 0.0))

    def held_by_us(self, lease: Lease) -> bool:
        """True when the stored lease is still exactly ``lease``."""
        raw, _current = self.read(lease.address)
        return raw == lease.raw

    def needs_renewal(self, lease: Lease) -> bool:
        """Past half its TTL: renew now, leaving the other half as slack."""
        return lease.expires - self.clock() < self.ttl / 2
