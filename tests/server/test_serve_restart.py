"""A retry after the server was killed is answered from its durable receipt and applied once."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from svit.store import ProcessStore
from tests.server.served import ADDRESS, StreamReader, Tokens, control_body, seed, start_server

STATE = "local/srv/counter"


def test_a_retry_after_sigkill_is_replayed_from_the_durable_receipt(tmp_path: Path) -> None:
    location = str(tmp_path / "store")
    seed(location, ADDRESS)
    tokens = Tokens()
    body = json.dumps(control_body("turn-1", 0))
    conflict_body = json.dumps(control_body("turn-2", 0))
    served = start_server(location, tokens)
    try:
        with served.client(tokens.write) as client:
            first = client.post("/v1/control", content=body).json()
            stale = client.post("/v1/control", content=conflict_body).json()
        assert first["outcome"]["status"] == "committed" and first["replayed"] is False
        assert stale["outcome"]["status"] == "conflict"
    finally:
        assert served.stop(signal.SIGKILL) == -signal.SIGKILL
    served = start_server(location, tokens)
    try:
        with served.client(tokens.write) as client:
            again = client.post("/v1/control", content=body).json()
            stale_again = client.post("/v1/control", content=conflict_body).json()
            head = client.get(f"/v1/processes/{STATE}").json()
        assert again["replayed"] is True and again["outcome"] == first["outcome"]
        assert stale_again["replayed"] is True and stale_again["outcome"] == stale["outcome"]
        assert head["version"] == 1
    finally:
        assert served.stop() == 0  # SIGTERM: a clean stop that closes the store
    with ProcessStore.open(location) as store:
        handle = store.resume(ADDRESS)
        assert handle.version == 1 and handle.read("/memory/count") == 1


def test_sigint_stops_cleanly_with_a_stream_open_and_the_next_start_opens_the_store(tmp_path: Path) -> None:
    location = str(tmp_path / "store")
    seed(location, ADDRESS)
    tokens = Tokens()
    served = start_server(location, tokens)
    stream = StreamReader(served, tokens.read, STATE)
    assert served.stop(signal.SIGINT) == 0
    stream.close()
    served = start_server(location, tokens)
    try:
        with served.client(tokens.read) as client:
            assert client.get(f"/v1/processes/{STATE}").json()["version"] == 0
    finally:
        assert served.stop() == 0
