"""Durable control receipts (svit-control@1 over a store handle): every test runs on
RocksDB and on PostgreSQL through the ``store`` fixture."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from svit import Process
from svit.control import (
    PROTOCOL,
    Committed,
    Conflict,
    ControlResponse,
    ProcessController,
    Rejected,
    encode_response,
)
from svit.errors import (
    InvalidControlConfiguration,
    InvalidPersistence,
    PersistenceNotFound,
    PersistenceUnavailable,
)
from svit.mounts import Mount
from svit.store import ProcessStore, StoreReceipts, keys, receipts
from svit.store.faults import FailingWrites
from svit.store.keys import CF_RECORD
from svit.values import to_tagged
from tests.conftest import location_of, reopen

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADDRESS = "svit://local/test/receipts"
COUNTER = """
(define (main input)
  (do (write "/memory/count" (+ (read "/memory/count") (value-get input "/by")))
      (log-info! "added" input)
      (send! "svit://local/test/peer" (read "/memory/count"))
      (read "/memory/count")))
"""


def make_process(address: str = ADDRESS) -> Process:
    return (
        Process.builder(address)
        .memory("count", 0)
        .library("add", COUNTER)
        .library("fail", '(define (main input) (do (write "/memory/count" 99) (panic "no")))')
        .build()
    )


def request(request_id: str, expected: int, by: Any = 1, *, client: str = "agent-a", script: str = "add",
            process_id: str = ADDRESS) -> dict[str, Any]:
    return {
        "protocol": PROTOCOL,
        "client_id": client,
        "request_id": request_id,
        "process_id": process_id,
        "expected_version": expected,
        "command": {"operation": "activate", "script": script, "input": to_tagged({"by": by})},
    }


def wire(response: ControlResponse) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(encode_response(response))
    return answer


def same_answer(replayed: ControlResponse, original: ControlResponse) -> bool:
    """The replay is the original's exact bytes but for ``replayed``."""
    assert replayed.replayed and not original.replayed
    text = encode_response(replayed)
    return text.replace('"replayed":true', '"replayed":false', 1) == encode_response(original)


def stored_keys(store: ProcessStore, address: str = ADDRESS) -> list[bytes]:
    return [key for prefix in (keys.receipt_prefix(address), keys.receipt_order_prefix(address))
            for key, _ in store.engine.scan(CF_RECORD, prefix)]


def put_raw(store: ProcessStore, key: bytes, value: bytes) -> None:
    """Write bytes under a receipt key, bypassing the receipt book (to tamper with it)."""
    batch = store.engine.batch()
    batch.put(CF_RECORD, key, value)
    store.engine.write(batch)


# ---------------------------------------------------------------------------- retries across a restart


def test_a_retry_after_reopening_is_answered_from_its_receipt(store: ProcessStore) -> None:
    controller = ProcessController.durable(store.create(make_process()))
    committed = controller.execute(request("r1", 0, 2))
    conflict = controller.execute(request("r2", 0))
    failed = controller.execute(request("r3", 1, script="fail"))
    assert isinstance(committed.outcome, Committed) and committed.outcome.activation["changed"]
    assert isinstance(conflict.outcome, Conflict) and conflict.outcome.actual_version == 1
    assert isinstance(failed.outcome, Rejected) and failed.outcome.failure.code == "script_failed"
    assert controller.receipts() == 3

    store = reopen(store)
    try:
        handle = store.resume(ADDRESS)
        controller = ProcessController.durable(handle)
        for original, retry in ((committed, request("r1", 0, 2)), (conflict, request("r2", 0)),
                                (failed, request("r3", 1, script="fail"))):
            again = controller.execute(retry)
            assert same_answer(again, original)
        # Nothing was applied again: no new version, no new transaction.
        assert controller.process.version == 1 and controller.process.read("/memory/count") == 2
        assert [t.process_version_after for t in handle.query()] == [1]
        assert controller.receipts() == 3
    finally:
        store.close()


def test_a_reused_request_id_is_rejected_and_not_stored(store: ProcessStore) -> None:
    controller = ProcessController.durable(store.create(make_process()))
    first = controller.execute(request("r1", 0, 1))
    store = reopen(store)
    try:
        controller = ProcessController.durable(store.resume(ADDRESS))
        reused = controller.execute(request("r1", 1, 5))
        assert isinstance(reused.outcome, Rejected) and reused.outcome.failure.code == "request_id_reused"
        assert not reused.replayed and reused.outcome.version == 1
        assert controller.receipts() == 1
        assert same_answer(controller.execute(request("r1", 0, 1)), first)
        # Receipts are per client: another client may use the same request id.
        assert controller.execute(request("r1", 1, 5, client="agent-b")).outcome.status == "committed"
        assert controller.process.read("/memory/count") == 6
    finally:
        store.close()


