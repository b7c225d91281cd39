"""A TCP proxy on 127.0.0.1 in front of a PostgreSQL server that can cut a connection
around its ``COMMIT`` (fault injection for the lost-reply tests).

A write is recognised by its text: ``COMMIT`` (a pipelined transaction) or the commit
marker clause of the engine's one-statement transaction. The proxy reads what the client
sends as protocol messages, so it recognises a write however it is run: a simple query
holding that text, or the execution (``Bind``) of a statement whose ``Parse`` held it,
unnamed or prepared under a name (the engine prepares its one-statement commit: its
later executions name the statement and carry no text). Modes, armed for a number of cuts: ``before`` closes both sides as soon as the client
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
#: Untyped requests a client may send before its startup message (SSL, GSS encryption).
PRE_STARTUP = (80877103, 80877104)


class Messages:
    """What one client sends, split into protocol messages; :meth:`feed` says whether a
    chunk runs a write (see the module docstring)."""

    def __init__(self) -> None:
        self.buffer = b""
        self.started = False
        #: Names of the prepared statements whose text is a write.
        self.writes: set[bytes] = set()
        self.unnamed_write = False
        #: Executions of prepared (named) write statements seen (for tests to check).
        self.prepared_runs = 0

    def feed(self, data: bytes) -> bool:
        self.buffer += data
        found = False
        while True:
            buffer = self.buffer
            if not self.started:
                if len(buffer) < 8 or len(buffer) < int.from_bytes(buffer[:4], "big"):
                    return found
                length = int.from_bytes(buffer[:4], "big")
                if int.from_bytes(buffer[4:8], "big") not in PRE_STARTUP:
                    self.started = True
                self.buffer = buffer[length:]
                continue
            if len(buffer) < 5 or len(buffer) < 1 + int.from_bytes(buffer[1:5], "big"):
                return found
            kind, end = buffer[:1], 1 + int.from_bytes(buffer[1:5], "big")
            body, self.buffer = buffer[5:end], buffer[end:]
            found = self._message(kind, body) or found

    def _message(self, kind: bytes, body: bytes) -> bool:
        if kind == b"Q":
            return any(sign in body for sign in WRITE_SIGNS)
        if kind == b"P":
            name, rest = body.split(b"\0", 1)
            is_write = any(sign in rest.split(b"\0", 1)[0] for sign in WRITE_SIGNS)
            if not name:
                self.unnamed_write = is_write
            elif is_write:
                self.writes.add(name)
            else:
                self.writes.discard(name)
            return False
        if kind == b"B":
            statement = body.split(b"\0", 2)[1]
            if not statement:
                return self.unnamed_write
            if statement in self.writes:
                self.prepared_runs += 1
                return True
            return False
        if kind == b"C" and body[:1] == b"S":  # Close of a prepared statement
            self.writes.discard(body[1:].split(b"\0", 1)[0])
        return False


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
        #: Executions of prepared write statements seen on every connection so far.
        self.prepared_runs = 0
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
        """Cut the next ``times`` connections that send a write, in ``mode``."""
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
        self.messages = Messages()

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
            runs = self.messages.prepared_runs
            is_write = self.messages.feed(data)
            with self.proxy._lock:
                self.proxy.prepared_runs += self.messages.prepared_runs - runs
            if is_write:
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
