"""``POST /v1/control`` of a real ``svit serve``: every outcome, receipts, races, refusals and bounds."""

from __future__ import annotations

import http.client
import json
import threading
from typing import Any

import httpx
import pytest

from svit.control import PROTOCOL
from svit.values import from_tagged, to_tagged
from tests.server.served import ADDRESS, OTHER, Served, StreamReader, control_body

STATE = "local/srv/counter"


def head(served: Served, address_path: str = STATE) -> dict[str, Any]:
    """The stored head; its root hash covers the whole tree, memory included, so an equal
    head means nothing changed."""
    with served.client(served.tokens.read) as client:
        answer = client.get(f"/v1/processes/{address_path}")
        assert answer.status_code == 200, answer.text
        return dict(answer.json())


def post(served: Served, body: Any, token: str | None = None, **kwargs: Any) -> httpx.Response:
    with served.client(token if token is not None else served.tokens.write) as client:
        content = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return client.post("/v1/control", content=content, headers={"Content-Type": "application/json"}, **kwargs)


def outcome(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert data["protocol"] == PROTOCOL
    return dict(data["outcome"])


def refused(answer: httpx.Response, status: int, code: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.json() == {"error": {"code": code, "message": answer.json()["error"]["message"]}}
    assert isinstance(answer.json()["error"]["message"], str) and answer.json()["error"]["message"]


# ---------------------------------------------------------------------------- outcomes


def test_committed_then_replayed_then_reused(served: Served) -> None:
    version = head(served)["version"]
    body = control_body("commit-1", version)
    first = post(served, body)
    result = outcome(first)
    assert result["status"] == "committed" and result["previous_version"] == version
    assert result["activation"]["version"] == version + 1
    assert from_tagged(result["activation"]["output"]) == version + 1  # the count equals the version here
    assert result["activation"]["changed"] == ["/memory/count"]
    assert first.json()["replayed"] is False
    again = post(served, body)
    assert again.json()["replayed"] is True and again.json()["outcome"] == result
    assert head(served)["version"] == version + 1
    reused = outcome(post(served, control_body("commit-1", version + 1)))
    assert reused["status"] == "rejected" and reused["failure"]["code"] == "request_id_reused"
    assert head(served)["version"] == version + 1


def test_conflict_names_the_true_version(served: Served) -> None:
    version = head(served)["version"]
    answer = outcome(post(served, control_body("conflict-1", version + 5)))
    assert answer == {"status": "conflict", "expected_version": version + 5, "actual_version": version,
                      "root_hash": head(served)["root_hash"]}
    assert head(served)["version"] == version


@pytest.mark.parametrize(("script", "input", "code"), [
    ("nope", None, "script_not_found"),
    ("bad/name", None, "invalid_script_name"),
    ("fail", None, "script_failed"),
    ("spin", None, "execution_limit_exceeded"),
    ("deep", None, "resource_limit_exceeded"),
    ("add", "nested", "invalid_value"),
])
def test_rejections_change_nothing(served: Served, script: str, input: Any, code: str) -> None:
    before = head(served)
    value: Any = input
    if input == "nested":
        value = []
        for _ in range(40):
            value = [value]
    answer = outcome(post(served, control_body(f"reject-{code}", before["version"], script=script, input=value)))
    assert answer["status"] == "rejected" and answer["failure"]["code"] == code
    assert answer["version"] == before["version"] and answer["root_hash"] == before["root_hash"]
    assert head(served) == before


def test_a_script_name_with_a_lone_surrogate_is_rejected_as_json(served: Served) -> None:
    before = head(served)
    answer = post(served, json.dumps(control_body("surrogate-script", before["version"], script="\ud800")).encode())
    result = outcome(answer)
    assert result["status"] == "rejected" and result["failure"]["code"] == "invalid_script_name"
    assert head(served) == before


def test_an_address_the_store_does_not_hold_is_persistence_not_found(served: Served) -> None:
    answer = outcome(post(served, control_body("missing-1", 0, address="svit://local/srv/absent")))
    assert answer["status"] == "rejected" and answer["failure"]["code"] == "persistence_not_found"
    with served.client(served.tokens.read) as client:
        refused(client.get("/v1/processes/local/srv/absent"), 404, "not_found")


def test_process_mismatch_cannot_happen_over_http(served: Served) -> None:
    """The server picks the controller by process_id, so a request always reaches the
    controller of the process it names (``process_mismatch`` is not an HTTP answer)."""
    with served.client(served.tokens.other) as client:
        answer = client.post("/v1/control", content=json.dumps(control_body("other-1", 0, address=OTHER)))
    result = outcome(answer)
    assert result["status"] in ("committed", "conflict")
    assert answer.json()["process_id"] == OTHER


# ---------------------------------------------------------------------------- malformed and oversized


@pytest.mark.parametrize(("body", "code", "needle"), [
    (b"{not json", "invalid_request", "not JSON"),
    (b"[]", "invalid_request", "JSON object"),
    (json.dumps({**control_body("x", 0), "protocol": "svit-control@2"}).encode(), "invalid_request", "protocol"),
    (json.dumps({**control_body("x", 0), "expected_version": -1}).encode(), "invalid_request", "expected_version"),
    (json.dumps({**control_body("x", 0), "command": {"operation": "delete"}}).encode(), "invalid_request", "operation"),
    (json.dumps({**control_body("x", 0), "process_id": "http://x"}).encode(), "invalid_request", "address"),
    (json.dumps(control_body("bad id!", 0)).encode(), "invalid_control_id", "request_id"),
    # a lone surrogate (a valid JSON escape) echoed in the message is still answered as JSON
    (json.dumps({**control_body("x", 0), "command": {"operation": "\ud800"}}).encode(), "invalid_request", "operation"),
    (json.dumps({**control_body("x", 0), "process_id": "svit://local/srv/\ud800"}).encode(), "invalid_request", "address"),
])
def test_malformed_requests_are_400_naming_the_problem(served: Served, body: bytes, code: str, needle: str) -> None:
    before = head(served)
    answer = post(served, body)
    refused(answer, 400, code)
    assert needle in answer.json()["error"]["message"]
    assert head(served) == before


def test_oversized_bodies_are_413_with_and_without_content_length(served: Served) -> None:
    before = head(served)
    big = json.dumps(control_body("big-1", before["version"], input="x" * (1024 * 1024 + 10))).encode()
    refused(post(served, big), 413, "payload_too_large")

    def chunks() -> Any:
        for start in range(0, len(big), 65536):
            yield big[start:start + 65536]

    with served.client(served.tokens.write) as client:
        answer = client.post("/v1/control", content=chunks(), headers={"Content-Type": "application/json"})
    assert "content-length" not in {k.lower() for k in answer.request.headers}
    refused(answer, 413, "payload_too_large")
    assert head(served) == before


def test_a_huge_declared_length_is_refused_before_the_body_is_sent(served: Served) -> None:
    reply = served.raw_request(f"POST /v1/control HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {served.tokens.write}\r\n"
                               "Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n")
    assert reply.startswith("HTTP/1.1 413"), reply[:200]
    assert '"payload_too_large"' in reply


# ---------------------------------------------------------------------------- tokens


def test_missing_wrong_out_of_scope_and_read_only_tokens_change_nothing(served: Served) -> None:
    before = head(served)
    body = control_body("auth-1", before["version"])
    refused(post(served, body, token=""), 401, "unauthorized")
    refused(post(served, body, token="x" * 40), 401, "unauthorized")
    refused(post(served, body, token=served.tokens.write + "x"), 401, "unauthorized")
    refused(post(served, body, token=served.tokens.other), 403, "forbidden")
    refused(post(served, body, token=served.tokens.read), 403, "forbidden")
    with served.client() as client:
        answer = client.post("/v1/control", content=json.dumps(body), headers={"Authorization": f"Basic {served.tokens.write}"})
    refused(answer, 401, "unauthorized")
    for answer in (post(served, body, token="x" * 40), post(served, body, token=served.tokens.read)):
        assert served.tokens.write not in answer.text and served.tokens.read not in answer.text
    assert head(served) == before
    # the same request with the right token still commits: the refusals stored no receipt
    assert outcome(post(served, body))["status"] == "committed"


def test_read_endpoints_check_the_prefix(served: Served) -> None:
    with served.client(served.tokens.other) as client:
        refused(client.get(f"/v1/processes/{STATE}"), 403, "forbidden")
        refused(client.get(f"/v1/events/{STATE}"), 403, "forbidden")
    with served.client() as client:
        refused(client.get(f"/v1/processes/{STATE}"), 401, "unauthorized")
        refused(client.get(f"/v1/events/{STATE}"), 401, "unauthorized")
    with served.client(served.tokens.read) as client:
        refused(client.get("/v1/processes/"), 400, "invalid_request")
        refused(client.get("/v1/processes/has space"), 400, "invalid_request")
        refused(client.get("/v1/nothing"), 404, "not_found")


@pytest.mark.parametrize("raw", [
    "local/srv/../other/counter",          # sent as is: no client folds the dot segments
    "local/srv/%2e%2e/other/counter",
    "local/srv%2F..%2Fother/counter",
    "local/srv/./../other/counter",
    "local//other/counter",
    "local/SRV/../other/counter",
    "local/Other/counter",
    "local/other/counter/",
    "local/srv/%00/../../other/counter",
])
def test_no_spelling_of_an_address_reaches_a_process_outside_the_prefix(served: Served, raw: str) -> None:
    """The read token covers ``svit://local/srv/``; the process at ``svit://local/other/counter``
    is never answered, whatever the path spells: the address is the decoded text, compared
    with the prefix as text and looked up as that same text."""
    host, port = served.url.removeprefix("http://").rsplit(":", 1)
    initialize = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
    headers = {"Authorization": f"Bearer {served.tokens.read}", "Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}
    for method, route in (("GET", "/v1/processes"), ("GET", "/v1/read"), ("GET", "/v1/events"), ("POST", "/mcp")):
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            connection.request(method, f"{route}/{raw}", body=initialize if method == "POST" else None, headers=headers)
            answer = connection.getresponse()
            status, text = answer.status, answer.read(4096).decode("utf-8", "replace")
        finally:
            connection.close()
        assert status in (400, 403, 404), (route, raw, status, text)
        assert json.loads(text)["error"]["code"] in ("invalid_request", "forbidden", "not_found")


# ---------------------------------------------------------------------------- races and bounds


def test_two_clients_racing_for_one_version_give_one_commit_and_one_conflict(served: Served) -> None:
    rounds = 200
    start = head(served)["version"]
    barrier = threading.Barrier(2)
    results: dict[str, list[str]] = {"a": [], "b": []}

    def race(name: str) -> None:
        with served.client(served.tokens.write) as client:
            for round_number in range(rounds):
                body = control_body(f"race-{round_number}", start + round_number, client=f"racer-{name}")
                barrier.wait(timeout=30)
                answer = client.post("/v1/control", content=json.dumps(body))
                status = answer.json()["outcome"]["status"]
                results[name].append(status)
                barrier.wait(timeout=30)

    threads = [threading.Thread(target=race, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for round_number in range(rounds):
        assert sorted((results["a"][round_number], results["b"][round_number])) == ["committed", "conflict"], round_number
    assert head(served)["version"] == start + rounds


def test_a_token_beyond_its_concurrency_gets_429(served: Served) -> None:
    streams = [StreamReader(served, served.tokens.busy, STATE) for _ in range(8)]
    try:
        assert all(stream.status == 200 for stream in streams)
        with served.client(served.tokens.busy) as client:
            refused(client.get(f"/v1/processes/{STATE}"), 429, "too_many_requests")
        # another token is not affected
        assert head(served)["address"] == ADDRESS
    finally:
        for stream in streams:
            stream.close()
    with served.client(served.tokens.busy) as client:
        for _ in range(50):  # the server notices the closed streams shortly
            if client.get(f"/v1/processes/{STATE}").status_code == 200:
                break
            threading.Event().wait(0.1)
        assert client.get(f"/v1/processes/{STATE}").status_code == 200


def test_health_and_readiness_need_no_token(served: Served) -> None:
    with served.client() as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").json() == {"status": "ready"}


def test_the_process_route_answers_the_head(served: Served) -> None:
    found = head(served)
    assert set(found) == {"address", "version", "root_hash"} and found["address"] == ADDRESS
    assert to_tagged(found["version"])["type"] == "integer"
