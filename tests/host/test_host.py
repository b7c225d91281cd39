"""The host on one store: delivery driven handlers, fairness, back pressure, failures,
idle and stop (the store fixture runs each test on every engine)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from svit import Process
from svit.errors import InvalidValue, PersistenceNotFound, PersistenceUnavailable
from svit.host import Host, HostTimeout
from svit.store import ProcessStore, keys
from svit.store.faults import FailingWrites
from tests.host.scripts import FAIL_ON, RECORD, relay_process

PREFIX = "svit://local/hosttest/"


def recorder(address: str) -> Process:
    return Process.builder(address).memory("seen", []).library("on_message", RECORD).library("fails", FAIL_ON).build()


@pytest.fixture
def hosts() -> Iterator[list[Host]]:
    made: list[Host] = []
    yield made
    for host in made:
        host.stop(drain=True)


def started(hosts: list[Host], store: ProcessStore, route: str = "/lib/on_message", **options: object) -> Host:
    host = Host(store, poll_interval=0.02, **options)  # type: ignore[arg-type]
    host.handle(PREFIX, script=route)
    hosts.append(host)
    return host.start()


def test_messages_between_processes_arrive_once_and_in_order(store: ProcessStore, hosts: list[Host]) -> None:
    peers = 4
    handles = [store.create(relay_process(PREFIX + "r", i, peers)) for i in range(peers)]
    for handle in handles:
        handle.exec("/lib/seed", {"count": 3, "hops": 3})
    host = started(hosts, store)
    host.idle(timeout=30)
    states = [store.resume(PREFIX + f"r{i}") for i in range(peers)]
    received = sum(s.read("/memory/received") for s in states)
    sent = sum(s.read("/memory/sent") for s in states)
    assert received == sent == peers * 3 * 4
    assert all(s.read("/memory/bad") == 0 for s in states)
    assert all(s.read("/inbox") == [] and s.read("/system/outbox") == [] for s in states)
    assert store.mailbox.targets() == [] and store.mailbox.unsettled() == []
    assert host.stats().delivered == sent and host.stats().turns == received


def test_send_wakes_the_handler_at_once(store: ProcessStore, hosts: list[Host]) -> None:
    store.create(recorder(PREFIX + "one"))
    host = started(hosts, store)
    host.send(PREFIX + "one", "hello")
    host.idle(timeout=10)
    assert store.resume(PREFIX + "one").read("/memory/seen") == ["hello"]
    with pytest.raises(PersistenceNotFound):
        host.send(PREFIX + "nobody", "hello")


def test_one_busy_process_cannot_starve_the_others(store: ProcessStore, hosts: list[Host]) -> None:
    busy = store.create(recorder(PREFIX + "a-busy"))
    for n in range(60):
        busy.enqueue_inbox({"body": n})
    quiet = [store.create(recorder(PREFIX + f"b{i}")) for i in range(4)]
    for handle in quiet:
        handle.enqueue_inbox({"body": "only"})
    order: list[str] = []
    host = started(hosts, store, workers=1, on_turn=lambda address, outcome: order.append(address))
    host.idle(timeout=60)
    assert order.count(PREFIX + "a-busy") == 60
    # Round-robin slots: each quiet process is served after at most a few slots of the
    # busy one, never after all sixty.
    last_quiet = max(order.index(handle.address) for handle in quiet)
    assert last_quiet < 12, order[:20]


def test_a_full_inbox_holds_mail_back_in_the_mailbox(store: ProcessStore, hosts: list[Host]) -> None:
    sender = store.create(Process.builder(PREFIX + "sender").library(
        "burst", f'(define (main n) (do (send! "{PREFIX}x-target" 1) (send! "{PREFIX}x-target" 2) '
                 f'(send! "{PREFIX}x-target" 3) (send! "{PREFIX}x-target" 4) (send! "{PREFIX}x-target" 5) n))').build())
    store.create(recorder(PREFIX + "x-target"))
    sender.exec("/lib/burst", 0)
    host = Host(store, poll_interval=0.02, inbox_limit=2)  # no route: the inbox only fills
    hosts.append(host)
    host.start()
    host.idle(timeout=10)
    target = store.resume(PREFIX + "x-target")
    assert [item["body"] for item in target.read("/inbox")] == [1, 2]
    assert [m["body"] for m in store.mailbox.pending(PREFIX + "x-target")] == [3, 4, 5]


def test_addresses_no_slot_can_serve_never_hide_the_ones_after_them(store: ProcessStore, hosts: list[Host]) -> None:
    """More addresses than ``scan_limit`` that sort first and stay listed (unrouted inboxes
    that are full, with mail waiting for them) must not keep the host from finding a
    routed address after them: its inbox item from before the host started, and its mail."""
    plain = [f"svit://local/hosttest-plain/p{n}" for n in range(3)]
    for address in plain:
        handle = store.create(Process.builder(address).build())
        handle.enqueue_inbox({"body": "stays"})
    sends = " ".join(f'(send! "{address}" 1)' for address in plain)
    sender = store.create(Process.builder("svit://local/hosttest-plain/sender").library(
        "go", f'(define (main n) (do {sends} (send! "{PREFIX}z" "mail") n))').build())
    sender.exec("/lib/go", 0)
    store.create(recorder(PREFIX + "z")).enqueue_inbox({"body": "before"})
    host = started(hosts, store, scan_limit=2, inbox_limit=1)
    host.idle(timeout=30)
    assert store.resume(PREFIX + "z").read("/memory/seen") == ["before", "mail"]
    assert [m["to"] for m in store.mailbox.pending(plain[0])] == [plain[0]]


def test_mail_is_not_held_back_for_ever_by_items_sent_straight_to_the_inbox(
        store: ProcessStore, hosts: list[Host]) -> None:
    """Mail waits for the inbox to drain, but an inbox that ``host.send`` keeps from
    draining (here: one more item each time one is handled) must not hold it back for
    ever: it is delivered once it has waited ``delivery_batch`` slots."""
    sender = store.create(Process.builder(PREFIX + "mailer").library(
        "go", f'(define (main n) (do (send! "{PREFIX}busy" "mail") n))').build())
    target = store.create(recorder(PREFIX + "busy"))
    target.enqueue_inbox({"body": 0})
    sender.exec("/lib/go", 0)
    sent = [0]

    def on_turn(address: str, outcome: str) -> None:
        if address == PREFIX + "busy" and sent[0] < 100:
            sent[0] += 1
            host.send(address, sent[0])

    host = Host(store, workers=1, poll_interval=0.02, delivery_batch=4, on_turn=on_turn)
    host.handle(PREFIX, script="/lib/on_message")
    hosts.append(host)
    host.start()
    host.idle(timeout=60)
    seen = store.resume(PREFIX + "busy").read("/memory/seen")
    assert sorted(body for body in seen if body != "mail") == list(range(101))
    assert seen.index("mail") <= 10, seen[:20]


def test_a_failing_handler_keeps_its_item_and_the_host_goes_on(store: ProcessStore, hosts: list[Host]) -> None:
    store.create(recorder(PREFIX + "bad"))
    store.create(recorder(PREFIX + "good"))
    host = started(hosts, store, route="/lib/fails")
    host.send(PREFIX + "bad", "boom")
    host.send(PREFIX + "bad", "after")
    host.send(PREFIX + "good", "fine")
    host.idle(timeout=10)
    failure = host.failures()[PREFIX + "bad"]
    assert failure.count >= 1 and failure.last_error["code"] == "script_failed"
    bad = store.resume(PREFIX + "bad")
    assert [item["body"] for item in bad.read("/inbox")] == ["boom", "after"] and bad.read("/memory/seen") == []
    assert store.resume(PREFIX + "good").read("/memory/seen") == ["fine"]
    assert PREFIX + "good" not in host.failures()


def test_mail_to_an_absent_address_is_kept_as_undeliverable(store: ProcessStore, hosts: list[Host]) -> None:
    sender = store.create(Process.builder(PREFIX + "lonely").library(
        "go", f'(define (main n) (do (send! "{PREFIX}nobody" n) n))').build())
    sender.exec("/lib/go", 7)
    host = started(hosts, store)
    host.idle(timeout=10)
    refused = store.mailbox.undeliverable(PREFIX + "lonely")
    assert len(refused) == 1 and "no such address" in str(refused[0])
    outbox = store.resume(PREFIX + "lonely").read("/system/outbox")
    assert len(outbox) == 1 and "no such address" in outbox[0]["undeliverable"]
    assert host.stats().undeliverable == 1


def test_sends_another_writer_committed_are_settled_by_the_host(store: ProcessStore, hosts: list[Host]) -> None:
    """The host holds an address's handle; a commit outside the host (a second writer
    of the store) sends from it, so that handle is behind its head when the delivery
    outcomes come to be settled. The host must settle them on the stored state, never
    drop them: the intents leave the committed outbox."""
    store.create(Process.builder(PREFIX + "talker").memory("seen", []).library("on_message", RECORD)
                 .library("go", f'(define (main n) (do (send! "{PREFIX}listener" n) n))').build())
    store.create(recorder(PREFIX + "listener"))
    host = started(hosts, store)
    host.send(PREFIX + "talker", "hello")  # the host opens the talker's handle and keeps it
    host.idle(timeout=10)
    assert PREFIX + "talker" in host.owned()
    store.resume(PREFIX + "talker").exec("/lib/go", 7)
    host.idle(timeout=10)
    assert store.resume(PREFIX + "listener").read("/memory/seen") == [7]
    assert store.resume(PREFIX + "talker").read("/system/outbox") == []
    assert store.mailbox.unsettled() == [] and store.mailbox.targets() == []
    assert host.stats().conflicts >= 1  # the stale handle was dropped, not trusted


def test_idle_times_out_while_work_remains(store: ProcessStore, hosts: list[Host]) -> None:
    handle = store.create(recorder(PREFIX + "long"))
    for n in range(300):
        handle.enqueue_inbox({"body": n})
    host = started(hosts, store, workers=1)
    with pytest.raises(HostTimeout) as raised:
        host.idle(timeout=0.05)
    assert isinstance(raised.value, TimeoutError) and raised.value.code == "host_timeout"


def test_stop_drains_running_slots_and_leaves_nothing_half_done(store: ProcessStore, hosts: list[Host]) -> None:
    handles = [store.create(recorder(PREFIX + f"s{i}")) for i in range(3)]
    for handle in handles:
        for n in range(40):
            handle.enqueue_inbox({"body": n})
    host = started(hosts, store, workers=2)
    time.sleep(0.2)
    host.stop(drain=True)
    assert not any(t.is_alive() for t in threading.enumerate() if t.name.startswith("svit-host"))
    for handle in handles:
        state = store.resume(handle.address)
        seen = state.read("/memory/seen")
        left = [item["body"] for item in state.read("/inbox")]
        assert seen + left == list(range(40))  # each item handled once or still waiting


def test_open_handles_stay_bounded(store: ProcessStore, hosts: list[Host]) -> None:
    for i in range(30):
        store.create(recorder(PREFIX + f"m{i:02}")).enqueue_inbox({"body": i})
    host = started(hosts, store, workers=2, open_handles=4)
    host.idle(timeout=30)
    assert host.stats().open_handles <= 4
    assert host.stats().turns == 30


def test_leases_are_taken_on_a_shared_store_only(store: ProcessStore, hosts: list[Host]) -> None:
    store.create(recorder(PREFIX + "solo"))
    host = started(hosts, store)
    host.send(PREFIX + "solo", "x")
    host.idle(timeout=10)
    written = list(store.engine.scan(keys.CF_DEFAULT, keys.lease_prefix()))
    if store.engine.shared:  # other hosts may write the store: the one address served is leased
        assert host.leases is not None
        assert len(written) == 1
    else:  # the embedded store's one open process is the owner
        assert host.leases is None
        assert written == []


def test_options_are_checked() -> None:
    with pytest.raises(InvalidValue):
        Host(None, workers=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidValue):
        Host(None, poll_interval=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidValue):
        Host(None, inbox_limit=0)  # type: ignore[arg-type]
    # Counts the mailbox would refuse at every delivery or poll, and a backoff of no wait.
    for bad in ({"inbox_limit": 1_000_000}, {"delivery_batch": 1_000_000}, {"scan_limit": 0},
                {"scan_limit": 1_000_000}, {"retry_backoff": (0, 1)}, {"retry_backoff": (2.0, 1.0)}):
        with pytest.raises(InvalidValue):
            Host(None, **bad)  # type: ignore[arg-type]


def test_routes_are_checked(store: ProcessStore) -> None:
    host = Host(store)
    with pytest.raises(InvalidValue):
        host.handle(PREFIX, script="on_message")
    with pytest.raises(InvalidValue):
        host.handle("local/x", script="/lib/on_message")
    with pytest.raises(InvalidValue):
        host.agents(PREFIX, reasoner="not callable")  # type: ignore[arg-type]
    with pytest.raises(InvalidValue):
        host.idle(1)


def test_a_terminal_store_stops_the_host_and_idle_says_why(store: ProcessStore, hosts: list[Host]) -> None:
    store.create(recorder(PREFIX + "doomed"))
    host = started(hosts, store)
    with FailingWrites(store), pytest.raises(PersistenceUnavailable):
        host.send(PREFIX + "doomed", "x")  # this write fails: the store is terminal
    assert store.terminal
    with pytest.raises(PersistenceUnavailable):
        host.idle(timeout=10)  # the next poll finds the store terminal and the host stops
    assert host.failed is not None and host.failed.code == "persistence_unavailable"
