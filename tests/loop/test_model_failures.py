"""A model server that fails every call for one inbox item: that item is retried with
backoff, set aside with its error after the attempt limit, the next item is answered,
and ``svit inbox`` shows the set-aside item and ``retry`` runs it again."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from svit import Message, Svit
from svit.cli import main
from svit.loop import TurnFailed
from svit.reasoners import OpenAIReasoner
from svit.store import ProcessStore

ADDRESS = "svit://local/tests/failing-model"
KEY = "sk-drill-secret-key"
POISON = "please summarise the poison document"


class ModelServer:
    """An OpenAI-compatible chat completions endpoint on 127.0.0.1: while ``failing``, any
    request whose newest user message mentions "poison" gets HTTP 503; everything else is
    answered ``answered: <that message>``. Every request's time and user text is kept."""

    def __init__(self) -> None:
        self.failing = True
        self.calls: list[tuple[float, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                users = [m["content"] for m in body.get("messages", []) if m.get("role") == "user"]
                text = users[-1] if users else ""
                server.calls.append((time.monotonic(), text))
                if server.failing and "poison" in text:
                    self._send(503, {"error": {"message": "the upstream model is overloaded", "type": "server_error"}})
                    return
                self._send(200, {
                    "id": f"chatcmpl-{len(server.calls)}",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model", "m"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": f"answered: {text}"}}],
                    "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
                })

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def calls_for(self, needle: str) -> list[float]:
        return [at for at, text in self.calls if needle in text]


@pytest.fixture()
def model() -> Iterator[ModelServer]:
    server = ModelServer()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def open_agent(store: ProcessStore, model: ModelServer, *, new: bool) -> Svit:
    reasoner = OpenAIReasoner(model="drill-model", base_url=model.base_url, api_key=KEY, max_retries=0, timeout=10)
    builder = Svit.builder(ADDRESS).store(store) if new else Svit.resume(store.resume(ADDRESS))
    return builder.reasoner(reasoner).max_attempts(3).retry_backoff(0.1, 1.0).build()


def test_a_failing_item_is_retried_set_aside_and_retried_by_the_operator(tmp_path, model, capsys):
    path = str(tmp_path / "store")
    store = ProcessStore.open(path)
    agent = open_agent(store, model, new=True)
    replies = agent.outbox()
    poison, fine = Message.user(POISON), Message.user("hello")
    agent.inbox().send(poison)
    agent.inbox().send(fine)
    with pytest.raises(TurnFailed, match="HTTP 503: the upstream model is overloaded"):
        agent.block(timeout=30)

    # Three attempts, each after a longer wait (0.1 s, then 0.2 s), then the next item.
    attempts = model.calls_for("poison")
    assert len(attempts) == 3
    assert attempts[1] - attempts[0] >= 0.1 and attempts[2] - attempts[1] >= 0.2
    assert replies.recv(timeout=1).text == "answered: hello"
    assert model.calls[-1][1] == "hello"
    [entry] = agent.read("/thread/turns/set_aside")
    assert entry["id"] == poison.id and entry["item"] == poison.to_json() and entry["attempts"] == 3
    error = entry["error"]
    assert (error["code"], error["status"], error["retryable"], error["error_type"]) == ("reasoner_failed", 503, True, "server_error")
    assert error["provider_message"] == "the upstream model is overloaded"
    assert error["cause"]["type"] == "InternalServerError" and KEY not in json.dumps(entry)
    # Usage and finish reason are recorded with the answered turn.
    outputs = [e.data for e in agent.recent_events(50) if e.type == "output.message.completed"]
    assert outputs[-1]["finish_reason"] == "stop" and outputs[-1]["usage"]["total_tokens"] == 10
    agent.close()
    store.close()

    status, out, _ = cli(capsys, "inbox", "--store", path, ADDRESS)
    assert status == 0
    assert "pending (0):" in out and "set aside (1):" in out
    assert f"  {poison.id}  attempts 3" in out and "reasoner_failed (HTTP 503): " in out
    status, out, _ = cli(capsys, "inbox", "--store", path, "--json", ADDRESS)
    assert status == 0 and [e["id"] for e in json.loads(out)["set_aside"]] == [poison.id]

    model.failing = False
    status, out, _ = cli(capsys, "inbox", "--store", path, "retry", ADDRESS, poison.id)
    assert status == 0 and out.startswith(f"{poison.id}: put back at the end of the inbox")

    store = ProcessStore.open(path)
    agent = open_agent(store, model, new=False)
    replies = agent.outbox()
    agent.block(timeout=30)
    assert replies.recv(timeout=1).text == f"answered: {POISON}"
    assert agent.read("/inbox") == [] and agent.read("/thread/turns") is None
    agent.close()
    store.close()
    status, out, _ = cli(capsys, "inbox", "--store", path, "--json", ADDRESS)
    assert json.loads(out)["set_aside"] == [] and json.loads(out)["pending"] == []
    status, out, _ = cli(capsys, "log", "--store", path, ADDRESS)
    assert [t["source"] for t in json.loads(out)].count("inbox.retry") == 1
