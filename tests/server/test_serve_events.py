"""``GET /v1/events/{address}``: every commit in order, resumable, woken by commits from anywhere."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from svit.client import Client
from svit.store import ProcessStore
from svit.store.events import StoreEventLog
from tests.server.served import ADDRESS, Served, StreamReader, Tokens, control_body, seed, start_server, versions
from tests.store import pg_cluster

STATE = "local/srv/counter"


def head_version(served: Served) -> int:
    with served.client(served.tokens.read) as client:
        return int(client.get(f"/v1/processes/{STATE}").json()["version"])


def commit(served: Served, times: int = 1) -> list[int]:
    made = []
    with served.client(served.tokens.write) as client:
        for _ in range(times):
            version = head_version(served)
            answer = client.post("/v1/control", content=json.dumps(control_body(f"ev-{version}", version)))
            assert answer.json()["outcome"]["status"] == "committed", answer.text
            made.append(version + 1)
    return made


def test_a_stream_from_a_version_delivers_every_later_commit_in_order_then_new_ones(served: Served) -> None:
    made = commit(served, 5)
    start = made[0] - 1
    stream = StreamReader(served, served.tokens.read, STATE, params={"from": str(start)})
    try:
        first = stream.take(5)
        assert versions(first) == made
        event, ident, data = first[0]
        assert event == "commit" and ident == str(made[0])
        assert set(data) == {"address", "version", "root_hash", "changed", "source", "committed_at", "script", "output"}
        assert data["address"] == ADDRESS and data["changed"] == ["/memory/count"] and data["source"]
        assert type(data["committed_at"]) is int and data["committed_at"] > 1_600_000_000_000
        assert data["script"] == "/lib/add" and data["output"].isdigit()  # the counter's new count
        later = commit(served, 3)
        assert versions(stream.take(3)) == later
        assert stream.nothing_more(0.3)
    finally:
        stream.close()


def test_without_from_only_new_commits_arrive(served: Served) -> None:
    commit(served, 2)
    stream = StreamReader(served, served.tokens.read, STATE)
    try:
        assert stream.nothing_more(0.3)
        made = commit(served, 2)
        assert versions(stream.take(2)) == made
    finally:
        stream.close()


def test_last_event_id_resumes_and_wins_over_from(served: Served) -> None:
    made = commit(served, 4)
    stream = StreamReader(served, served.tokens.read, STATE, params={"from": "0"}, headers={"Last-Event-ID": str(made[1])})
    try:
        assert versions(stream.take(2)) == made[2:]
        assert stream.nothing_more(0.3)
    finally:
        stream.close()


def test_a_root_hash_in_an_event_is_the_head_at_that_version(served: Served) -> None:
    made = commit(served, 1)
    stream = StreamReader(served, served.tokens.read, STATE, params={"from": str(made[0] - 1)})
    try:
        (_, _, data), = stream.take(1)
        with served.client(served.tokens.read) as client:
            assert client.get(f"/v1/processes/{STATE}").json() == {"address": ADDRESS, "version": made[0], "root_hash": data["root_hash"]}
    finally:
        stream.close()


def test_several_streams_each_get_every_commit(served: Served) -> None:
    streams = [StreamReader(served, served.tokens.read, STATE) for _ in range(3)]
    try:
        made = commit(served, 3)
        for stream in streams:
            assert versions(stream.take(3)) == made
    finally:
        for stream in streams:
            stream.close()


@pytest.mark.parametrize(("params", "status", "code"), [
    ({"from": "-1"}, 400, "invalid_request"),
    ({"from": "x"}, 400, "invalid_request"),
    ({"from": str(2**64)}, 400, "invalid_request"),
])
def test_a_bad_from_is_400(served: Served, params: dict[str, str], status: int, code: str) -> None:
    with served.client(served.tokens.read) as client:
        answer = client.get(f"/v1/events/{STATE}", params=params)
    assert answer.status_code == status and answer.json()["error"]["code"] == code


def test_an_unknown_address_is_404(served: Served) -> None:
    with served.client(served.tokens.read) as client:
        answer = client.get("/v1/events/local/srv/absent")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"


# ---------------------------------------------------------------------------- a second writer (PostgreSQL)


@pytest.fixture(scope="module")
def pg_served(postgresql_server: str) -> Iterator[tuple[Served, str]]:
    schema, url = pg_cluster.create_schema(postgresql_server)
    try:
        seed(url, ADDRESS)
        server = start_server(url, Tokens())
        try:
            yield server, url
        finally:
            server.stop()
    finally:
        pg_cluster.drop_schema(postgresql_server, schema)


def test_commits_by_another_writer_of_the_database_reach_the_stream(pg_served: tuple[Served, str]) -> None:
    served, url = pg_served
    stream = StreamReader(served, served.tokens.read, STATE)
    try:
        with ProcessStore.open(url) as store:
            handle = store.resume(ADDRESS)
            direct: list[Any] = []
            for _ in range(3):
                direct.append(handle.exec("/lib/add").version)
        through_server = commit(served, 1)
        assert versions(stream.take(4)) == direct + through_server
        assert stream.take(0) == []
    finally:
        stream.close()
    stream = StreamReader(served, served.tokens.read, STATE, params={"from": "0"})
    try:
        assert versions(stream.take(4)) == list(range(1, 5))
    finally:
        stream.close()


def test_thread_events_stream_with_threads_1(pg_served: tuple[Served, str]) -> None:
    served, url = pg_served
    with ProcessStore.open(url) as store:
        handle = store.resume(ADDRESS)
        handle.replace_thread_state({"session_id": "talk"})
        StoreEventLog(store).append(ADDRESS, "talk", "input.message", {"text": "old"})
        start = handle.version
    found: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()

    def read() -> None:
        with Client(served.url, served.tokens.read) as client:
            for kind, data in client.stream(ADDRESS, start, threads=True, thread_from=1):
                found.put((kind, data))
                if kind == "thread" and data["data"]["text"] == "last":
                    return

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    with ProcessStore.open(url) as store:
        log = StoreEventLog(store)
        log.append(ADDRESS, "talk", "input.message", {"text": "hello"})
        log.append(ADDRESS, "talk", "output.message.completed", {"text": "last"})
    got = [found.get(timeout=10) for _ in range(2)]
    assert got == [
        ("thread", {"session_id": "talk", "sequence": 2, "type": "input.message", "data": {"text": "hello"}}),
        ("thread", {"session_id": "talk", "sequence": 3, "type": "output.message.completed", "data": {"text": "last"}}),
    ]
    thread.join(10)
    with served.client(served.tokens.read) as client:
        answer = client.get(f"/v1/events/{STATE}", params={"threads": "yes"})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_request"


def test_an_address_removed_by_another_writer_is_persistence_not_found(pg_served: tuple[Served, str]) -> None:
    served, url = pg_served
    doomed = "svit://local/srv/doomed"
    seed(url, doomed)
    with served.client(served.tokens.write) as client:
        first = client.post("/v1/control", content=json.dumps(control_body("doomed-1", 0, address=doomed))).json()
        assert first["outcome"]["status"] == "committed"  # the server now holds its controller
        with ProcessStore.open(url) as store:
            store.remove(doomed)
        answer = client.post("/v1/control", content=json.dumps(control_body("doomed-2", 1, address=doomed)))
    assert answer.status_code == 200, answer.text
    outcome = answer.json()["outcome"]
    assert outcome["status"] == "rejected" and outcome["failure"]["code"] == "persistence_not_found"
