"""An unexpected failure inside the server is answered in the error shape, never as a
traceback or a bare text page."""

from __future__ import annotations

import json
from pathlib import Path

from starlette.testclient import TestClient

from svit.server import TokenSet, create_app
from svit.store import ProcessStore

TOKEN = "a-token-long-enough-1"


def test_an_unexpected_error_is_a_500_in_the_error_shape(tmp_path: Path) -> None:
    store = ProcessStore.open(str(tmp_path / "store"))
    try:
        tokens = TokenSet.from_json(json.dumps([{"token": TOKEN, "prefix": "svit://", "access": "read"}]))

        def broken(address: str) -> None:
            raise RuntimeError(f"internal detail at {tmp_path}")

        store.stored_head = broken  # type: ignore[method-assign]
        app = create_app(store, tokens)
        with TestClient(app, raise_server_exceptions=False) as client:
            answer = client.get("/v1/processes/local/a/b", headers={"Authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 500
        body = answer.json()
        assert body == {"error": {"code": "unavailable", "message": "the request could not be answered"}}
        assert str(tmp_path) not in answer.text and "Traceback" not in answer.text
    finally:
        store.close()
