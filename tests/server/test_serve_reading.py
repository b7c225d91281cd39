"""The tree, history, mail and inbox routes of a real ``svit serve``: answers, bounds, refusals."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from svit import Process
from svit.client import AsyncClient, Client, ClientError
from svit.limits import Limits
from svit.server import ServeOptions, TokenSet, create_app
from svit.store import ProcessStore
from svit.values import Script
from tests.server.served import ADDRESS, OTHER, Served, Tokens, seed, start_server

WIDE = "svit://local/srv/wide"
BIG = "x" * 100_000 + "é" * 10  # more than a 64 KiB preview, with multi-byte characters at the end
NAMES = [f"k{i:03d}" for i in range(250)]


def seed_wide(location: str) -> None:
    with ProcessStore.open(location) as store:
        builder = Process.builder(WIDE).limits(Limits(max_steps=20_000)).memory("wide", dict.fromkeys(NAMES, 0))
        builder = builder.memory("big", BIG).memory("one", 1).memory("onef", 1.0).memory("nest", {"a": [1, {"b": None}]})
        builder = builder.library("hello", '(define (main input) "hi")', documentation="says hi")
        builder = builder.library("grow", '(define (main input) (write "/memory/copy" (read "/memory/big")))')
        store.create(builder.build())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    location = str(Path(tmp_path_factory.mktemp("serve-reading")) / "store")
    seed(location, ADDRESS, OTHER)
    seed_wide(location)
    server = start_server(location, Tokens())
    try:
        with Client(server.url, server.tokens.write) as client:  # versions 1 and 2 of the counter
            for version in (0, 1):
                client.activate(ADDRESS, "add", None, expected_version=version, client_id="seed")
        yield server
    finally:
        server.stop()


def path_of(address: str) -> str:
    return address.removeprefix("svit://")


ROUTES = [
    ("GET", "read", {"path": "/memory/count"}),
    ("GET", "discover", {"path": "/memory"}),
    ("GET", "stat", {"path": "/memory"}),
    ("GET", "diff", {"from": "1", "to": "2"}),
    ("GET", "log", {"limit": "5"}),
    ("GET", "mail", {}),
    ("POST", "inbox", {}),
]


@pytest.mark.parametrize(("method", "route", "params"), ROUTES, ids=[r[1] for r in ROUTES])
def test_every_route_refuses_a_missing_or_unknown_token_and_an_address_outside_its_prefix(
        served: Served, method: str, route: str, params: dict[str, str]) -> None:
    body = json.dumps({"body": "hello"}) if method == "POST" else None
    with served.client(served.tokens.read) as reader:
        head = reader.get(f"/v1/processes/{path_of(ADDRESS)}").json()["version"]
    for token, status, code, address in (
        (None, 401, "unauthorized", ADDRESS),
        ("an-unknown-token-of-no-entry", 401, "unauthorized", ADDRESS),
        (served.tokens.other, 403, "forbidden", ADDRESS),  # its prefix is svit://local/other/
        (served.tokens.write, 403, "forbidden", "svit://local/elsewhere/x"),
    ):
        with served.client(token) as client:
            answer = client.request(method, f"/v1/{route}/{path_of(address)}", params=params, content=body)
        assert answer.status_code == status, answer.text
        assert answer.json() == {"error": {"code": code, "message": answer.json()["error"]["message"]}}
        assert "Traceback" not in answer.text and served.location not in answer.text
    with served.client(served.tokens.read) as client:  # nothing of that changed the process
        assert client.get(f"/v1/processes/{path_of(ADDRESS)}").json()["version"] == head


@pytest.mark.parametrize("route", ["read", "discover", "stat", "log", "mail"])
def test_an_unknown_address_is_not_found(served: Served, route: str) -> None:
    with served.client(served.tokens.read) as client:
        answer = client.get(f"/v1/{route}/local/srv/absent")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"


def test_read_answers_values_exactly_live_and_as_of_a_version(served: Served) -> None:
    with Client(served.url, served.tokens.read) as client:
        one, onef = client.read(WIDE, "/memory/one"), client.read(WIDE, "/memory/onef")
        assert (one, type(one)) == (1, int) and (onef, type(onef)) == (1.0, float)
        assert client.read(WIDE, "/memory/nest") == {"a": [1, {"b": None}]}
        assert client.read(WIDE, "/lib/hello") == Script('(define (main input) "hi")', "says hi")
        assert client.read(WIDE, "/memory/big") == BIG  # whole: under the server's answer bound
        assert client.read(ADDRESS, "/memory/count", at=1) == 1
        assert client.read(ADDRESS, "/memory/count", at=0) == 0
        head = client.process(ADDRESS)["version"]
        assert client.read(ADDRESS, "/memory/count") == client.read(ADDRESS, "/memory/count", at=head)
        raw = httpx.get(f"{served.url}/v1/read/{path_of(ADDRESS)}", params={"path": "/memory/count", "at": "1"},
                        headers={"Authorization": f"Bearer {served.tokens.read}"}).json()
        assert raw == {"address": ADDRESS, "version": 1, "path": "/memory/count", "value": {"type": "integer", "value": 1}}


def test_a_capped_read_cuts_text_and_says_how_much_was_left_out(served: Served) -> None:
    with Client(served.url, served.tokens.read) as client:
        value, cut = client.preview(WIDE, "/memory/big", 64 * 1024)
        assert BIG.startswith(value) and len(value.encode()) <= 64 * 1024
        assert cut == len(BIG.encode()) - len(value.encode()) > 0
        assert client.preview(WIDE, "/memory/one", 64 * 1024) == (1, 0)
        with pytest.raises(ClientError) as container:
            client.preview(WIDE, "/memory/wide", 100)
        assert (container.value.status, container.value.code) == (422, "resource_limit_exceeded")


@pytest.mark.parametrize(("route", "params", "status", "code"), [
    ("read", {"path": "memory"}, 400, "invalid_path"),
    ("read", {"path": "/memory/count/deeper"}, 400, "invalid_path"),
    ("read", {"path": "/memory/count", "at": "999"}, 404, "persistence_not_found"),
    ("read", {"path": "/memory/count", "at": "-1"}, 400, "invalid_request"),
    ("read", {"path": "/memory/count", "cap": "0"}, 400, "invalid_request"),
    ("discover", {"path": "/memory", "at": "999"}, 404, "persistence_not_found"),
    ("discover", {"path": "/memory", "limit": "201"}, 400, "invalid_request"),
    ("stat", {"path": "//"}, 400, "invalid_path"),
    ("stat", {"path": "/memory", "at": "999"}, 404, "persistence_not_found"),
    ("diff", {"from": "1"}, 400, "invalid_request"),
    ("diff", {"from": "1", "to": "999"}, 404, "persistence_not_found"),
    ("log", {"limit": "0"}, 400, "invalid_request"),
    ("log", {"limit": "501"}, 400, "invalid_request"),
    ("log", {"path": "memory"}, 400, "invalid_path"),
])
def test_bad_paths_versions_and_bounds_are_refused_with_their_code(served: Served, route: str, params: dict[str, str],
                                                                   status: int, code: str) -> None:
    with served.client(served.tokens.read) as client:
        answer = client.get(f"/v1/{route}/{path_of(ADDRESS)}", params=params)
    assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), answer.text
    assert "Traceback" not in answer.text and served.location not in answer.text


def test_discover_carries_at_most_200_names_and_says_how_many_there_are(served: Served) -> None:
    with Client(served.url, served.tokens.read) as client:
        first = client.discover(WIDE, "/memory/wide")
        assert first["names"] == NAMES[:200] and first["total"] == 250 and first["truncated"] is True
        rest = client.discover(WIDE, "/memory/wide", offset=200)
        assert rest["names"] == NAMES[200:] and rest["truncated"] is False and rest["offset"] == 200
        few = client.discover(WIDE, "/memory/wide", limit=3)
        assert few["names"] == NAMES[:3] and few["truncated"] is True
        assert client.discover(ADDRESS, "/memory", at=0)["names"] == ["count"]


def test_stat_live_as_of_and_absent(served: Served) -> None:
    with Client(served.url, served.tokens.read) as client:
        stat = client.stat(WIDE, "/memory/wide")
        assert stat is not None and stat["kind"] == "directory" and stat["facts"]["entries"] == 250
        assert client.stat(WIDE, "/memory/absent") is None
        old, now = client.stat(ADDRESS, "/memory/count", at=0), client.stat(ADDRESS, "/memory/count")
        assert old is not None and now is not None and old["hash"] != now["hash"]


def test_diff_lists_the_differences_with_exact_values(served: Served) -> None:
    with Client(served.url, served.tokens.read) as client:
        answer = client.diff(ADDRESS, 1, 2)
        assert answer["differences"] == [{"path": "/memory/count", "kind": "changed", "before": 1, "after": 2}]
        assert (answer["total"], answer["truncated"], answer["from"], answer["to"]) == (1, False, 1, 2)
        assert client.diff(ADDRESS, 2, 2)["differences"] == []
        backwards = client.diff(ADDRESS, 2, 0)["differences"]
        assert backwards == [{"path": "/memory/count", "kind": "changed", "before": 2, "after": 0}]


def test_log_lists_recent_transactions_newest_first(served: Served) -> None:
    with Client(served.url, served.tokens.write) as client:
        head = client.process(ADDRESS)["version"]
        client.activate(ADDRESS, "add", None, expected_version=head, client_id="log")
        found = client.log(ADDRESS, limit=2)
        assert [t["version"] for t in found] == [head + 1, head]
        newest = found[0]
        assert set(newest) == {"version", "committed_at", "source", "script", "output", "changed", "root_hash"}
        assert newest["script"] == "/lib/add" and newest["output"] == str(client.read(ADDRESS, "/memory/count"))
        assert newest["changed"] == ["/memory/count"] and type(newest["committed_at"]) is int
        assert newest["root_hash"] == client.process(ADDRESS)["root_hash"]
        assert client.log(ADDRESS, limit=5, path="/inbox") == [t for t in client.log(ADDRESS, 500) if any(
            p.startswith("/inbox") for p in t["changed"])][:5]


def test_send_puts_a_user_message_into_the_inbox_and_mail_lists_it(served: Served) -> None:
    with Client(served.url, served.tokens.write) as writer, Client(served.url, served.tokens.read) as reader:
        before = reader.mail(ADDRESS)
        head = reader.process(ADDRESS)["version"]
        sent = writer.send(ADDRESS, "hello from afar ✓")
        assert sent["version"] == head + 1 and sent["address"] == ADDRESS
        inbox = reader.read(ADDRESS, "/inbox")
        assert inbox[-1]["id"] == sent["message_id"] and inbox[-1]["role"] == "user"
        assert inbox[-1]["content"] == [{"text": "hello from afar ✓", "type": "text"}]
        after = reader.mail(ADDRESS)
        assert set(after) >= {"inbox", "set_aside", "outbox", "undeliverable", "waiting", "version"}
        assert after["inbox"]["total"] == before["inbox"]["total"] + 1 and after["inbox"]["items"][-1] == inbox[-1]
        assert after["outbox"] == after["undeliverable"] == after["waiting"] == {"items": [], "total": 0}
        assert reader.log(ADDRESS, 1)[0]["changed"] == ["/inbox"]
        with pytest.raises(ClientError) as read_only:
            reader.send(ADDRESS, "no")
        assert (read_only.value.status, read_only.value.code) == (403, "forbidden")
        with pytest.raises(ClientError) as absent:
            writer.send("svit://local/srv/absent", "no")
        assert (absent.value.status, absent.value.code) == (404, "not_found")
        assert reader.process(ADDRESS)["version"] == head + 1


@pytest.mark.parametrize(("body", "status", "code"), [
    (b"not json", 400, "invalid_request"),
    (b'{"body": 5}', 400, "invalid_request"),
    (b'{"body": "x", "extra": 1}', 400, "invalid_request"),
    (json.dumps({"body": "x" * (1024 * 1024 + 1)}).encode(), 413, "payload_too_large"),
])
def test_a_bad_send_body_is_refused_and_commits_nothing(served: Served, body: bytes, status: int, code: str) -> None:
    with served.client(served.tokens.write) as client:
        head = client.get(f"/v1/processes/{path_of(ADDRESS)}").json()["version"]
        answer = client.post(f"/v1/inbox/{path_of(ADDRESS)}", content=body)
        assert (answer.status_code, answer.json()["error"]["code"]) == (status, code)
        assert client.get(f"/v1/processes/{path_of(ADDRESS)}").json()["version"] == head


def test_a_message_over_the_process_limits_is_refused_with_its_code(tmp_path: Path) -> None:
    """In process (ASGI), through the AsyncClient: limits and the answer bound as clear errors."""
    tokens = Tokens()
    with ProcessStore.open(str(tmp_path / "store")) as store:
        store.create(Process.builder(ADDRESS).limits(Limits(max_text_bytes=4096)).memory("wide", dict.fromkeys(NAMES, 0))
                     .build())
        app = create_app(store, TokenSet.from_json(json.dumps(tokens.entries())), options=ServeOptions(max_answer_bytes=1000))

        async def main() -> None:
            async with AsyncClient("http://test", tokens.write, transport=httpx.ASGITransport(app=app)) as client:
                with pytest.raises(ClientError) as too_long:
                    await client.send(ADDRESS, "y" * 5000)
                assert (too_long.value.status, too_long.value.code) == (400, "invalid_value")  # as the Python API says
                assert "maximum text bytes exceeded" in too_long.value.message
                with pytest.raises(ClientError) as too_big:
                    await client.read(ADDRESS, "/memory/wide")  # 250 entries: over 1000 bytes
                assert (too_big.value.status, too_big.value.code) == (422, "resource_limit_exceeded")
                assert (await client.discover(ADDRESS, "/memory/wide"))["total"] == 250
                sent = await client.send(ADDRESS, "short")
                assert (await client.read(ADDRESS, "/inbox"))[0]["id"] == sent["message_id"]
                assert (await client.stat(ADDRESS, "/inbox")) is not None
                assert [d["path"] for d in (await client.diff(ADDRESS, 0, sent["version"]))["differences"]] == ["/inbox/0"]
                assert (await client.log(ADDRESS, 1))[0]["version"] == sent["version"]
                assert (await client.mail(ADDRESS))["inbox"]["total"] == 1
                assert (await client.preview(ADDRESS, "/inbox/0/role", 3)) == ("use", 1)

        asyncio.run(main())


def test_a_big_diff_side_is_cut_and_counted(served: Served) -> None:
    with Client(served.url, served.tokens.write) as client:
        head = client.process(WIDE)["version"]
        client.activate(WIDE, "grow", None, expected_version=head, client_id="cut")
        answer: dict[str, Any] = client.diff(WIDE, head, head + 1)
        [entry] = answer["differences"]
        assert (entry["path"], entry["kind"], entry["before"]) == ("/memory/copy", "added", None)
        assert BIG.startswith(entry["after"]) and len(entry["after"].encode()) <= 64 * 1024
        assert entry["after_cut"] == len(BIG.encode()) - len(entry["after"].encode()) and "before_cut" not in entry
