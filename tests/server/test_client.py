"""``svit.client``: Client and AsyncClient against a real ``svit serve``."""

from __future__ import annotations

import asyncio
import queue
import threading

import pytest

from svit.client import AsyncClient, Client, ClientError
from svit.control import Activate, Committed, Conflict, ControlRequest, Rejected
from tests.server.served import ADDRESS, Served


def test_activate_commits_conflicts_rejects_and_replays(served: Served) -> None:
    with Client(served.url, served.tokens.write) as client:
        head = client.process(ADDRESS)
        assert set(head) == {"address", "version", "root_hash"}
        done = client.activate(ADDRESS, "add", None, expected_version=head["version"], client_id="lib", request_id="lib-1")
        assert isinstance(done.outcome, Committed) and done.outcome.activation["version"] == head["version"] + 1
        assert done.outcome.activation["output"] == head["version"] + 1
        replay = client.activate(ADDRESS, "add", None, expected_version=head["version"], client_id="lib", request_id="lib-1")
        assert replay.replayed and replay.outcome == done.outcome
        stale = client.activate(ADDRESS, "add", None, expected_version=head["version"], client_id="lib")
        assert isinstance(stale.outcome, Conflict) and stale.outcome.actual_version == head["version"] + 1
        missing = client.control(ControlRequest("lib", "lib-3", ADDRESS, head["version"] + 1, Activate("nope", {"a": [1, 2.5]})))
        assert isinstance(missing.outcome, Rejected) and missing.outcome.failure.code == "script_not_found"
        assert client.health()


def test_refusals_raise_client_error_with_the_server_code(served: Served) -> None:
    with Client(served.url, served.tokens.read) as client:
        with pytest.raises(ClientError) as refused:
            client.activate(ADDRESS, "add", None, expected_version=0, client_id="lib")
        assert (refused.value.status, refused.value.code) == (403, "forbidden")
        with pytest.raises(ClientError) as missing:
            client.process("svit://local/srv/absent")
        assert (missing.value.status, missing.value.code) == (404, "not_found")
    with Client(served.url, "not-a-token-of-this-server") as client, pytest.raises(ClientError) as unknown:
        client.process(ADDRESS)
    assert (unknown.value.status, unknown.value.code) == (401, "unauthorized")
    with Client("http://127.0.0.1:1", served.tokens.read, timeout=2) as client:
        assert client.health() is False


def test_events_iterates_commits_from_a_version(served: Served) -> None:
    with Client(served.url, served.tokens.write) as client:
        start = client.process(ADDRESS)["version"]
        for step in range(3):
            client.activate(ADDRESS, "add", None, expected_version=start + step, client_id="lib-ev")
    found: queue.Queue[int] = queue.Queue()

    def read() -> None:
        with Client(served.url, served.tokens.read) as reader:
            for event in reader.events(ADDRESS, from_version=start):
                found.put(event["version"])
                if event["version"] == start + 4:
                    return

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    assert [found.get(timeout=10) for _ in range(3)] == [start + 1, start + 2, start + 3]
    with Client(served.url, served.tokens.write) as client:
        client.activate(ADDRESS, "add", None, expected_version=start + 3, client_id="lib-ev")
    assert found.get(timeout=10) == start + 4
    thread.join(10)


def test_the_async_client_does_the_same(served: Served) -> None:
    async def run() -> None:
        async with AsyncClient(served.url, served.tokens.write) as client:
            head = await client.process(ADDRESS)
            done = await client.activate(ADDRESS, "add", None, expected_version=head["version"], client_id="async")
            assert isinstance(done.outcome, Committed)
            seen = []
            async for event in client.events(ADDRESS, from_version=head["version"]):
                seen.append(event["version"])
                break
            assert seen == [head["version"] + 1]
            assert await client.health()
        async with AsyncClient(served.url, "not-a-token-of-this-server") as stranger:
            with pytest.raises(ClientError) as refused:
                await stranger.process(ADDRESS)
            assert refused.value.code == "unauthorized"

    asyncio.run(run())


def test_an_invalid_address_is_refused_before_sending(served: Served) -> None:
    with Client(served.url, served.tokens.read) as client, pytest.raises(ClientError) as refused:
        client.process("http://nope")
    assert refused.value.code == "invalid_request"
