"""A local OpenAI-compatible chat completions server for the chat and streaming tests.

It listens on 127.0.0.1 (an ephemeral port) in a background thread and answers
``POST /v1/chat/completions`` from a queue of scripted answers. The same answer is sent
as one JSON body, or, when the request asks for ``"stream": true``, as server-sent
``data:`` chunks ending in ``data: [DONE]``: the text in several pieces, each tool call's
arguments split across chunks, and a usage chunk when the request asked for one.

An answer may also be an HTTP error, a delay (for timeouts), a stall after some text
(the stream waits until the test releases it: Ctrl-C tests, streaming proofs), or a
function of the request. Every request body is recorded.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


def text(content: str, *, finish_reason: str = "stop", pieces: int = 4) -> dict[str, Any]:
    return {"kind": "answer", "content": content, "tool_calls": [], "finish_reason": finish_reason, "pieces": pieces}


def calls(*named: tuple[str, Any], content: str | None = None, pieces: int = 3) -> dict[str, Any]:
    """Tool calls ``(name, arguments)``; arguments are sent as JSON text split in ``pieces``."""
    return {
        "kind": "answer",
        "content": content,
        "tool_calls": [
            {"id": f"call_{index}", "name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}
            for index, (name, arguments) in enumerate(named)
        ],
        "finish_reason": "tool_calls",
        "pieces": pieces,
    }


def error(status: int, message: str) -> dict[str, Any]:
    return {"kind": "error", "status": status, "body": {"error": {"message": message, "type": "server_error"}}}


def slow(seconds: float, answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` after ``seconds`` (before any header is sent)."""
    return {"kind": "slow", "seconds": seconds, "answer": answer}


def stall(first: str, rest: str, release: threading.Event) -> dict[str, Any]:
    """A streamed answer that sends ``first``, waits for ``release``, then sends ``rest``."""
    return {"kind": "stall", "first": first, "rest": rest, "release": release}


def split(text_value: str, pieces: int) -> list[str]:
    """``text_value`` in ``pieces`` non-empty parts (fewer when it is shorter)."""
    if not text_value:
        return []
    size = max(1, -(-len(text_value) // max(pieces, 1)))
    return [text_value[i : i + size] for i in range(0, len(text_value), size)]


class FakeModel:
    """``with FakeModel() as model:``; ``model.base_url`` ends in ``/v1``."""

    def __init__(self) -> None:
        self.answers: deque[dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]] = deque()
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []
        self.send_usage = True
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path != "/v1/chat/completions":
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                with fake._arrived:
                    fake.requests.append(body)
                    fake.authorizations.append(self.headers.get("Authorization"))
                    answer = fake.answers.popleft() if fake.answers else error(500, "the fake model has no scripted answer")
                    fake._arrived.notify_all()
                if callable(answer):
                    answer = answer(body)
                fake.serve(self, body, answer)

            def _json(self, status: int, payload: Any) -> None:
                fake.send_json(self, status, payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    # ------------------------------------------------------------------ answering
    def serve(self, handler: BaseHTTPRequestHandler, body: dict[str, Any], answer: dict[str, Any]) -> None:
        kind = answer["kind"]
        if kind == "slow":
            if self._stop.wait(answer["seconds"]):
                return
            answer = answer["answer"]
            kind = answer["kind"]
        if kind == "error":
            self.send_json(handler, answer["status"], answer["body"])
            return
        streamed = bool(body.get("stream"))
        if kind == "stall":
            self._stall(handler, body, answer)
            return
        if not streamed:
            message: dict[str, Any] = {"role": "assistant", "content": answer["content"]}
            if answer["tool_calls"]:
                message["tool_calls"] = [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in answer["tool_calls"]
                ]
            payload = {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "fake"),
                "choices": [{"index": 0, "message": message, "finish_reason": answer["finish_reason"]}],
            }
            if self.send_usage:
                payload["usage"] = USAGE
            self.send_json(handler, 200, payload)
            return
        events = [{"role": "assistant", "content": ""}]
        events += [{"content": piece} for piece in split(answer["content"] or "", answer["pieces"])]
        for index, call in enumerate(answer["tool_calls"]):
            pieces = split(call["arguments"], answer["pieces"]) or [""]
            events.append({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                           "function": {"name": call["name"], "arguments": pieces[0]}}]})
            events += [{"tool_calls": [{"index": index, "function": {"arguments": piece}}]} for piece in pieces[1:]]
        self._start_stream(handler)
        for delta in events:
            self._chunk(handler, body, {"index": 0, "delta": delta, "finish_reason": None})
        self._chunk(handler, body, {"index": 0, "delta": {}, "finish_reason": answer["finish_reason"]})
        self._finish_stream(handler, body)

    def _stall(self, handler: BaseHTTPRequestHandler, body: dict[str, Any], answer: dict[str, Any]) -> None:
        self._start_stream(handler)
        try:
            self._chunk(handler, body, {"index": 0, "delta": {"role": "assistant", "content": answer["first"]}, "finish_reason": None})
            release: threading.Event = answer["release"]
            while not release.wait(0.05):
                if self._stop.is_set():
                    return
            self._chunk(handler, body, {"index": 0, "delta": {"content": answer["rest"]}, "finish_reason": None})
            self._chunk(handler, body, {"index": 0, "delta": {}, "finish_reason": "stop"})
            self._finish_stream(handler, body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (a cancelled reply)

    @staticmethod
    def send_json(handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout)

    @staticmethod
    def _start_stream(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.flush()

    def _chunk(self, handler: BaseHTTPRequestHandler, body: dict[str, Any], choice: dict[str, Any]) -> None:
        payload = {"id": "chatcmpl-stream", "object": "chat.completion.chunk", "created": 0,
                   "model": body.get("model", "fake"), "choices": [choice]}
        handler.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        handler.wfile.flush()

    def _finish_stream(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        if self.send_usage and (body.get("stream_options") or {}).get("include_usage"):
            payload = {"id": "chatcmpl-stream", "object": "chat.completion.chunk", "created": 0,
                       "model": body.get("model", "fake"), "choices": [], "usage": USAGE}
            handler.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()

    # ------------------------------------------------------------------ test side
    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def queue(self, *answers: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]) -> FakeModel:
        with self._lock:
            self.answers.extend(answers)
        return self

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> None:
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.requests) >= count, timeout):
                raise AssertionError(f"expected {count} model requests, got {len(self.requests)}")

    def __enter__(self) -> FakeModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