def test_invalid_commands_and_other_processes_are_not_stored(store: ProcessStore) -> None:
    controller = ProcessController.durable(store.create(make_process()))
    mismatch = controller.execute(request("r1", 0, process_id="svit://local/test/other"))
    assert isinstance(mismatch.outcome, Rejected) and mismatch.outcome.failure.code == "process_mismatch"
    bad_name = controller.execute(request("r1", 0, script="no/such"))
    assert isinstance(bad_name.outcome, Rejected) and bad_name.outcome.failure.code == "invalid_script_name"
    too_big = controller.execute(request("r1", 0, by="x" * (1024 * 1024 + 1)))
    assert isinstance(too_big.outcome, Rejected)
    assert controller.receipts() == 0 and stored_keys(store) == []
    # The ids stay usable: the valid request commits.
    assert controller.execute(request("r1", 0)).outcome.status == "committed"


def test_the_stored_answer_carries_mount_write_paths(store: ProcessStore, tmp_path: Any) -> None:
    root = tmp_path / "files"
    root.mkdir()
    process = (Process.builder(ADDRESS).memory("count", 0)
               .library("note", '(define (main input) (do (write "/mounts/files/b.txt" "hi") (write "/memory/count" 1)))')
               .build())
    handle = store.create(process)
    handle.attach_mount("files", Mount.writable_folder(root))
    controller = ProcessController.durable(handle)
    answer = controller.execute(request("r1", handle.version, script="note"))
    assert isinstance(answer.outcome, Committed)
    assert "/mounts/files/b.txt" in answer.outcome.activation["changed"]
    stored = store.receipts(ADDRESS).lookup("agent-a", "r1")
    assert stored is not None and stored[1] == answer
    assert (root / "b.txt").read_text() == "hi"


# ---------------------------------------------------------------------------- pruning and the address lifecycle


def test_receipts_are_pruned_fifo_at_the_limit_in_the_same_batch(store: ProcessStore) -> None:
    controller = ProcessController.durable(store.create(make_process()), receipt_limit=3)
    for number in range(5):
        assert controller.execute(request(f"r{number}", number)).outcome.status == "committed"
    book = store.receipts(ADDRESS)
    assert book.requests() == [("agent-a", "r2"), ("agent-a", "r3"), ("agent-a", "r4")]
    assert len(stored_keys(store)) == 6  # three receipts, three order entries
    # An own write (a conflict) prunes too.
    assert controller.execute(request("late", 0)).outcome.status == "conflict"
    assert book.requests() == [("agent-a", "r3"), ("agent-a", "r4"), ("agent-a", "late")]
    # An evicted receipt: the version precondition still prevents a second commit.
    retry = controller.execute(request("r0", 0))
    assert not retry.replayed and retry.outcome == Conflict(0, 5, controller.process.root_hash)
    assert controller.execute(request("r4", 4)).replayed
    # A lower limit next time prunes down to it with the next write.
    store = reopen(store)
    try:
        controller = ProcessController.durable(store.resume(ADDRESS), receipt_limit=1)
        assert controller.execute(request("r5", 5)).outcome.status == "committed"
        assert store.receipts(ADDRESS).requests() == [("agent-a", "r5")]
        assert len(stored_keys(store)) == 2
    finally:
        store.close()


def test_receipt_limits_are_checked(store: ProcessStore) -> None:
    handle = store.create(make_process())
    for bad in (0, 4097, "8", True):
        with pytest.raises(InvalidControlConfiguration):
            ProcessController.durable(handle, receipt_limit=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidControlConfiguration):
            store.receipts(ADDRESS, bad)  # type: ignore[arg-type]
    assert ProcessController.durable(handle, receipt_limit=4096).receipt_limit == 4096


