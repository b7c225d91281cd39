"""The ``http`` port: allowlisted HTTP requests from scripts (reference §7.3).

A script calls ``(port-call "http" {"method" "GET" "url" "https://api.example/v1/x"})``
and gets ``{"status": int, "headers": {name: value}, "body": text}`` back. The request
is an external effect: it happens once, in place, and is never rolled back, even if
the activation later fails.

What the port refuses, and why (each refusal is a :class:`svit.PortError` whose text
reaches the script as ``port /ports/http failed: <text>``):

* a URL outside the allowlist (``HTTP URL is not allowed``); an empty allowlist
  denies everything, so granting HTTP is always an explicit host decision;
* a URL that is not a plain absolute http(s) URL (``invalid HTTP URL``): these are
  the usual ways of making one parser see a different host or path than another, so
  anything servers read differently is refused rather than guessed at:

  - credentials (even an empty ``@``), fragments, whitespace, control characters;
  - an empty port (``h:``) or one with a leading zero (``h:080``);
  - a host with a trailing dot, an IPv6 zone id, or a numeric host that is not a
    dotted quad (``2130706433``, ``0x7f.1``, ``127.1``, ``0177.0.0.1``);
  - in the path: dot segments written, percent-encoded (``%2e%2e``), encoded twice
    (``%252e``) or in a compatibility form (fullwidth ``．．``); ``;`` path
    parameters (``/api/..;/x``), raw or encoded; backslashes and encoded slashes or
    backslashes; encoded control characters; anything still percent-encoded after one
    decoding; broken escapes (``%zz``); empty segments (``//``) except a trailing
    slash.

  What is normalised before matching: scheme and host case, an IDN host (matched in
  its ASCII form, which is what is sent), an IPv6 host (compressed), an explicit
  default port, and the path (percent-decoded once, segment by segment). A root
  matches a URL with the same scheme, host and port and whole path segments; paths
  are case-sensitive. Allowlist entries follow the same rules;
* methods other than GET POST PUT PATCH DELETE HEAD (``unsupported HTTP method``);
* request bodies over 256 KiB (``HTTP request body limit exceeded``);
* more than 64 headers, more than 64 KiB of headers, one header over 8 KiB, a
  header name that is not an RFC 9110 token, CR/LF/NUL in a name or value, or a
  header the port sets itself (Host, Content-Length, Transfer-Encoding, ...), in
  the request or the response;
* responses whose (decoded) body exceeds the response cap, 8 MiB by default,
  counted while streaming so a huge body is never held (``response too large``);
* anything slower than the timeout (``request timed out``): one overall deadline
  covers name resolution, connect, TLS, sending, the response headers and the body,
  because every network operation of the standard transport is cut to the time left
  (a server that trickles bytes cannot stretch it); a host-supplied transport is
  checked between body chunks only. Any other transport failure is ``request failed``.

Redirects are **never followed**: a 3xx response is returned to the script as it
is (status, ``location`` header and body). Following it would be a second request
to a URL nobody checked against the allowlist.

Credentials stay with the host: ``headers={"Authorization": "Bearer ..."}`` are added
to every request; a script may not set a header of the same name, the descriptor names
them without their values, and any configured value of 8 characters or more that a
server echoes back in a response header or body reaches the script as ``[redacted]``
(only the exact text; a server that re-encodes it is not recognised).

The client ignores proxy and credential settings from the environment
(``trust_env=False``), so what the allowlist says is where traffic goes.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
import time
import unicodedata
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import unquote, urlsplit

try:
    import httpcore
    import httpx
except ImportError as missing:  # an optional extra: say which one
    raise ImportError(
        f"svit.ports.http needs the 'http' extra ({missing.name} is not installed): pip install 'svit[http]'",
        name=missing.name,
    ) from missing

from svit import PortContext, PortDescriptor, PortError
from svit.redact import MIN_SECRET_CHARS, REDACTED, register_secret

__all__ = [
    "DEFAULT_PORTS",
    "DEFAULT_RESPONSE_LIMIT",
    "DEFAULT_TIMEOUT",
    "MAX_HEADERS",
    "MAX_HEADERS_TOTAL",
    "MAX_HEADER_BYTES",
    "MAX_REQUEST_BODY",
    "METHODS",
    "RESERVED_REQUEST_HEADERS",
    "HttpPort",
    "http_port",
    "http_port_unrestricted",
]

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
MAX_REQUEST_BODY = 256 * 1024
MAX_HEADERS = 64
MAX_HEADER_BYTES = 8 * 1024
MAX_HEADERS_TOTAL = 64 * 1024
DEFAULT_RESPONSE_LIMIT = 8 * 1024 * 1024
DEFAULT_TIMEOUT = 30.0
DEFAULT_PORTS = {"http": 80, "https": 443}

#: Headers the port (or the HTTP client) controls; a script may not set them.
RESERVED_REQUEST_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer", "keep-alive", "proxy-authorization", "proxy-connection"}
)

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_URL_START = re.compile(r"https?://", re.IGNORECASE)
_BAD_URL_CHARS = re.compile(r"[\x00-\x20\x7f\\]")
_BROKEN_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")  # still present after decoding: encoded twice
_UNSAFE_DECODED = re.compile(r"[\x00-\x1f\x7f\\;]")
_WRITTEN_PORT = re.compile(r":([^:\]]*)$")
_CANONICAL_PORT = re.compile(r"[1-9][0-9]{0,4}")


@dataclass(frozen=True)
class _Root:
    """One allowlist entry, normalized for comparison."""

    scheme: str
    host: str
    port: int
    path: str  # without a trailing slash; "" means the whole origin

    def allows(self, scheme: str, host: str, port: int, path: str) -> bool:
        if (scheme, host, port) != (self.scheme, self.host, self.port):
            return False
        return self.path == "" or path == self.path or path.startswith(self.path + "/")


def _host(parsed: httpx.URL, what: str) -> str:
    """The host in one canonical form: IDN as lower-case ASCII (what is sent), IPv6
    compressed; forms that resolvers read differently are refused."""
    host = parsed.raw_host.decode("ascii", "replace").lower()
    if not host or host.endswith(".") or "%" in host:
        raise ValueError(what)  # a trailing dot or an IPv6 zone id
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host).compressed
        except ValueError:
            raise ValueError(what) from None
    last = host.rsplit(".", 1)[-1]
    if last.isdigit() or last.startswith("0x"):
        # A numeric last label makes the whole host an IPv4 address to a browser or a
        # resolver (2130706433, 0x7f.1, 127.1, 0177.0.0.1): only the dotted quad passes.
        try:
            if str(ipaddress.IPv4Address(host)) != host:
                raise ValueError(what)
        except ValueError:
            raise ValueError(what) from None
    return host


def _path(written: str, what: str) -> str:
    """The path as a server will read it, for matching; refused unless every reading
    agrees: no dot segments (written, encoded, twice encoded or in fullwidth form), no
    ``;`` path parameters, no encoded separators or control characters, no empty segments."""
    if _BROKEN_ESCAPE.search(written):
        raise ValueError(what)
    written = written or "/"
    if not written.startswith("/"):
        raise ValueError(what)
    pieces = written.split("/")[1:]
    segments = []
    for index, piece in enumerate(pieces):
        try:
            segment = unquote(piece, errors="strict")
        except UnicodeDecodeError:
            raise ValueError(what) from None
        if segment == "" and index != len(pieces) - 1:
            raise ValueError(what)  # "//": some servers merge it, others do not
        if _ESCAPE.search(segment) or _UNSAFE_DECODED.search(segment):
            raise ValueError(what)
        folded = unicodedata.normalize("NFKC", segment)
        if folded in (".", "..") or any(c in folded for c in "/\\;"):
            raise ValueError(what)
        segments.append(segment)
    return "/" + "/".join(segments)


def _parse(url: Any, what: str) -> tuple[httpx.URL, str, str, int, str]:
    """Parse strictly with the client's own parser, returning the parts it will use
    (in canonical form) for matching."""
    if type(url) is not str or not _URL_START.match(url) or _BAD_URL_CHARS.search(url) or "#" in url:
        raise ValueError(what)
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError, UnicodeError):
        raise ValueError(what) from None
    scheme = parsed.scheme.lower()
    written = urlsplit(url)
    if scheme not in DEFAULT_PORTS or parsed.userinfo or parsed.fragment or "@" in written.netloc:
        raise ValueError(what)
    port_text = _WRITTEN_PORT.search(written.netloc)
    if port_text is not None and not _CANONICAL_PORT.fullmatch(port_text.group(1)):
        raise ValueError(what)  # "h:" or "h:080"
    host = _host(parsed, what)
    # httpx silently resolves dot segments, so the path is judged as it was written.
    path = _path(written.path, what)
    port = parsed.port if parsed.port is not None else DEFAULT_PORTS[scheme]
    return parsed, scheme, host, port, path


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _root(entry: Any) -> _Root:
    text = f"invalid HTTP allowlist entry (need an http(s) root URL without credentials, query or fragment): {entry!r}"
    try:
        parsed, scheme, host, port, path = _parse(entry, text)
    except ValueError:
        raise ValueError(text) from None
    if parsed.query:
        raise ValueError(text)
    return _Root(scheme, host, port, path.rstrip("/"))


def _check_headers(pairs: list[tuple[str, str]], where: str) -> None:
    """Shared header bounds for requests and responses (count, sizes, no CR/LF)."""
    if len(pairs) > MAX_HEADERS:
        raise PortError(f"HTTP {where} has too many headers (at most {MAX_HEADERS})")
    total = 0
    for name, value in pairs:
        if not _TOKEN.fullmatch(name):
            raise PortError(f"HTTP {where} header name is invalid")
        if any(c in value for c in "\r\n\x00"):
            raise PortError(f"HTTP {where} header contains CR, LF or NUL: {name}")
        size = len(name.encode("utf-8")) + len(value.encode("utf-8"))
        if size > MAX_HEADER_BYTES:
            raise PortError(f"HTTP {where} header exceeds {MAX_HEADER_BYTES} bytes: {name}")
        total += size
    if total > MAX_HEADERS_TOTAL:
        raise PortError(f"HTTP {where} headers exceed {MAX_HEADERS_TOTAL} bytes in total")


# ---------------------------------------------------------------------------- the deadline

#: Writes are sent in slices this large, so a slow reader cannot stretch one write.
_WRITE_SLICE = 16 * 1024


def _left(deadline: float, timeout: float | None, error: type[Exception]) -> float:
    """The time one network operation may take: its own timeout, cut to the deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the request's overall deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read, write and TLS handshake ends by one deadline.

    A per-operation timeout alone lets a server that sends one byte at a time keep a
    request alive forever; cutting each operation to the time left cannot."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: float) -> None:
        self._stream = stream
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(self._deadline, timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        view = memoryview(buffer)
        for start in range(0, len(view), _WRITE_SLICE):
            self._stream.write(bytes(view[start : start + _WRITE_SLICE]), _left(self._deadline, timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> httpcore.NetworkStream:
        left = _left(self._deadline, timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, left), self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


def _resolve(host: str, port: int, timeout: float) -> list[str]:
    """The host's addresses, waiting at most ``timeout``: the system resolver has no
    timeout of its own to pass, so it runs in a daemon thread that is left behind if it
    is late (it ends when the resolver gives up)."""
    try:
        ipaddress.ip_address(host)
        return [host]
    except ValueError:
        pass
    found: list[Any] = []
    done = threading.Event()

    def lookup() -> None:
        try:
            found.extend(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError):
            pass
        finally:
            done.set()

    threading.Thread(target=lookup, name="svit-http-resolve", daemon=True).start()
    if not done.wait(timeout):
        raise httpcore.ConnectTimeout("name resolution passed the deadline")
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    if not addresses:
        raise httpcore.ConnectError("name resolution failed")
    return addresses


class _DeadlineBackend(httpcore.NetworkBackend):
    """The standard socket backend with name resolution, connect and every later
    operation bounded by one deadline."""

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline
        self._sockets = httpcore.SyncBackend()

    def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, local_address: str | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        addresses = _resolve(host, port, _left(self._deadline, timeout, httpcore.ConnectTimeout))
        failure: Exception | None = None
        for address in addresses:
            left = _left(self._deadline, timeout, httpcore.ConnectTimeout)
            try:
                stream = self._sockets.connect_tcp(address, port, left, local_address, socket_options)
            except httpcore.ConnectError as exc:
                failure = exc
                continue
            return _DeadlineStream(stream, self._deadline)
        raise failure or httpcore.ConnectError("could not connect")

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("unix sockets are not used by the http port")

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, min(seconds, self._deadline - time.monotonic())))


_tls: list[Any] = []
_tls_lock = threading.Lock()


def _tls_context() -> Any:
    """One verifying TLS context for every request (building one loads the CA bundle)."""
    with _tls_lock:
        if not _tls:
            _tls.append(httpx.create_ssl_context(trust_env=False))
        return _tls[0]


def _deadline_transport(deadline: float) -> httpx.HTTPTransport:
    """httpx's own transport on the deadline backend. httpx takes no backend argument,
    so its connection pool is replaced by one like it that uses the backend (tested:
    the trickling-server tests fail if this stops taking effect)."""
    context = _tls_context()
    transport = httpx.HTTPTransport(verify=context, trust_env=False)
    transport._pool = httpcore.ConnectionPool(  # noqa: SLF001 (httpx has no public backend option)
        ssl_context=context,
        max_connections=1,
        max_keepalive_connections=0,
        network_backend=_DeadlineBackend(deadline),
    )
    return transport


def _configured_headers(headers: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    """Headers the host adds to every request (credentials, say), checked like a script's."""
    if headers is None:
        return ()
    if not isinstance(headers, Mapping) or any(type(k) is not str or type(v) is not str for k, v in headers.items()):
        raise TypeError("headers must map header names to text")
    pairs = list(headers.items())
    try:
        _check_headers(pairs, "configured")
    except PortError as exc:
        raise ValueError(str(exc)) from None
    for name, _value in pairs:
        if name.lower() in RESERVED_REQUEST_HEADERS:
            raise ValueError(f"HTTP configured header is set by the port itself: {name}")
    return tuple(pairs)


class HttpPort:
    """An HTTP port limited to an allowlist of root URLs.

    ``transport`` is an ``httpx.BaseTransport`` (e.g. ``httpx.MockTransport`` in tests);
    by default the real network transport is used.
    """

    def __init__(
        self,
        allowlist: list[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
        max_response_bytes: int = DEFAULT_RESPONSE_LIMIT,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if isinstance(allowlist, str):
            raise TypeError("allowlist must be a list of root URLs, not one string")
        self._init(tuple(_root(entry) for entry in allowlist), timeout, transport, max_response_bytes, headers)

    def _init(
        self,
        roots: tuple[_Root, ...] | None,
        timeout: float,
        transport: httpx.BaseTransport | None,
        max_response_bytes: int,
        headers: Mapping[str, str] | None,
    ) -> None:
        self._roots = roots
        self._headers = _configured_headers(headers)
        #: Values the port holds for the host (credentials): never shown to a script.
        self._secrets = tuple(value for _name, value in self._headers if len(value) >= MIN_SECRET_CHARS)
        for secret in self._secrets:
            register_secret(secret)
        if not (isinstance(timeout, (int, float)) and 0 < timeout <= 3600):
            raise ValueError("timeout must be a positive number of seconds (at most 3600)")
        if type(max_response_bytes) is not int or max_response_bytes < 0:
            raise ValueError("max_response_bytes must be a non-negative integer")
        self.timeout = float(timeout)
        self.max_response_bytes = max_response_bytes
        self._transport = transport

    @classmethod
    def unrestricted(
        cls,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
        max_response_bytes: int = DEFAULT_RESPONSE_LIMIT,
        headers: Mapping[str, str] | None = None,
    ) -> HttpPort:
        """An explicit research grant: any http(s) URL, including private addresses.

        Every other rule (methods, sizes, headers, no redirects, no credentials in the
        URL) still applies. Use it only where a script may reach anything the host can.
        """
        port = cls.__new__(cls)
        cls._init(port, None, timeout, transport, max_response_bytes, headers)
        return port

    @property
    def allowlist(self) -> list[str] | None:
        """The normalized allowlist (None when unrestricted)."""
        if self._roots is None:
            return None
        return [f"{r.scheme}://{_bracketed(r.host)}:{r.port}{r.path or '/'}" for r in self._roots]

    def descriptor(self) -> PortDescriptor:
        scope = "any http(s) URL (unrestricted research grant)" if self._roots is None else "allowlisted root URLs only"
        return PortDescriptor(
            description=f"HTTP requests to {scope}; redirects are returned, never followed.",
            input_schema={
                "type": "object",
                "required": ["method", "url"],
                "additionalProperties": False,
                "properties": {
                    "method": {"enum": list(METHODS)},
                    "url": {"type": "string"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "body": {"type": "string"},
                },
            },
            output='{"status": integer, "headers": {name: value}, "body": UTF-8 text (invalid bytes replaced)}',
            effect="external",
            limits=(
                f"request body <= {MAX_REQUEST_BODY} bytes",
                f"headers <= {MAX_HEADERS}, each <= {MAX_HEADER_BYTES} bytes, total <= {MAX_HEADERS_TOTAL} bytes",
                f"response body <= {self.max_response_bytes} bytes",
                f"timeout {self.timeout:g} s",
                "redirects are not followed",
                *(
                    ["host-configured headers (values hidden): " + ", ".join(name for name, _v in self._headers)]
                    if self._headers
                    else []
                ),
            ),
        )

    # ------------------------------------------------------------------ validation
    def _check_url(self, url: Any) -> str:
        try:
            _parsed, scheme, host, port, path = _parse(url, "invalid HTTP URL")
        except ValueError:
            raise PortError("invalid HTTP URL") from None
        if self._roots is not None and not any(root.allows(scheme, host, port, path) for root in self._roots):
            raise PortError("HTTP URL is not allowed")
        return str(url)

    def _request_parts(self, input: Any) -> tuple[str, Any, list[tuple[str, str]], bytes | None]:
        if type(input) is not dict:
            raise PortError("invalid HTTP request: input must be a map with method and url")
        unknown = sorted(set(input) - {"method", "url", "headers", "body"})
        if unknown:
            raise PortError(f"invalid HTTP request: unknown field {unknown[0][:64]}")
        method = input.get("method")
        if method not in METHODS:
            raise PortError("unsupported HTTP method")
        headers = input.get("headers")
        if headers is None:
            headers = {}
        if type(headers) is not dict or any(type(v) is not str for v in headers.values()):
            raise PortError("invalid HTTP request: headers must map names to text")
        pairs = list(headers.items())
        _check_headers(pairs, "request")
        configured = {name.lower() for name, _value in self._headers}
        for name, _value in pairs:
            if name.lower() in RESERVED_REQUEST_HEADERS or name.lower() in configured:
                raise PortError(f"HTTP request header is set by the port: {name}")
        pairs = pairs + list(self._headers)
        _check_headers(pairs, "request")
        body = input.get("body")
        content: bytes | None = None
        if body is not None:
            if type(body) is not str:
                raise PortError("invalid HTTP request: body must be text")
            content = body.encode("utf-8")
            if len(content) > MAX_REQUEST_BODY:
                raise PortError("HTTP request body limit exceeded")
        return method, input.get("url"), pairs, content

    # ------------------------------------------------------------------ execution
    def execute(self, context: PortContext | None, input: Any) -> dict[str, Any]:
        """Validate everything, then send exactly one request (never a redirect's)."""
        method, url, pairs, content = self._request_parts(input)
        url = self._check_url(url)
        deadline = time.monotonic() + self.timeout
        try:
            with httpx.Client(
                transport=self._transport if self._transport is not None else _deadline_transport(deadline),
                timeout=httpx.Timeout(self.timeout),
                follow_redirects=False,
                trust_env=False,
            ) as client:
                with client.stream(method, url, headers=pairs, content=content) as response:
                    headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in response.headers.raw]
                    _check_headers(headers, "response")
                    chunks: list[bytes] = []
                    size = 0
                    for chunk in response.iter_bytes():
                        size += len(chunk)
                        if size > self.max_response_bytes:
                            raise PortError("response too large")
                        if time.monotonic() > deadline:
                            raise PortError("request timed out")
                        chunks.append(chunk)
                    status = response.status_code
        except PortError:
            raise
        except httpx.TimeoutException:
            raise PortError("request timed out") from None
        except httpx.InvalidURL:
            raise PortError("invalid HTTP URL") from None
        except (httpx.HTTPError, httpx.StreamError, OSError, ValueError):
            raise PortError("request failed") from None
        merged: dict[str, str] = {}
        for name, value in headers:
            key = name.lower()
            value = self._hide(value)
            merged[key] = f"{merged[key]}, {value}" if key in merged else value
        return {"status": status, "headers": merged, "body": self._hide(b"".join(chunks).decode("utf-8", errors="replace"))}

    def _hide(self, text: str) -> str:
        """A response as the script may see it: a server that echoes the port's
        configured credentials back does not hand them to the script."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text


def http_port(allowlist: list[str], **kwargs: Any) -> HttpPort:
    """``Ports().port("http", http_port(["https://api.example/v1"]))``."""
    return HttpPort(allowlist, **kwargs)


def http_port_unrestricted(**kwargs: Any) -> HttpPort:
    """The explicit research grant: any http(s) URL (see :meth:`HttpPort.unrestricted`)."""
    return HttpPort.unrestricted(**kwargs)
