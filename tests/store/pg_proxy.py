"""A TCP proxy on 127.0.0.1 in front of a PostgreSQL server that can cut a connection
around its ``COMMIT`` (fault injection for the lost-reply tests).

A write is recognised by its text: ``COMMIT`` (a pipelined transaction) or the commit
marker clause of the engine's one-statement transaction (psycopg sends a query's text
until it has run it five times and prepared it, so a test cuts one of its first writes).
Modes, armed for a number of cuts: ``before`` closes both sides as soon as the client
sends a write (the server never sees it: nothing is committed); ``after`` forwards it,
waits for the server's ready-for-query reply that follows it and closes both sides
instead of passing that on (the transaction committed, the client never hears so).
``refuse`` makes the proxy close every new connection at once (the server cannot be
reached).
"""

from __future__ import annotations

import socket
import threading
import urllib.parse

__all__ = ["Proxy"]

#: What a write's messages hold (see the module docstring).
WRITE_SIGNS = (b"COMMIT", b"marker AS (")
#: The server's ReadyForQuery message ('Z', length 5): the statement or transaction is over.
READY = b"Z\x00\x00\x00\x05"


class Proxy:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        self.mode: str | None = None
        self.times = 0
        self.refuse = False
        self.cuts = 0
        self._lock = threading.Lock()
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @classmethod
    def before(cls, url: str) -> tuple[Proxy, str]:
        """A proxy in front of the server ``url`` names, and ``url`` pointing at it."""
        parts = urllib.parse.urlsplit(url)
        proxy = cls(parts.hostname or "127.0.0.1", parts.port or 5432)
        netloc = f"{parts.username + '@' if parts.username else ''}127.0.0.1:{proxy.port}"
        return proxy, urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    def arm(self, mode: str, times: int = 1) -> None:
        """Cut the next ``times`` connections that send ``COMMIT``, in ``mode``."""
        with self._lock:
            self.mode = mode
            self.times = times

    def close(self) -> None:
        self._closed = True
        for sock in [self.listener, *self._sockets]:
            try:
                sock.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refuse:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            self._sockets += [client, upstream]
            link = _Link(self, client, upstream)
            threading.Thread(target=link.upward, daemon=True).start()
            threading.Thread(target=link.downward, daemon=True).start()

    def take(self, mode: str) -> bool:
        with self._lock:
            if self.mode != mode or self.times <= 0:
                return False
            self.times -= 1
            if self.times == 0:
                self.mode = None
            self.cuts += 1
            return True


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, proxy: Proxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.awaiting_commit = False

    def cut(self) -> None:
        for sock in (self.client, self.upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def upward(self) -> None:
        while True:
            try:
                data = self.client.recv(65536)
            except OSError:
                return
            if not data:
                self.cut()
                return
            if any(sign in data for sign in WRITE_SIGNS):
                if self.proxy.take("before"):
                    self.cut()
                    return
                if self.proxy.take("after"):
                    self.awaiting_commit = True
            try:
                self.upstream.sendall(data)
            except OSError:
                return

    def downward(self) -> None:
        while True:
            try:
                data = self.upstream.recv(65536)
            except OSError:
                return
            if not data:
                self.cut()
                return
            if self.awaiting_commit and READY in data:
                self.cut()  # the server committed; the client never hears so
                return
            try:
                self.client.sendall(data)
            except OSError:
                return