def test_receipts_are_removed_with_the_address(store: ProcessStore) -> None:
    controller = ProcessController.durable(store.create(make_process()))
    controller.execute(request("r1", 0))
    controller.execute(request("r2", 0))
    assert len(stored_keys(store)) == 4
    store.remove(ADDRESS)
    assert stored_keys(store) == []
    assert store.receipts(ADDRESS).lookup("agent-a", "r1") is None
    assert [t["address"] for t in store.archive_tombstones()] == [ADDRESS]
    # A stale controller answers, but keeps nothing for an address that is gone.
    gone = controller.execute(request("r3", 1))
    assert isinstance(gone.outcome, Rejected) and gone.outcome.failure.code == "persistence_not_found"
    with pytest.raises(PersistenceNotFound):
        store.receipts(ADDRESS).record("agent-a", "r3", "0" * 64, gone)
    assert stored_keys(store) == []
    # The same ids on a new process at that address are new requests.
    controller = ProcessController.durable(store.create(make_process()))
    assert controller.execute(request("r1", 0)).outcome.status == "committed"


def test_an_archived_state_installed_over_the_address_drops_its_receipts(store: ProcessStore) -> None:
    # The archive installs an older state: the commit r1 answered is gone with the replaced
    # history, so a retry of r1 must apply again instead of replaying the lost answer.
    older = make_process()
    controller = ProcessController.durable(store.create(make_process()))
    assert controller.execute(request("r1", 0, 2)).outcome.status == "committed"
    assert stored_keys(store)
    store.install_archived(older)
    assert stored_keys(store) == []
    controller = ProcessController.durable(store.resume(ADDRESS))
    again = controller.execute(request("r1", 0, 2))
    assert not again.replayed and again.outcome.status == "committed"
    assert controller.process.read("/memory/count") == 2


def test_a_fork_starts_without_receipts_and_a_cut_keeps_them(store: ProcessStore) -> None:
    handle = store.create(make_process())
    controller = ProcessController.durable(handle)
    first = controller.execute(request("r1", 0))
    child_address = "svit://local/test/receipts-child"
    child = ProcessController.durable(controller.process.fork(child_address))  # type: ignore[attr-defined]
    assert store.receipts(child_address).requests() == [] and stored_keys(store, child_address) == []
    # The child answers the same ids as new requests (it commits its own version 2).
    fresh = child.execute(request("r1", 1, process_id=child_address))
    assert fresh.outcome.status == "committed" and not fresh.replayed
    assert store.receipts(ADDRESS).requests() == [("agent-a", "r1")]
    store.remove(child_address)
    controller.process.cut()  # type: ignore[attr-defined]
    store = reopen(store)
    try:
        assert same_answer(ProcessController.durable(store.resume(ADDRESS)).execute(request("r1", 0)), first)
    finally:
        store.close()


# ---------------------------------------------------------------------------- stored bytes are checked


@pytest.mark.parametrize("damage", ["flip", "truncate", "not_cbor", "other_key", "empty"])
def test_a_corrupt_receipt_is_invalid_persistence(store: ProcessStore, damage: str) -> None:
    controller = ProcessController.durable(store.create(make_process()))
    controller.execute(request("r1", 0))
    controller.execute(request("r2", 1))
    key = keys.receipt_key(ADDRESS, "agent-a", "r1")
    raw = store.engine.get(CF_RECORD, key)
    other = store.engine.get(CF_RECORD, keys.receipt_key(ADDRESS, "agent-a", "r2"))
    assert raw is not None and other is not None
    middle = len(raw) // 2
    damaged = {
        "flip": raw[:middle] + bytes([raw[middle] ^ 0x01]) + raw[middle + 1:],
        "truncate": raw[:-3],
        "not_cbor": b"\xff\x00garbage",
        "other_key": other,  # a sealed receipt, but of another request
        "empty": b"",
    }[damage]
    put_raw(store, key, damaged)
    with pytest.raises(InvalidPersistence, match=f"control receipt of {ADDRESS}") as caught:
        controller.execute(request("r1", 0))
    assert caught.value.code == "invalid_persistence" and "Traceback" not in str(caught.value)
    assert controller.process.version == 2  # nothing ran


def test_a_corrupt_order_entry_refuses_the_pruning_write(store: ProcessStore) -> None:
    controller = ProcessController.durable(store.create(make_process()), receipt_limit=1)
    controller.execute(request("r1", 0))
    put_raw(store, keys.receipt_order_key(ADDRESS, 0), b"\xa0")
    # The commit needing that entry is refused, so nothing commits without its receipt,
    # and the refusal cannot be kept either: the error reaches the caller.
    with pytest.raises(InvalidPersistence, match=f"receipt order entry of {ADDRESS}"):
        controller.execute(request("r2", 1))
    assert controller.process.version == 1 and store.resume(ADDRESS).version == 1


