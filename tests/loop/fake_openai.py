"""A local stand-in for the chat completions endpoint, for OpenAIReasoner tests.

It listens on 127.0.0.1 (an ephemeral port) in a background thread and answers
``POST /v1/chat/completions`` from a queue of scripted responses: plain text, tool
calls, an HTTP error status (optionally echoing the request's Authorization header), or
a delayed answer (for timeouts). It records every
request body and Authorization header so tests can check what the client sent.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def text(content: str) -> dict[str, Any]:
    return {"kind": "message", "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}


def tool_calls(*calls: tuple[str, Any], raw_arguments: bool = False) -> dict[str, Any]:
    """``calls`` are ``(name, arguments)``; arguments are JSON-encoded unless ``raw_arguments``."""
    return {
        "kind": "message",
        "message": {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{index}",
                    "type": "function",
                    "function": {"name": name, "arguments": args if raw_arguments else json.dumps(args)},
                }
                for index, (name, args) in enumerate(calls)
            ],
        },
        "finish_reason": "tool_calls",
    }


def error(status: int, message: str, *, echo_authorization: bool = False) -> dict[str, Any]:
    """An error status; with ``echo_authorization`` the message ends with the request's
    Authorization header, as some careless servers do."""
    body = {"error": {"message": message, "type": "invalid_request_error"}}
    return {"kind": "error", "status": status, "body": body, "echo_authorization": echo_authorization}


def slow(seconds: float, response: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "slow", "seconds": seconds, "response": response}


class FakeOpenAI:
    """Start with ``with FakeOpenAI() as server:``; ``server.base_url`` ends in ``/v1``."""

    def __init__(self) -> None:
        self.responses: deque[dict[str, Any]] = deque()
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []
        self._stop = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                fake.requests.append(body)
                fake.authorizations.append(self.headers.get("Authorization"))
                spec = fake.responses.popleft() if fake.responses else error(500, "fake server has no scripted response")
                if spec["kind"] == "slow":
                    if fake._stop.wait(spec["seconds"]):
                        return
                    spec = spec["response"]
                if spec["kind"] == "error":
                    body = spec["body"]
                    if spec.get("echo_authorization"):
                        sent = self.headers.get("Authorization")
                        message = f"{body['error']['message']}; you sent {sent}"
                        body = {"error": {**body["error"], "message": message}, "authorization": sent}
                    self._send(spec["status"], body)
                    return
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{len(fake.requests)}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model", "fake"),
                        "choices": [{"index": 0, "message": spec["message"], "finish_reason": spec["finish_reason"]}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    },
                )

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def queue(self, *responses: dict[str, Any]) -> FakeOpenAI:
        self.responses.extend(responses)
        return self

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
