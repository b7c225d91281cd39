"""Svit Control Protocol 1: decoding, receipts, conflicts and races (§11.1, §13 items 63-68)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from svit import Process
from svit.control import (
    PROTOCOL,
    Activate,
    Committed,
    Conflict,
    ControlRequest,
    ControlResponse,
    Failure,
    MemoryReceipts,
    PendingReceipt,
    ProcessController,
    Rejected,
    committed_response,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from svit.errors import InvalidControlConfiguration, InvalidControlId, SvitError
from svit.values import to_tagged

ADDRESS = "svit://local/test/control"
COUNTER = """
(define (main input)
  (do (write "/memory/count" (+ (read "/memory/count") (value-get input "/by")))
      (log-info! "added" input)
      (send! "svit://local/test/peer" (read "/memory/count"))
      (read "/memory/count")))
"""


def make_process() -> Process:
    return (
        Process.builder(ADDRESS)
        .memory("count", 0)
        .library("add", COUNTER)
        .library("fail", '(define (main input) (do (write "/memory/count" 99) (panic "no")))')
        .build()
    )


def request(request_id: str = "r1", expected: int = 0, by: Any = 1, *, client: str = "agent-a", script: str = "add", process_id: str = ADDRESS) -> dict[str, Any]:
    return {
        "protocol": PROTOCOL,
        "client_id": client,
        "request_id": request_id,
        "process_id": process_id,
        "expected_version": expected,
        "command": {"operation": "activate", "script": script, "input": to_tagged({"by": by})},
    }


# ---------------------------------------------------------------------------- §13 items


def test_item_63_racing_clients_one_commit_one_conflict() -> None:
    p = make_process()
    controller = ProcessController(p)
    outcomes: list[ControlResponse] = []
    barrier = threading.Barrier(2)

    def client(name: str) -> None:
        barrier.wait()
        outcomes.append(controller.execute(request("turn", 0, client=name)))

    threads = [threading.Thread(target=client, args=(name,)) for name in ("agent-a", "agent-b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(o.outcome.status for o in outcomes) == ["committed", "conflict"]
    assert p.version == 1 and p.read("/memory/count") == 1
    conflict = next(o.outcome for o in outcomes if isinstance(o.outcome, Conflict))
    assert conflict == Conflict(0, 1, p.root_hash)


def test_racing_200_rounds_exactly_one_commit_each() -> None:
    p = make_process()
    controller = ProcessController(p)
    for round_number in range(200):
        expected = p.version
        results: list[str] = []
        barrier = threading.Barrier(2)

        def client(name: str) -> None:
            barrier.wait()
            results.append(controller.execute(request(f"round-{round_number}", expected, client=name)).outcome.status)

        threads = [threading.Thread(target=client, args=(name,)) for name in ("agent-a", "agent-b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(results) == ["committed", "conflict"], round_number
        assert p.version == expected + 1
    assert p.read("/memory/count") == 200


def test_item_64_identical_request_is_replayed() -> None:
    p = make_process()
    controller = ProcessController(p)
    first = controller.execute(request("r1", 0, 5))
    assert isinstance(first.outcome, Committed) and not first.replayed
    again = controller.execute(request("r1", 0, 5))
    assert again.replayed and again.outcome == first.outcome
    assert p.version == 1 and p.read("/memory/count") == 5


def test_item_65_evicted_receipt_turns_a_retry_into_a_conflict() -> None:
    p = make_process()
    controller = ProcessController(p, receipt_limit=1)
    assert controller.execute(request("r1", 0)).outcome.status == "committed"
    assert controller.execute(request("r2", 1)).outcome.status == "committed"
    assert controller.receipts() == 1
    retry = controller.execute(request("r1", 0))
    assert not retry.replayed and retry.outcome == Conflict(0, 2, p.root_hash)
    assert p.version == 2 and p.read("/memory/count") == 2


def test_item_66_reused_request_id_is_rejected_and_not_stored() -> None:
    p = make_process()
    controller = ProcessController(p)
    first = controller.execute(request("r1", 0, 1))
    reused = controller.execute(request("r1", 1, 2))
    assert isinstance(reused.outcome, Rejected) and reused.outcome.failure.code == "request_id_reused"
    assert reused.outcome.version == 1 and p.version == 1
    # The original receipt is untouched: the original request still replays.
    assert controller.execute(request("r1", 0, 1)).outcome == first.outcome
    # Receipts are per client: another client may use the same request id.
    assert controller.execute(request("r1", 1, 2, client="agent-b")).outcome.status == "committed"


def test_item_67_decoding_rules() -> None:
    good = request()
    assert decode_request(good) == ControlRequest("agent-a", "r1", ADDRESS, 0, Activate("add", {"by": 1}))
    unknown_op = json.loads(json.dumps(good))
    unknown_op["command"]["operation"] = "delete"
    with pytest.raises(SvitError, match="unknown operation"):
        decode_request(json.dumps(unknown_op))
    extra = json.loads(json.dumps(good))
    extra["future_field"] = {"anything": 1}
    extra["command"]["priority"] = "high"
    assert decode_request(json.dumps(extra)) == decode_request(good)
    with pytest.raises(SvitError):
        decode_request({**good, "process_id": "not-an-address"})
    with pytest.raises(InvalidControlId):
        decode_request({**good, "client_id": "agent/a"})
    for bad in ("", "a" * 129, "é", "a b", None, 7):
        with pytest.raises(InvalidControlId):
            decode_request({**good, "request_id": bad})
    assert decode_request({**good, "request_id": "a" * 128}).request_id == "a" * 128
    for broken in (
        {**good, "protocol": "svit-control@2"},
        {**good, "expected_version": -1},
        {**good, "expected_version": True},
        {**good, "expected_version": 1.0},
        {**good, "command": {"operation": "activate", "script": "add"}},
        {**good, "command": {"operation": "activate", "script": "add", "input": {"type": "integer", "value": 1.5}}},
        {**good, "command": "activate"},
        "not json",
        "[]",
    ):
        with pytest.raises(SvitError):
            decode_request(broken)


def test_item_68_oversize_input_is_rejected_without_a_receipt() -> None:
    p = make_process()
    controller = ProcessController(p)
    big = request("r1", 0, "x" * (1024 * 1024 + 1))
    response = controller.execute(big)
    assert isinstance(response.outcome, Rejected) and response.outcome.failure.code == "invalid_value"
    assert controller.receipts() == 0 and p.version == 0
    assert controller.execute(request("r1", 0, 3)).outcome.status == "committed"
    assert p.read("/memory/count") == 3


# ---------------------------------------------------------------------------- the rest of the algorithm


def test_process_mismatch_is_rejected_and_not_stored() -> None:
    p = make_process()
    controller = ProcessController(p)
    wrong = controller.execute(request("r1", 0, process_id="svit://local/test/other"))
    assert isinstance(wrong.outcome, Rejected) and wrong.outcome.failure.code == "process_mismatch"
    assert controller.receipts() == 0
    assert controller.execute(request("r1", 0)).outcome.status == "committed"


def test_invalid_script_name_is_not_stored_but_script_failures_are() -> None:
    p = make_process()
    controller = ProcessController(p)
    bad = controller.execute(request("r1", 0, script="no/such"))
    assert bad.outcome.failure.code == "invalid_script_name" and controller.receipts() == 0  # type: ignore[union-attr]
    missing = controller.execute(request("r2", 0, script="absent"))
    assert missing.outcome.failure.code == "script_not_found" and controller.receipts() == 1  # type: ignore[union-attr]
    failed = controller.execute(request("r3", 0, script="fail"))
    assert isinstance(failed.outcome, Rejected) and failed.outcome.failure.code == "script_failed"
    assert failed.outcome.version == 0 and failed.outcome.root_hash == p.root_hash and p.read("/memory/count") == 0
    assert controller.execute(request("r3", 0, script="fail")).replayed


def test_conflict_is_stored() -> None:
    p = make_process()
    controller = ProcessController(p)
    first = controller.execute(request("r1", 5))
    assert first.outcome == Conflict(5, 0, p.root_hash)
    controller.execute(request("r2", 0))
    # The stored conflict replays even though the version moved on.
    again = controller.execute(request("r1", 5))
    assert again.replayed and again.outcome == first.outcome


def test_receipts_are_fifo() -> None:
    p = make_process()
    controller = ProcessController(p, receipt_limit=2)
    for n in range(3):
        controller.execute(request(f"r{n}", n))
    assert controller.receipts() == 2
    assert controller.execute(request("r1", 1)).replayed and controller.execute(request("r2", 2)).replayed
    assert controller.execute(request("r0", 0)).outcome.status == "conflict"


def test_receipt_limit_configuration() -> None:
    p = make_process()
    for bad in (0, 4097, -1, True, 1.5):
        with pytest.raises(InvalidControlConfiguration):
            ProcessController(p, receipt_limit=bad)  # type: ignore[arg-type]
    assert ProcessController(p, receipt_limit=4096).receipt_limit == 4096
    with pytest.raises(InvalidControlConfiguration):
        ProcessController(object())  # type: ignore[arg-type]


def test_observe_and_snapshot() -> None:
    p = make_process()
    controller = ProcessController(p)
    controller.execute(request("r1", 0))
    assert controller.observe() == {"process_id": ADDRESS, "version": 1, "root_hash": p.root_hash}
    restored = Process.restore(controller.snapshot())
    assert restored.version == 1 and restored.read("/memory/count") == 1
    # Two controllers from one snapshot can both commit N+1: no distributed lease.
    other = ProcessController(Process.restore(controller.snapshot()))
    assert controller.execute(request("r2", 1)).outcome.status == "committed"
    assert other.execute(request("r2", 1)).outcome.status == "committed"


def test_messages_are_sanitized() -> None:
    p = Process.builder(ADDRESS).library("loud", '(define (main input) (panic (value-get input "/text")))').build()
    controller = ProcessController(p)
    response = controller.execute(
        {**request("r1", 0, script="loud"), "command": {"operation": "activate", "script": "loud", "input": to_tagged({"text": "é" * 5000})}}
    )
    assert isinstance(response.outcome, Rejected)
    assert len(response.outcome.failure.message.encode("utf-8")) <= 1024 + len("…".encode())


# ---------------------------------------------------------------------------- JSON round trips


def test_request_round_trip_keeps_value_kinds() -> None:
    value = {"int": 1, "float": 1.0, "bool": True, "none": None, "list": [1, "a", [2.5]], "map": {"z": {}, "a": []}}
    req = ControlRequest("c.1", "r_2-x", ADDRESS, 7, Activate("add", value))
    text = encode_request(req)
    assert json.loads(text)["command"]["input"]["value"]["float"] == {"type": "number", "value": 1.0}
    back = decode_request(text)
    assert back == req and type(back.command.input["float"]) is float and type(back.command.input["int"]) is int
    # 1 and 1.0 are different requests.
    assert ControlRequest("c", "r", ADDRESS, 0, Activate("add", 1)).fingerprint() != ControlRequest("c", "r", ADDRESS, 0, Activate("add", 1.0)).fingerprint()


def test_response_round_trips() -> None:
    p = make_process()
    controller = ProcessController(p)
    committed = controller.execute(request("r1", 0, 2))
    text = encode_response(committed)
    wire = json.loads(text)
    assert wire["protocol"] == PROTOCOL and wire["replayed"] is False
    activation = wire["outcome"]["activation"]
    assert wire["outcome"]["status"] == "committed" and wire["outcome"]["previous_version"] == 0
    assert activation["output"] == {"type": "integer", "value": 2}
    assert activation["logs"] == [{"message": "added", "fields": to_tagged({"by": 2})}]
    assert activation["messages"][0]["body"] == {"type": "integer", "value": 2}
    assert activation["messages"][0]["message_id"] == f"{ADDRESS}:1:0"
    assert activation["version"] == 1 and activation["root_hash"] == p.root_hash and "/memory/count" in activation["changed"]
    assert decode_response(text) == committed
    for response in (
        controller.execute(request("r2", 0)),
        controller.execute(request("r3", 1, script="fail")),
        controller.execute(request("r1", 0, 2)),
    ):
        assert decode_response(encode_response(response)) == response
    # `changed` defaults to [] when absent; unknown fields are ignored.
    wire["outcome"]["activation"].pop("changed")
    wire["extra"] = 1
    assert decode_response(wire).outcome.activation["changed"] == []  # type: ignore[union-attr]
    rejected = ControlResponse("a", "b", ADDRESS, True, Rejected(3, "00", Failure("script_failed", "script failed: no")))
    assert decode_response(encode_response(rejected)) == rejected


def test_execute_json() -> None:
    controller = ProcessController(make_process())
    answer = json.loads(controller.execute_json(json.dumps(request("r1", 0, 4))))
    assert answer["outcome"]["status"] == "committed" and answer["outcome"]["activation"]["output"] == {"type": "integer", "value": 4}


def test_works_over_a_durable_handle(tmp_path: Any) -> None:
    store_module = pytest.importorskip("svit.store")
    store = store_module.ProcessStore.open(str(tmp_path / "store"))
    try:
        handle = store.create(make_process())
        controller = ProcessController(handle)
        assert controller.execute(request("r1", 0, 2)).outcome.status == "committed"
        assert controller.execute(request("r1", 0, 2)).replayed
        assert controller.execute(request("r2", 0)).outcome.status == "conflict"
        assert controller.observe()["version"] == 1
        resumed = store.resume(ADDRESS)
        assert resumed.version == 1 and resumed.read("/memory/count") == 2
        assert Process.restore(controller.snapshot()).version == 1
    finally:
        store.close()


# ---------------------------------------------------------------------------- receipt books


class ListBook:
    """A receipt book of the caller's own (anything with lookup and record)."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], tuple[str, ControlResponse]] = {}
        self.recorded: list[str] = []

    def lookup(self, client_id: str, request_id: str) -> tuple[str, ControlResponse] | None:
        return self.entries.get((client_id, request_id))

    def record(self, client_id: str, request_id: str, fingerprint: str, response: ControlResponse) -> None:
        self.recorded.append(response.outcome.status)
        self.entries[(client_id, request_id)] = (fingerprint, response)