def test_an_oversized_answer_refuses_its_commit(store: ProcessStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receipts, "MAX_RECEIPT_BYTES", 500)  # the committed answer takes ~600
    controller = ProcessController.durable(store.create(make_process()))
    answer = controller.execute(request("r1", 0, 5))
    assert isinstance(answer.outcome, Rejected) and answer.outcome.failure.code == "resource_limit_exceeded"
    assert controller.process.version == 0 and store.resume(ADDRESS).version == 0
    # The refusal is the receipt (it is small).
    assert controller.execute(request("r1", 0, 5)).replayed


# ---------------------------------------------------------------------------- atomicity with the commit


def test_a_commit_whose_sync_failed_is_answered_after_reopening(store: ProcessStore) -> None:
    controller = ProcessController.durable(store.create(make_process()))
    with FailingWrites(store, apply=True), pytest.raises(PersistenceUnavailable):
        # The batch landed but its sync reported an error: no answer is invented.
        controller.execute(request("r1", 0, 3))
    location = location_of(store)
    store.close()
    with ProcessStore.open(location) as reopened:
        controller = ProcessController.durable(reopened.resume(ADDRESS))
        again = controller.execute(request("r1", 0, 3))
        assert again.replayed and isinstance(again.outcome, Committed) and again.outcome.activation["version"] == 1
        assert controller.process.read("/memory/count") == 3


def test_a_commit_whose_write_failed_keeps_no_receipt(store: ProcessStore) -> None:
    controller = ProcessController.durable(store.create(make_process()))
    with FailingWrites(store, apply=False), pytest.raises(PersistenceUnavailable):
        controller.execute(request("r1", 0, 3))
    location = location_of(store)
    store.close()
    with ProcessStore.open(location) as reopened:
        controller = ProcessController.durable(reopened.resume(ADDRESS))
        assert controller.receipts() == 0
        answer = controller.execute(request("r1", 0, 3))
        assert not answer.replayed and answer.outcome.status == "committed"


def test_the_mailbox_keeps_working_beside_receipts(store: ProcessStore) -> None:
    store.create(make_process("svit://local/test/peer"))
    controller = ProcessController.durable(store.create(make_process()))
    answer = controller.execute(request("r1", 0, 4))
    assert isinstance(answer.outcome, Committed) and len(answer.outcome.activation["messages"]) == 1
    peer = store.resume("svit://local/test/peer")
    delivery = store.mailbox.deliver(peer)
    assert delivery.delivered == [f"{ADDRESS}:1:0"]
    assert peer.read("/inbox")[0]["body"] == 4


# ---------------------------------------------------------------------------- other writers and races


def test_a_second_writer_makes_the_old_version_a_conflict_with_the_true_one(store: ProcessStore) -> None:
    controller = ProcessController.durable(store.create(make_process()))
    assert controller.execute(request("r1", 0)).outcome.status == "committed"
    other = store.resume(ADDRESS)  # a host or the command line, behind the controller's back
    other.write("/memory/count", 40)
    other.exec("/lib/add", {"by": 2})
    stale = controller.execute(request("r2", 1))
    assert stale.outcome == Conflict(1, 3, other.root_hash)
    assert controller.observe()["version"] == 3
    answer = controller.execute(request("r3", 3))
    assert isinstance(answer.outcome, Committed) and answer.outcome.activation["output"] == 43
    assert store.resume(ADDRESS).read("/memory/count") == 43


def test_the_resumed_handle_keeps_hooks_mounts_and_fences(store: ProcessStore, tmp_path: Any) -> None:
    root = tmp_path / "files"
    root.mkdir()
    process = (Process.builder(ADDRESS).memory("count", 0)
               .library("note", '(define (main input) (write "/mounts/files/n.txt" "again"))').build())
    handle = store.create(process)
    handle.attach_mount("files", Mount.writable_folder(root))
    seen: list[str] = []

    class Observer:
        def after_activation(self, event: Any) -> None:
            seen.append(event.status)

    handle.hooks.append(Observer())
    handle.fences.append((CF_RECORD, keys.head_key("svit://local/test/none"), None))
    controller = ProcessController.durable(handle)
    other = store.resume(ADDRESS)
    other.write("/memory/count", 1)  # behind the controller's back
    answer = controller.execute(request("r1", other.version, script="note"))
    assert answer.outcome.status == "committed" and controller.process is not handle
    assert (root / "n.txt").read_text() == "again" and seen == ["committed"]
    assert controller.process.fences == handle.fences  # type: ignore[attr-defined]


