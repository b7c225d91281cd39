"""The allowlisted HTTP port, against a local server on 127.0.0.1 only."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import httpx
import pytest

from svit import PortError, Ports, Process
from svit.errors import SvitError
from svit.ports.http import MAX_REQUEST_BODY, HttpPort, http_port
from tests.bounds import assert_time_within, measure, unchanged

ADDRESS = "svit://local/test/http"
CALL = "(define (main input) (port-call \"http\" input))"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, body: bytes, headers: list[tuple[str, str]] = ()) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.hits.append((self.command, self.path, body, dict(self.headers)))  # type: ignore[attr-defined]
        path = self.path
        if path == "/api/hello":
            self._send(200, b"hello \xff world", [("X-Reply", "yes")])
        elif path == "/api/echo":
            self._send(201, body, [("X-Seen", self.headers.get("X-Test", ""))])
        elif path == "/api/redirect":
            self._send(302, b"moved", [("Location", "/api/target")])
        elif path == "/api/target":
            self._send(200, b"target")
        elif path.startswith("/api/big/"):
            size = int(path.rsplit("/", 1)[1])
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            try:
                for start in range(0, size, 65536):
                    self.wfile.write(b"x" * min(65536, size - start))
            except (BrokenPipeError, ConnectionResetError):
                pass
        elif path == "/api/slow":
            time.sleep(1.5)
            self._send(200, b"late")
        elif path == "/api/echo-headers":
            seen = json.dumps(dict(self.headers)).encode()
            self._send(200, seen, [("X-Echo-Authorization", self.headers.get("Authorization", ""))])
        elif path == "/api/many-headers":
            self._send(200, b"", [(f"X-H{i}", "v") for i in range(70)])
        else:
            self._send(200, b"other")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle


@pytest.fixture()
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.hits = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def base(httpd: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}"


def process(port: HttpPort, source: str = CALL) -> Process:
    return Process.builder(ADDRESS).memory("x", 0).library("call", source).ports(Ports().port("http", port)).build()


def refused(port: HttpPort, request: dict[str, Any]) -> str:
    with pytest.raises(PortError) as caught:
        port.execute(None, request)
    return str(caught.value)


# ---------------------------------------------------------------------------- through a script


def test_allowlisted_request_through_port_call(server: ThreadingHTTPServer) -> None:
    p = process(http_port([base(server) + "/api"]))
    assert p.read("/ports/http")["effect"] == "external"
    a = p.exec("/lib/call", {"method": "GET", "url": base(server) + "/api/hello"})
    assert a.output["status"] == 200
    assert a.output["body"] == "hello \ufffd world"  # UTF-8-lossy
    assert a.output["headers"]["x-reply"] == "yes"
    post = p.exec("/lib/call", {"method": "POST", "url": base(server) + "/api/echo", "headers": {"X-Test": "abc"}, "body": "ping"})
    assert post.output["status"] == 201 and post.output["body"] == "ping" and post.output["headers"]["x-seen"] == "abc"
    assert [(m, path) for m, path, _b, _h in server.hits] == [("GET", "/api/hello"), ("POST", "/api/echo")]  # type: ignore[attr-defined]


def test_empty_allowlist_denies_everything_item_75(server: ThreadingHTTPServer) -> None:
    p = process(http_port([]))
    with pytest.raises(SvitError) as caught:
        p.exec("/lib/call", {"method": "GET", "url": base(server) + "/api/hello"})
    assert caught.value.code == "script_failed"
    assert "port /ports/http failed: HTTP URL is not allowed" in caught.value.message
    assert server.hits == []  # type: ignore[attr-defined]


def test_failed_activation_keeps_the_request_but_not_the_state_item_76(server: ThreadingHTTPServer) -> None:
    source = '(define (main input) (do (write "/memory/x" 1) (port-call "http" input) (panic "late")))'
    p = process(http_port([base(server)]), source)
    version, root_hash, snapshot = p.version, p.root_hash, p.snapshot()
    with pytest.raises(SvitError) as caught:
        p.exec("/lib/call", {"method": "GET", "url": base(server) + "/api/hello"})
    assert "late" in caught.value.message
    assert len(server.hits) == 1  # type: ignore[attr-defined]
    assert p.version == version and p.root_hash == root_hash and p.snapshot() == snapshot
    assert p.read("/memory/x") == 0


def test_redirect_is_returned_not_followed(server: ThreadingHTTPServer) -> None:
    p = process(http_port([base(server) + "/api"]))
    a = p.exec("/lib/call", {"method": "GET", "url": base(server) + "/api/redirect"})
    assert a.output["status"] == 302 and a.output["headers"]["location"] == "/api/target"
    assert [path for _m, path, _b, _h in server.hits] == ["/api/redirect"]  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- allowlist rules


def test_allowlist_matches_scheme_host_port_and_whole_path_segments(server: ThreadingHTTPServer) -> None:
    root = base(server)
    port = HttpPort([root + "/api"])
    assert port.execute(None, {"method": "GET", "url": root + "/api"})["status"] == 200
    assert port.execute(None, {"method": "GET", "url": root + "/api/x?q=1"})["status"] == 200
    for url in (
        root + "/apix",
        root + "/",
        root + "/other/api",
        root.replace("127.0.0.1", "localhost") + "/api/x",
        root.replace("http://", "https://") + "/api/x",
        "http://127.0.0.1:1/api/x",
    ):
        assert refused(port, {"method": "GET", "url": url}) == "HTTP URL is not allowed", url
    assert [path for _m, path, _b, _h in server.hits] == ["/api", "/api/x?q=1"]  # type: ignore[attr-defined]


def test_default_ports_and_trailing_slash_roots() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(204)

    port = HttpPort(["https://api.example/v1/", "http://EXAMPLE.org"], transport=httpx.MockTransport(handler))
    assert port.execute(None, {"method": "GET", "url": "https://api.example:443/v1/items"})["status"] == 204
    assert port.execute(None, {"method": "DELETE", "url": "http://example.org:80/anything"})["status"] == 204
    assert refused(port, {"method": "GET", "url": "https://api.example:8443/v1/items"}) == "HTTP URL is not allowed"
    assert refused(port, {"method": "GET", "url": "http://api.example/v1/items"}) == "HTTP URL is not allowed"
    assert len(seen) == 2


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1/api",
        "file:///etc/passwd",
        "http://user:pw@127.0.0.1/api",
        "http://user@127.0.0.1/api",
        "http://127.0.0.1/api#frag",
        "http://127.0.0.1/api/%2e%2e/admin",
        "http://127.0.0.1/api/../admin",
        "http://127.0.0.1/api/./x",
        "http://127.0.0.1/api%2fadmin",
        "http://127.0.0.1/api\\..\\admin",
        "http://127.0.0.1/api x",
        "http://127.0.0.1/api\r\nX: y",
        "//127.0.0.1/api",
        "/api",
        "",
        42,
    ],
)
def test_invalid_urls(url: Any) -> None:
    port = HttpPort.unrestricted(transport=httpx.MockTransport(lambda r: pytest.fail("no request may be sent")))
    assert refused(port, {"method": "GET", "url": url}) == "invalid HTTP URL"


@pytest.mark.parametrize(
    "entry",
    ["ftp://h/", "http://u:p@h/", "http://h/?q=1", "http://h/#f", "h/path", "", "http://h/../x"],
)
def test_allowlist_entries_are_validated_at_construction(entry: str) -> None:
    with pytest.raises(ValueError):
        HttpPort([entry])
    with pytest.raises(TypeError):
        HttpPort("http://h/")  # type: ignore[arg-type]


def test_unrestricted_is_an_explicit_grant(server: ThreadingHTTPServer) -> None:
    port = HttpPort.unrestricted()
    assert port.allowlist is None and "unrestricted" in port.descriptor().description
    assert port.execute(None, {"method": "GET", "url": base(server) + "/elsewhere"})["body"] == "other"
    assert refused(port, {"method": "GET", "url": "http://a:b@127.0.0.1/"}) == "invalid HTTP URL"


# ---------------------------------------------------------------------------- request and response rules


def test_methods(server: ThreadingHTTPServer) -> None:
    port = HttpPort([base(server)])
    for method in ("CONNECT", "TRACE", "OPTIONS", "get", "", None):
        assert refused(port, {"method": method, "url": base(server) + "/api/hello"}) == "unsupported HTTP method"
    head = port.execute(None, {"method": "HEAD", "url": base(server) + "/api/hello"})
    assert head["status"] == 200 and head["body"] == ""
    for method in ("PUT", "PATCH", "DELETE"):
        assert port.execute(None, {"method": method, "url": base(server) + "/api/echo", "body": method})["body"] == method
    assert [m for m, _p, _b, _h in server.hits] == ["HEAD", "PUT", "PATCH", "DELETE"]  # type: ignore[attr-defined]


def test_oversize_request_body_is_refused_before_sending(server: ThreadingHTTPServer) -> None:
    port = HttpPort([base(server)])
    url = base(server) + "/api/echo"
    assert port.execute(None, {"method": "POST", "url": url, "body": "a" * MAX_REQUEST_BODY})["status"] == 201
    assert refused(port, {"method": "POST", "url": url, "body": "a" * (MAX_REQUEST_BODY + 1)}) == "HTTP request body limit exceeded"
    # Bytes, not characters, are counted.
    assert refused(port, {"method": "POST", "url": url, "body": "é" * (MAX_REQUEST_BODY // 2 + 1)}) == "HTTP request body limit exceeded"
    assert len(server.hits) == 1  # type: ignore[attr-defined]


def test_oversize_response_is_refused(server: ThreadingHTTPServer) -> None:
    small = HttpPort([base(server)], max_response_bytes=1000)
    assert small.execute(None, {"method": "GET", "url": base(server) + "/api/big/1000"})["body"] == "x" * 1000
    assert refused(small, {"method": "GET", "url": base(server) + "/api/big/1001"}) == "response too large"
    default = HttpPort([base(server)])
    assert refused(default, {"method": "GET", "url": base(server) + f"/api/big/{8 * 1024 * 1024 + 1}"}) == "response too large"


def test_response_header_limits(server: ThreadingHTTPServer) -> None:
    port = HttpPort([base(server)])
    assert "too many headers" in refused(port, {"method": "GET", "url": base(server) + "/api/many-headers"})


@pytest.mark.parametrize(
    "headers, text",
    [
        ({"X-A": "1\r\nX-Injected: 2"}, "CR, LF or NUL"),
        ({"X-A": "line\nbreak"}, "CR, LF or NUL"),
        ({"X-A\r\nX-B": "1"}, "header name is invalid"),
        ({"Bad Name": "1"}, "header name is invalid"),
        ({"": "1"}, "header name is invalid"),
        ({"X-Big": "v" * (8 * 1024)}, "exceeds 8192 bytes"),
        ({f"X-{i}": "v" for i in range(65)}, "too many headers"),
        ({f"X-{i}": "v" * 8000 for i in range(9)}, "in total"),
        ({"Host": "evil.example"}, "set by the port"),
        ({"Transfer-Encoding": "chunked"}, "set by the port"),
        ({"X-A": 1}, "headers must map names to text"),
    ],
)
def test_request_header_refusals(server: ThreadingHTTPServer, headers: dict[str, Any], text: str) -> None:
    port = HttpPort([base(server)])
    assert text in refused(port, {"method": "GET", "url": base(server) + "/api/hello", "headers": headers})
    assert server.hits == []  # type: ignore[attr-defined]


def test_crlf_header_refused_through_a_script(server: ThreadingHTTPServer) -> None:
    p = process(http_port([base(server)]))
    with pytest.raises(SvitError) as caught:
        p.exec("/lib/call", {"method": "GET", "url": base(server) + "/api/hello", "headers": {"X-A": "a\r\nX-B: b"}})
    assert "port /ports/http failed: HTTP request header contains CR, LF or NUL" in caught.value.message
    assert server.hits == []  # type: ignore[attr-defined]


def test_timeout(server: ThreadingHTTPServer) -> None:
    port = HttpPort([base(server)], timeout=0.3)
    started = time.monotonic()
    assert refused(port, {"method": "GET", "url": base(server) + "/api/slow"}) == "request timed out"
    assert time.monotonic() - started < 1.2


def test_transport_failure_is_request_failed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("boom", request=request)

    port = HttpPort(["http://127.0.0.1:9"], transport=httpx.MockTransport(handler))
    assert refused(port, {"method": "GET", "url": "http://127.0.0.1:9/"}) == "request failed"


def test_malformed_input() -> None:
    port = HttpPort(["http://127.0.0.1:9"], transport=httpx.MockTransport(lambda r: pytest.fail("no request")))
    assert "input must be a map" in refused(port, "GET")  # type: ignore[arg-type]
    assert "unknown field" in refused(port, {"method": "GET", "url": "http://127.0.0.1:9/", "follow": True})
    assert "body must be text" in refused(port, {"method": "POST", "url": "http://127.0.0.1:9/", "body": 1})


def test_descriptor_catalog() -> None:
    entry = Ports().port("http", http_port(["https://api.example/v1"])).catalog()["http"]
    assert entry["effect"] == "external" and entry["name"] == "http"
    assert any("redirects" in limit for limit in entry["limits"])
    assert HttpPort(["https://API.example/v1/"]).allowlist == ["https://api.example:443/v1"]


# ---------------------------------------------------------------------------- one overall deadline


class _TricklingServer:
    """A raw server on 127.0.0.1 that answers with a status line and then trickles
    one header byte every ``interval`` seconds (for at most ``count`` bytes)."""

    def __init__(self, interval: float = 0.1, count: int = 40) -> None:
        self.interval, self.count = interval, count
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/api/trickle"

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            try:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    data += chunk
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                for _ in range(self.count):
                    if self.stop.wait(self.interval):
                        return
                    conn.sendall(b"a")
                conn.sendall(b"\r\nContent-Length: 4\r\n\r\nlate")
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.listener.close()
        self.thread.join(5)


def test_overall_deadline_covers_trickled_response_headers() -> None:
    trickle = _TricklingServer(interval=0.1, count=40)  # 4 s of headers unless stopped
    try:
        port = HttpPort.unrestricted(timeout=0.5)
        cost = measure(lambda: port.execute(None, {"method": "GET", "url": trickle.url}))
    finally:
        trickle.close()
    assert isinstance(cost.error, PortError) and str(cost.error) == "request timed out", cost.error or cost.result
    assert_time_within(cost, 500)


def test_overall_deadline_covers_trickled_headers_through_a_script() -> None:
    trickle = _TricklingServer(interval=0.1, count=40)
    try:
        p = process(HttpPort.unrestricted(timeout=0.5))
        with unchanged(p):
            cost = measure(lambda: p.exec("/lib/call", {"method": "GET", "url": trickle.url}))
    finally:
        trickle.close()
    assert isinstance(cost.error, SvitError) and "port /ports/http failed: request timed out" in cost.error.message
    assert_time_within(cost, 500)


# ---------------------------------------------------------------------------- allowlist tricks

OK, INVALID, DENIED = "sent", "invalid HTTP URL", "HTTP URL is not allowed"
TRICK_ROOTS = ["http://h.example/api", "http://[::1]:8080/v6", "http://bücher.example/idn", "https://s.example:8443/p"]


@pytest.mark.parametrize(
    "url, verdict",
    [
        # plain matches, and the forms that are normalised before matching
        ("http://h.example/api/x", OK),
        ("http://h.example/api/", OK),
        ("HTTP://H.EXAMPLE/api/x", OK),  # scheme and host case
        ("http://h.example:80/api/x", OK),  # explicit default port
        ("http://h.example/api/a%2eb", OK),  # an encoded dot inside a name
        ("http://h.example/api/x?next=../../admin", OK),  # the query is not the path
        ("http://[0:0:0:0:0:0:0:1]:8080/v6/x", OK),  # IPv6 written in full
        ("http://xn--bcher-kva.example/idn/x", OK),  # IDN, ASCII form
        ("http://BÜCHER.example/idn/x", OK),  # IDN, Unicode form and case
        ("https://s.example:8443/p/x", OK),
        # path parameters: servers disagree about them, so they are refused
        ("http://h.example/api/..;/admin", INVALID),
        ("http://h.example/api/.;/x", INVALID),
        ("http://h.example/api;jsessionid=1/x", INVALID),
        ("http://h.example/api/%3b/x", INVALID),
        # dot segments, written or encoded, once or twice
        ("http://h.example/api/../admin", INVALID),
        ("http://h.example/api/%2e%2e/admin", INVALID),
        ("http://h.example/api/.%2E/admin", INVALID),
        ("http://h.example/api/%252e%252e/admin", INVALID),
        ("http://h.example/api/%EF%BC%8E%EF%BC%8E/admin", INVALID),  # fullwidth dots
        ("http://h.example/api/\uff0e\uff0e/admin", INVALID),
        # separators: encoded slashes and backslashes, empty segments
        ("http://h.example/api%2fadmin", INVALID),
        ("http://h.example/api/%5c../admin", INVALID),
        ("http://h.example/api\\..\\admin", INVALID),
        ("http://h.example/api//admin", INVALID),
        ("http://h.example//api/x", INVALID),
        ("http://h.example/api/%2541", INVALID),  # double encoding
        ("http://h.example/api/%zz", INVALID),  # a broken escape
        ("http://h.example/api/%0a", INVALID),  # an encoded control character
        # credentials and authority tricks
        ("http://user@h.example/api/x", INVALID),
        ("http://@h.example/api/x", INVALID),
        ("http://h.example@evil.example/api/x", INVALID),
        ("http://h.example:/api/x", INVALID),  # an empty port
        ("http://h.example:080/api/x", INVALID),  # a port with a leading zero
        ("http://h.example./api/x", INVALID),  # a trailing dot
        ("http://2130706433/api", INVALID),  # IPv4 as one number
        ("http://0x7f.1/api", INVALID),
        ("http://127.1/api", INVALID),
        ("http://0177.0.0.1/api", INVALID),
        ("http://[fe80::1%25eth0]:8080/v6/x", INVALID),  # a zone id
        ("http://\uff48.example/api/x", INVALID),  # a fullwidth host letter
        # everything else must match scheme, host, port and whole path segments
        ("http://h.example:8080/api/x", DENIED),  # a non-default port
        ("https://h.example/api/x", DENIED),
        ("http://h.example/apix", DENIED),
        ("http://h.example/API/x", DENIED),  # paths are case-sensitive
        ("http://evil.example/api/x", DENIED),
        ("http://[::2]:8080/v6/x", DENIED),
        ("http://[::ffff:127.0.0.1]:8080/v6/x", DENIED),
        ("https://s.example/p/x", DENIED),
    ],
)
def test_allowlist_tricks_are_normalised_or_refused(url: str, verdict: str) -> None:
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(str(request.url))
        return httpx.Response(204)

    port = HttpPort(TRICK_ROOTS, transport=httpx.MockTransport(handler))
    if verdict == OK:
        assert port.execute(None, {"method": "GET", "url": url})["status"] == 204
        assert len(sent) == 1
    else:
        assert refused(port, {"method": "GET", "url": url}) == verdict
        assert sent == []


@pytest.mark.parametrize("entry", ["http://h/api;x", "http://h//api", "http://2130706433/", "http://h./", "http://h:/", "http://h/%252e"])
def test_allowlist_entries_with_ambiguous_forms_are_refused(entry: str) -> None:
    with pytest.raises(ValueError):
        HttpPort([entry])


def test_allowlist_normalises_idn_and_ipv6_entries() -> None:
    assert HttpPort(["http://BÜCHER.example/x", "http://[0:0::1]:81/"]).allowlist == [
        "http://xn--bcher-kva.example:80/x",
        "http://[::1]:81/",
    ]


# ---------------------------------------------------------------------------- configured credentials

SECRET = "sk-live-0123456789abcdef"


def test_configured_headers_are_sent_but_never_shown(server: ThreadingHTTPServer) -> None:
    port = HttpPort([base(server) + "/api"], headers={"Authorization": f"Bearer {SECRET}", "X-Team": "blue"})
    result = port.execute(None, {"method": "GET", "url": base(server) + "/api/echo-headers"})
    sent = server.hits[0][3]  # type: ignore[attr-defined]
    assert sent["Authorization"] == f"Bearer {SECRET}" and sent["X-Team"] == "blue"
    assert SECRET not in json.dumps(result)
    assert json.loads(result["body"])["Authorization"] == "[redacted]"
    assert result["headers"]["x-echo-authorization"] == "[redacted]"
    assert json.loads(result["body"])["X-Team"] == "blue"  # short values are not credentials
    # a script can neither replace nor duplicate a configured header
    for name in ("Authorization", "authorization", "X-TEAM"):
        text = refused(port, {"method": "GET", "url": base(server) + "/api/hello", "headers": {name: "mine"}})
        assert text == f"HTTP request header is set by the port: {name}"
    assert len(server.hits) == 1  # type: ignore[attr-defined]
    catalog = json.dumps(Ports().port("http", port).catalog())
    assert SECRET not in catalog and "Authorization" in catalog


def test_configured_credentials_never_reach_a_script(server: ThreadingHTTPServer) -> None:
    p = process(http_port([base(server) + "/api"], headers={"Authorization": f"Bearer {SECRET}"}))
    a = p.exec("/lib/call", {"method": "GET", "url": base(server) + "/api/echo-headers"})
    assert a.output["status"] == 200 and SECRET not in json.dumps(a.output)
    assert SECRET.encode() not in p.snapshot()


@pytest.mark.parametrize(
    "headers, kind",
    [
        ({"Host": "x"}, ValueError),
        ({"X-A": "1\r\nX-B: 2"}, ValueError),
        ({"Bad Name": "1"}, ValueError),
        ({"X-A": 1}, TypeError),
        ("Authorization: x", TypeError),
    ],
)
def test_configured_headers_are_checked_at_construction(headers: Any, kind: type) -> None:
    with pytest.raises(kind):
        HttpPort(["http://127.0.0.1:9"], headers=headers)