def test_a_book_of_its_own_gets_every_receipt_over_an_in_memory_process() -> None:
    p = make_process()
    book = ListBook()
    controller = ProcessController(p, receipts=book)
    assert controller.book is book
    first = controller.execute(request("r1", 0, 2))
    assert isinstance(first.outcome, Committed) and first.outcome.activation["output"] == 2
    controller.execute(request("r2", 0))
    controller.execute(request("r3", 1, script="fail"))
    # The in-memory process only completes the receipt; the controller records it.
    assert book.recorded == ["committed", "conflict", "rejected"]
    assert controller.execute(request("r1", 0, 2)).replayed and p.version == 1
    with pytest.raises(InvalidControlConfiguration, match="does not count"):
        controller.receipts()


def test_the_memory_book_is_fifo() -> None:
    book = MemoryReceipts(2)
    answer = ControlResponse("a", "b", ADDRESS, False, Conflict(0, 1, "00"))
    for name in ("r1", "r2", "r3"):
        book.record("a", name, "f", answer)
    assert len(book) == 2 and book.lookup("a", "r1") is None and book.lookup("a", "r3") == ("f", answer)
    with pytest.raises(InvalidControlConfiguration):
        MemoryReceipts(0)


def test_exec_completes_a_receipt_with_the_committed_result() -> None:
    p = make_process()
    decoded = decode_request(request("r1", 0, 3))
    pending = PendingReceipt(MemoryReceipts(), decoded, decoded.digest())
    activation = p.exec("/lib/add", {"by": 3}, receipt=pending)
    assert pending.response == committed_response(decoded, activation)
    assert not pending.written  # an in-memory process has no store to write it to
    assert pending.response.outcome.activation["changed"] == activation.changed  # type: ignore[union-attr]
    with pytest.raises(SvitError, match="dry run"):
        p.exec("/lib/add", {"by": 3}, dry_run=True, receipt=pending)
    failed = PendingReceipt(MemoryReceipts(), decoded, decoded.digest())
    with pytest.raises(SvitError):
        p.exec("/lib/fail", None, receipt=failed)
    assert failed.response is None and p.version == 1