def test_a_second_store_on_the_same_database(postgresql_url: str) -> None:
    # Only a shared engine can be opened twice at once (RocksDB refuses a second opener).
    store = ProcessStore.open(postgresql_url)
    controller = ProcessController.durable(store.create(make_process()))
    with store, ProcessStore.open(postgresql_url) as second:
        remote = ProcessController.durable(second.resume(ADDRESS))
        assert remote.execute(request("r1", 0, client="server-b")).outcome.status == "committed"
        stale = controller.execute(request("r1", 0))
        assert isinstance(stale.outcome, Conflict) and stale.outcome.actual_version == 1
        # Each sees the other's receipts.
        assert controller.execute(request("r1", 0, client="server-b")).replayed
        assert remote.execute(request("r1", 0)).replayed


class _OneShot:
    """A ``before_activation`` hook that runs ``action`` once, just before the next activation."""

    def __init__(self, action: Any) -> None:
        self.action = action

    def before_activation(self, activation_request: Any) -> Any:
        action, self.action = self.action, None
        if action is not None:
            action()
        return activation_request


def test_a_lost_compare_and_swap_is_a_conflict_with_the_re_read_version(store: ProcessStore) -> None:
    handle = store.create(make_process())
    controller = ProcessController.durable(handle)
    # Another writer commits after the controller checked the head, before its commit.
    handle.hooks.append(_OneShot(lambda: store.resume(ADDRESS).write("/memory/count", 10)))
    answer = controller.execute(request("r1", 0))
    assert isinstance(answer.outcome, Conflict) and answer.outcome.actual_version == 1
    assert controller.process.read("/memory/count") == 10
    assert same_answer(controller.execute(request("r1", 0)), answer)  # stored
    assert controller.execute(request("r2", 1)).outcome.status == "committed"


def test_a_receipt_written_beside_the_commit_wins_and_nothing_commits(store: ProcessStore) -> None:
    handle = store.create(make_process())
    controller = ProcessController.durable(handle)
    book = store.receipts(ADDRESS)
    theirs = ControlResponse("agent-a", "r1", ADDRESS, False, Conflict(0, 0, handle.root_hash))
    from svit.control import decode_request

    digest = decode_request(request("r1", 0)).digest()
    handle.hooks.append(_OneShot(lambda: book.record("agent-a", "r1", digest, theirs)))
    answer = controller.execute(request("r1", 0))
    assert answer.replayed and answer.outcome == theirs.outcome
    assert controller.process.version == 0 and store.resume(ADDRESS).version == 0
    # A receipt is never replaced.
    book.record("agent-a", "r1", digest, ControlResponse("agent-a", "r1", ADDRESS, False, Conflict(0, 9, "x")))
    stored = book.lookup("agent-a", "r1")
    assert stored is not None and stored[1] == theirs


