"""Leases: one owner per address at a time, epochs that count up, and a fence that
refuses a stale owner's commit."""

from __future__ import annotations

import time

import pytest

from svit import Process
from svit.errors import PersistenceConflict
from svit.host import Host, LeaseKeeper
from svit.host.leases import decode_lease
from svit.store import ProcessStore, keys
from tests.host.scripts import RECORD

ADDR = "svit://local/leasetest/a"


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def keepers(store: ProcessStore, clock: Clock) -> tuple[LeaseKeeper, LeaseKeeper]:
    return LeaseKeeper(store.engine, "host-a", 5.0, clock), LeaseKeeper(store.engine, "host-b", 5.0, clock)


def test_one_holder_at_a_time_and_takeover_after_the_ttl(store: ProcessStore) -> None:
    clock = Clock()
    a, b = keepers(store, clock)
    held = a.acquire(ADDR)
    assert held is not None and (held.owner, held.epoch, held.expires) == ("host-a", 1, 1005.0)
    assert b.acquire(ADDR) is None
    clock.now += 3
    renewed = a.renew(held)
    assert renewed is not None and renewed.epoch == 1 and renewed.expires == 1008.0
    clock.now += 4
    assert b.acquire(ADDR) is None  # renewed: still live
    clock.now += 2
    taken = b.acquire(ADDR)
    assert taken is not None and (taken.owner, taken.epoch) == ("host-b", 2)
    assert a.renew(renewed) is None and not a.held_by_us(renewed)
    assert not a.release(renewed)


def test_a_released_lease_is_free_at_once_and_its_epoch_still_counts(store: ProcessStore) -> None:
    clock = Clock()
    a, b = keepers(store, clock)
    held = a.acquire(ADDR)
    assert held is not None and a.release(held)
    taken = b.acquire(ADDR)
    assert taken is not None and taken.epoch == 2


def test_a_damaged_record_is_taken_over() -> None:
    assert decode_lease(ADDR, b"not json") is None
    assert decode_lease(ADDR, b'{"owner": 1, "epoch": 1, "expires": 2}') is None


def test_the_fence_refuses_a_stale_owners_commit(store: ProcessStore) -> None:
    clock = Clock()
    a, b = keepers(store, clock)
    handle = store.create(Process.builder(ADDR).memory("n", 0).build())
    held = a.acquire(ADDR)
    assert held is not None
    handle.fences = [held.fence]
    handle.write("/memory/n", 1)  # the owner commits
    clock.now += 10
    assert b.acquire(ADDR) is not None  # a paused owner's lease is taken over
    before = (handle.version, handle.root_hash)
    with pytest.raises(PersistenceConflict):
        handle.write("/memory/n", 2)
    assert (handle.version, handle.root_hash) == before
    assert store.resume(ADDR).read("/memory/n") == 1


def test_hosts_on_a_shared_store_count_a_stale_owners_refusal(postgresql_url: str) -> None:
    first, second = ProcessStore.open(postgresql_url), ProcessStore.open(postgresql_url)
    try:
        first.create(Process.builder(ADDR).memory("seen", []).library("on_message", RECORD).build())
        a = Host(first, lease_ttl=0.2)
        b = Host(second, lease_ttl=0.2)
        a.send(ADDR, "from a")  # a takes the lease and commits
        assert a.owned() == [ADDR]
        with pytest.raises(PersistenceConflict):
            b.send(ADDR, "from b")  # a's lease is live
        time.sleep(0.3)
        b.send(ADDR, "from b")  # expired: b takes over with epoch 2
        with pytest.raises(PersistenceConflict):
            a.send(ADDR, "stale")  # a still thinks it owns the address; its fence refuses
        assert a.stale_refusals == 1 and b.stale_refusals == 0
        raw = second.engine.get(keys.CF_DEFAULT, keys.lease_key(ADDR))
        lease = decode_lease(ADDR, raw or b"")
        assert lease is not None and lease.owner == b.owner and lease.epoch == 2
        assert [item["body"] for item in second.resume(ADDR).read("/inbox")] == ["from a", "from b"]
    finally:
        first.close()
        second.close()


def test_renewing_many_at_once_keeps_the_live_ones_when_one_was_lost(store: ProcessStore) -> None:
    clock = Clock()
    a, b = keepers(store, clock)
    first, second = a.acquire(ADDR + "1"), a.acquire(ADDR + "2")
    assert first is not None and second is not None
    clock.now += 3
    both = a.renew_many([first, second])
    assert [lease.expires if lease else None for lease in both.values()] == [1008.0, 1008.0]
    clock.now += 6  # both expired; b takes the first over
    assert b.acquire(ADDR + "1") is not None
    renewed = both[ADDR + "2"]
    assert renewed is not None
    result = a.renew_many([lease for lease in both.values() if lease is not None])
    assert result[ADDR + "1"] is None
    kept = result[ADDR + "2"]
    assert kept is not None and kept.epoch == 1
