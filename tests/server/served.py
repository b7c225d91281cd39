"""A real ``svit serve`` subprocess for the server tests, and the stores it serves."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from svit import Process
from svit.control import PROTOCOL
from svit.limits import Limits
from svit.store import ProcessStore
from svit.values import to_tagged

__all__ = [
    "ADDRESS",
    "COUNTER",
    "Served",
    "StreamReader",
    "Tokens",
    "control_body",
    "seed",
    "start_server",
]

REPO = Path(__file__).resolve().parents[2]
ADDRESS = "svit://local/srv/counter"
OTHER = "svit://local/other/counter"
COUNTER = '(define (main input) (do (write "/memory/count" (+ (read "/memory/count") 1)) (read "/memory/count")))'
SCRIPTS = {
    "add": COUNTER,
    "fail": '(define (main input) (do (write "/memory/count" 99) (panic "no")))',
    "spin": "(define (spin n) (spin (+ n 1))) (define (main input) (spin 0))",
    "deep": "(define (down n) (+ 1 (down n))) (define (main input) (down 0))",
}


@dataclass
class Tokens:
    """A fresh token of each kind (random, so no test leans on a fixed secret)."""

    write: str = field(default_factory=lambda: "w-" + secrets.token_hex(16))
    read: str = field(default_factory=lambda: "r-" + secrets.token_hex(16))
    other: str = field(default_factory=lambda: "o-" + secrets.token_hex(16))
    busy: str = field(default_factory=lambda: "b-" + secrets.token_hex(16))

    def entries(self) -> list[dict[str, str]]:
        return [
            {"token": self.write, "prefix": "svit://local/srv/", "access": "write"},
            {"token": self.read, "prefix": "svit://local/srv/", "access": "read"},
            {"token": self.other, "prefix": "svit://local/other/", "access": "write"},
            {"token": self.busy, "prefix": "svit://local/", "access": "read"},
        ]


def seed(location: str, *addresses: str) -> None:
    """Create counter processes (count 0, the scripts above, a small step budget)."""
    with ProcessStore.open(location) as store:
        for address in addresses:
            builder = Process.builder(address).limits(Limits(max_steps=20_000)).memory("count", 0)
            for name, source in SCRIPTS.items():
                builder = builder.library(name, source)
            store.create(builder.build())


def control_body(request_id: str, expected: int, *, script: str = "add", input: Any = None, client: str = "client-a",
                 address: str = ADDRESS) -> dict[str, Any]:
    return {
        "protocol": PROTOCOL, "client_id": client, "request_id": request_id, "process_id": address,
        "expected_version": expected, "command": {"operation": "activate", "script": script, "input": to_tagged(input)},
    }


@dataclass
class Served:
    process: subprocess.Popen[str]
    url: str
    location: str
    tokens: Tokens

    def client(self, token: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, **kwargs)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=20)
        finally:
            for stream in (self.process.stdout, self.process.stderr):
                if stream is not None:
                    stream.close()

    def stderr(self) -> str:
        assert self.process.stderr is not None
        return self.process.stderr.read()

    def raw_request(self, head: str) -> str:
        """Send ``head`` (request line and headers, no body) on a plain socket and read the
        answer until its JSON error body ends or the server closes: what a client that
        declares a body and never sends it gets."""
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(head.encode())
            reply = ""
            while "}}" not in reply:
                more = sock.recv(65536).decode("latin-1")
                if not more:
                    break
                reply += more
        return reply


def start_server(location: str, tokens: Tokens, *, listen: str = "127.0.0.1:0", env: dict[str, str] | None = None,
                 token_file: Path | None = None, timeout: float = 30.0) -> Served:
    """``svit serve --listen 127.0.0.1:0`` over ``location``; waits for its line and reads the port."""
    environ = {**os.environ, "PYTHONPATH": str(REPO), "SVIT_SERVE_TOKENS": json.dumps(tokens.entries()), **(env or {})}
    command = [sys.executable, "-m", "svit.cli", "serve", "--store", location, "--listen", listen]
    if token_file is not None:
        command += ["--tokens", str(token_file)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ, cwd=REPO)
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.1)
        if ready:
            line = process.stdout.readline()
            if line.startswith("svit: serving http://"):
                return Served(process, line.strip().removeprefix("svit: serving "), location, tokens)
            if line:
                continue
        if process.poll() is not None:
            break
    process.kill()
    _, err = process.communicate()
    raise AssertionError(f"svit serve did not start: {err[-2000:]}")


class StreamReader:
    """Reads an SSE response in a thread: ``(event, id, data)`` tuples into a queue."""

    def __init__(self, served: Served, token: str, address_path: str, *, params: dict[str, str] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        self.events: queue.Queue[tuple[str, str, Any]] = queue.Queue()
        self.status: int | None = None
        self._opened = threading.Event()
        self._client = served.client(token)
        self._stop = False
        self._socket: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, args=(address_path, params or {}, headers or {}), daemon=True)
        self._thread.start()
        if not self._opened.wait(20):
            raise AssertionError("the event stream did not open")

    def _run(self, path: str, params: dict[str, str], headers: dict[str, str]) -> None:
        from svit.client import SseParser

        try:
            with self._client.stream("GET", f"/v1/events/{path}", params=params, headers=headers,
                                     timeout=httpx.Timeout(10, read=None)) as answer:
                self.status = answer.status_code
                self._socket = answer.extensions["network_stream"].get_extra_info("socket")
                self._opened.set()
                parser = SseParser()
                for line in answer.iter_lines():
                    if self._stop:
                        return
                    found = parser.feed(line)
                    if found is not None:
                        event, ident, data = found
                        self.events.put((event, ident, json.loads(data)))
        except (httpx.HTTPError, ValueError, OSError):
            pass
        finally:
            self._opened.set()

    def take(self, count: int, timeout: float = 15.0) -> list[tuple[str, str, Any]]:
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"only {len(out)} of {count} events arrived: {out}")
            try:
                out.append(self.events.get(timeout=left))
            except queue.Empty:
                continue
        return out

    def nothing_more(self, wait: float = 0.5) -> bool:
        try:
            self.events.get(timeout=wait)
        except queue.Empty:
            return True
        return False

    def close(self) -> None:
        """Hang up at once (the reading thread is woken by the shutdown)."""
        self._stop = True
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)
        self._client.close()
        self._thread.join(5)


def versions(events: Iterator[tuple[str, str, Any]] | list[tuple[str, str, Any]]) -> list[int]:
    return [data["version"] for _, _, data in events]