def test_racing_threads_give_one_commit_and_one_conflict_per_round(store: ProcessStore) -> None:
    controller = ProcessController.durable(store.create(make_process()))
    rounds = 40
    for round_number in range(rounds):
        expected = controller.observe()["version"]
        results: list[str] = []
        barrier = threading.Barrier(2)

        def client(name: str, expected: int = expected, round_number: int = round_number) -> None:
            barrier.wait()
            results.append(controller.execute(request(f"round-{round_number}", expected, client=name)).outcome.status)

        threads = [threading.Thread(target=client, args=(name,)) for name in ("agent-a", "agent-b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(results) == ["committed", "conflict"], round_number
    assert store.resume(ADDRESS).read("/memory/count") == rounds
    assert controller.receipts() == 2 * rounds


def test_store_receipts_refuse_foreign_answers(store: ProcessStore) -> None:
    store.create(make_process())
    book = store.receipts(ADDRESS)
    assert isinstance(book, StoreReceipts) and book.limit == 256
    other = ControlResponse("agent-a", "r1", "svit://local/test/other", False, Conflict(0, 0, "x"))
    with pytest.raises(InvalidPersistence, match="its own request"):
        book.record("agent-a", "r1", "0" * 64, other)
    mine = ControlResponse("agent-a", "r1", ADDRESS, False, Conflict(0, 0, "x"))
    with pytest.raises(InvalidPersistence, match="fingerprint"):
        book.record("agent-a", "r1", "not a digest", mine)
    assert stored_keys(store) == []


# ---------------------------------------------------------------------------- crash atomicity (SIGKILL)

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "receipt_crash_worker.py")
CRASH_ADDRESS = "svit://local/crash/receipts"


def run_worker(location: str, first: int, rng: random.Random, *options: str) -> list[tuple[int, int]]:
    """Run the worker until it is killed (by us at a random moment, or by itself);
    returns the ``(k, expected version)`` of every request it announced."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, WORKER, location, str(first), *options], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    ready = threading.Event()

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("ready"):
                ready.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        assert ready.wait(30), "the worker did not start"
        if "--kill-after-commit" not in options:
            time.sleep(rng.uniform(0.05, 0.4))
            proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        thread.join(10)
        assert proc.stderr is not None
        errors = proc.stderr.read()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, errors[-2000:]
    sent = []
    for line in lines:
        parts = line.split()
        if line.endswith("\n") and len(parts) == 3 and parts[0] == "send":
            sent.append((int(parts[1]), int(parts[2])))
    return sent


def check_commits_and_receipts(location: str) -> dict[str, int]:
    """Every commit has its receipt and every receipt its commit; returns the version
    each committed request id answered."""
    with ProcessStore.open(location) as store:
        handle = store.resume(CRASH_ADDRESS)
        roots = {t.process_version_after: t.resulting_root_hash for t in handle.query(limit=4096)}
        assert sorted(roots) == list(range(1, handle.version + 1))
        assert handle.read("/memory/count") == handle.version
        book = store.receipts(CRASH_ADDRESS, 4096)
        committed: dict[str, int] = {}
        for client_id, request_id in book.requests():
            found = book.lookup(client_id, request_id)
            assert found is not None
            outcome = found[1].outcome
            if isinstance(outcome, Committed):
                version = outcome.activation["version"]
                assert roots.get(version) == outcome.activation["root_hash"], (request_id, version)
                committed[request_id] = version
        assert sorted(committed.values()) == sorted(roots), "a commit without its receipt (or one answered twice)"
        return committed


def test_sigkill_never_separates_a_commit_from_its_receipt(store_location: str, engine_kind: str) -> None:
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    started = time.monotonic()
    sent: list[tuple[int, int]] = []
    kills = [None, rng.randint(1, 4), None]
    for number, kill_after in enumerate(kills):
        options = () if kill_after is None else ("--kill-after-commit", str(kill_after))
        announced = run_worker(store_location, number * 1000, rng, *options)
        sent += announced
        committed = check_commits_and_receipts(store_location)
        if kill_after is not None:
            # Killed right after the commit batch was written, before the controller returned.
            assert len(announced) == kill_after
            last = announced[-1]
            assert committed.get(f"req-{last[0]}") == last[1] + 1
    assert sent, "the worker announced nothing"
    # Every announced request retried once more: applied at most once in total.
    with ProcessStore.open(store_location) as store:
        controller = ProcessController.durable(store.resume(CRASH_ADDRESS), 4096)
        before = controller.process.version
        for k, version in sent:
            answer = controller.execute({
                "protocol": PROTOCOL, "client_id": "drill", "request_id": f"req-{k}", "process_id": CRASH_ADDRESS,
                "expected_version": version,
                "command": {"operation": "activate", "script": "counter", "input": to_tagged({"k": k})},
            })
            assert answer.replayed or answer.outcome.status in ("conflict", "committed"), answer
        applied_now = controller.process.version - before
    committed = check_commits_and_receipts(store_location)
    assert applied_now <= 1  # only a request killed before its commit may commit now
    assert set(committed) <= {f"req-{k}" for k, _ in sent}
    assert time.monotonic() - started < 60


def test_the_crash_check_sees_a_receipt_written_after_its_commit(tmp_path: Any) -> None:
    """Anti-vacuity: receipts copied to the store after each commit (a second write) must
    be caught by the same check when the worker dies between the two."""
    location = str(tmp_path / "store")
    rng = random.Random(7)
    run_worker(location, 0, rng, "--kill-after-commit", "3", "--receipt-after")
    with pytest.raises(AssertionError, match="a commit without its receipt"):
        check_commits_and_receipts(location)