def test_request_digests_tell_requests_apart() -> None:
    one, same, other = (decode_request(r) for r in (request("r1", 0, 1), request("r1", 0, 1), request("r1", 0, 1.0)))
    assert one.digest() == same.digest() and len(one.digest()) == 64
    assert one.digest() != other.digest()  # kinds count


def test_malformed_logs_in_a_response_are_a_clear_error() -> None:
    answer = json.loads(encode_response(ProcessController(make_process()).execute(request("r1", 0))))
    answer["outcome"]["activation"]["logs"] = [["not", "an", "object"]]
    with pytest.raises(SvitError, match="malformed control message"):
        decode_response(answer)


def test_a_durable_controller_needs_a_store_handle() -> None:
    with pytest.raises(InvalidControlConfiguration, match="store handle"):
        ProcessController.durable(make_process())  # type: ignore[arg-type]


def test_store_receipts_over_a_handle_without_following_the_store(tmp_path: Any) -> None:
    store_module = pytest.importorskip("svit.store")
    store = store_module.ProcessStore.open(str(tmp_path / "store"))
    try:
        handle = store.create(make_process())
        controller = ProcessController(handle, receipts=store.receipts(ADDRESS))
        first = controller.execute(request("r1", 0, 2))
        assert first.outcome.status == "committed"
        stored = store.receipts(ADDRESS).lookup("agent-a", "r1")
        assert stored is not None and stored[1] == first
        assert controller.receipts() == 1
    finally:
        store.close()
