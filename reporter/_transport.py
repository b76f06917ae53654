"""A lean HTTP/1.1 transport for the ``httpx.Client``: a bounded pool of keep-alive sockets.

The reporter is CPU-bound on small POSTs.  httpx's own transport (httpcore) costs several times
the CPU of the wire work itself, and ``http.client`` spends most of its share parsing headers
through the ``email`` package.  This transport keeps the ``httpx.Client`` interface (timeouts,
headers, ``MockTransport`` in tests) and does the wire work itself: the request is usually one
``send``, the response usually one ``recv``.  It speaks plain HTTP/1.1 with keep-alive and TLS,
through an HTTP proxy if one is given (``CONNECT`` for https), reads ``Content-Length``,
chunked and read-until-close bodies, and skips a few ``1xx`` responses.  No HTTP/2.

Bounded waits: every request has one deadline, ``timeout`` seconds from the moment it has a
connection slot.  Connecting (TCP, a proxy's ``CONNECT``, the TLS handshake), sending, the
status line, the headers and the body all come out of it, so a peer that trickles a byte at a
time cannot hold a request longer.  When it passes, the request fails as a timeout, and a
WARNING names the endpoint and the phase.

Bodies: unless the request carries the ``NEED_BODY`` extension, the status and headers are
the answer; at most ``STATUS_BODY_BYTES`` of a body are read, within the deadline, and a body
that is longer, unframed, late or broken is left behind with its connection.  A caller that
needs the body asks for it, up to N bytes; a longer, truncated or unreadable one is then a
protocol error.

Reuse: a connection idle longer than ``keepalive_expiry`` is closed, not reused, and one the
server has closed meanwhile is noticed (a non-blocking read finds its EOF) before reuse.  A
request that fails on a reused connection before any byte of a response came back is sent
again at once on a new connection: the server closed it as the request went out.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import httpx

from collector.logs import RateLimitedLog
from reporter._constants import MAX_HEAD_BYTES, READ_BYTES

logger = logging.getLogger("reporter")
ratelog = RateLimitedLog(logger, interval=30.0)

Origin = tuple[bytes, str, int]
Answer = tuple[int, list[tuple[bytes, bytes]], bytes, bool]  # status, headers, body, keep

# A request extension: the caller needs the whole response body, at most this many bytes.
NEED_BODY = "telemetry.need_body"
# Body bytes read at most when the status and headers are the answer (the default).
STATUS_BODY_BYTES = 64 * 1024
# Informational (1xx) responses skipped before the real one, at most.
MAX_INFORMATIONAL = 8

CONNECTING = "connecting"
SENDING = "sending"
STATUS_LINE = "waiting for the status line"
HEADERS = "reading headers"
BODY = "reading the body"


class _Closed(Exception):
    """The server closed the connection before the response began."""


class _Expired(Exception):
    """The request's deadline passed while it was in ``phase``."""

    def __init__(self, phase: str) -> None:
        super().__init__(phase)
        self.phase = phase


@dataclass(frozen=True, slots=True)
class Proxy:
    """An HTTP proxy: where it listens and the ``Proxy-Authorization`` value, if any."""

    host: str
    port: int
    authorization: bytes = b""

    @classmethod
    def parse(cls, url: str) -> Proxy:
        """From ``http://[user:password@]host[:port]``; ValueError (without the URL, which
        may hold a password) if it is not one."""
        parts = urlsplit(url)
        if parts.scheme != "http":
            raise ValueError(f"expected an http:// proxy URL, found scheme {parts.scheme!r}")
        if not parts.hostname:
            raise ValueError("the proxy URL has no host")
        port = parts.port or 80  # ValueError for a port that is not a number
        authorization = b""
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            authorization = b"Basic " + base64.b64encode(pair.encode())
        return cls(parts.hostname, port, authorization)


class _Body(httpx.SyncByteStream):
    """The body as read; not an ``httpx.ByteStream``, which the Response would decode at once
    (a truncated gzip body must not fail a request whose status was the answer)."""

    def __init__(self, content: bytes) -> None:
        self.content = content

    def __iter__(self) -> Iterator[bytes]:
        yield self.content


class _Connection:
    """One socket, what has been read from it but not consumed yet, and the current request's
    deadline and phase."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.deadline = deadline
        self.phase = CONNECTING
        self.answered = False  # a byte of a response came back for the current request
        self.idle_since = 0.0

    def start(self, deadline: float) -> None:
        """Begin a request on a reused connection."""
        self.deadline = deadline
        self.answered = False

    def _arm(self) -> None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise _Expired(self.phase)
        self.sock.settimeout(remaining)

    def send(self, data: bytes) -> None:
        self.phase = SENDING
        view = memoryview(data)
        while view:
            self._arm()
            try:
                sent = self.sock.send(view)
            except TimeoutError:
                raise _Expired(SENDING) from None
            view = view[sent:]

    def fill(self) -> bool:
        self._arm()
        try:
            data = self.sock.recv(READ_BYTES)
        except TimeoutError:
            raise _Expired(self.phase) from None
        if data:
            self.answered = True
            self.buffer += data
        return bool(data)

    def take(self, n: int) -> bytes:
        while len(self.buffer) < n:
            if not self.fill():
                raise httpx.RemoteProtocolError("connection closed inside the response body")
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    def line(self) -> bytes:
        while (end := self.buffer.find(b"\r\n")) < 0:
            if len(self.buffer) > MAX_HEAD_BYTES or not self.fill():
                raise httpx.RemoteProtocolError("bad chunked response body")
        data = bytes(self.buffer[:end])
        del self.buffer[:end + 2]
        return data

    def head(self) -> bytes:
        """The status line and headers, without the blank line that ends them."""
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            if len(self.buffer) > MAX_HEAD_BYTES:
                raise httpx.RemoteProtocolError("response headers over 64 KiB")
            self.phase = HEADERS if b"\r\n" in self.buffer else STATUS_LINE
            if not self.fill():
                if self.buffer:
                    raise httpx.RemoteProtocolError("connection closed inside the headers")
                raise _Closed
        data = bytes(self.buffer[:end])
        del self.buffer[:end + 4]
        return data

    def rest(self, limit: int) -> bytes:
        while self.fill():
            if len(self.buffer) > limit:
                raise httpx.RemoteProtocolError(f"response body over {limit} bytes")
        return bytes(self.buffer)

    def reusable(self) -> bool:
        """False if the server has closed the connection (or sent what nobody asked for)
        while it was idle: a read that does not wait finds the EOF."""
        if self.buffer:
            return False
        try:
            self.sock.setblocking(False)
            if isinstance(self.sock, ssl.SSLSocket):
                self.sock.recv(1)  # TLS records that carry no data are consumed
            else:
                self.sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, ssl.SSLWantReadError):
            return True  # nothing to read: still open
        except OSError:
            return False
        return False  # EOF, or bytes that belong to no request

    def close(self) -> None:
        self.sock.close()

    def abort(self) -> None:
        """Cut off a request in progress on another thread: its reads end at once."""
        with contextlib.suppress(OSError):  # already closed
            self.sock.shutdown(socket.SHUT_RDWR)


class SocketTransport(httpx.BaseTransport):
    """At most ``max_connections`` connections in use at once; idle ones are kept for reuse,
    up to ``keepalive_expiry`` seconds (0: never).

    A request that finds every connection in use waits for one, up to the request's pool
    timeout, then fails with ``httpx.PoolTimeout``; from then on ``timeout`` bounds it whole.
    ``ssl_context``: for https (the default context if None).  ``proxy``: an HTTP proxy every
    request goes through."""

    def __init__(self, connect_timeout: float, timeout: float, max_connections: int, *,
                 keepalive_expiry: float = 4.0, ssl_context: ssl.SSLContext | None = None,
                 proxy: Proxy | None = None) -> None:
        self._connect_timeout = connect_timeout
        self._timeout = timeout
        self._expiry = keepalive_expiry
        self._ssl = ssl_context or ssl.create_default_context()
        self._proxy = proxy
        self._slots = threading.BoundedSemaphore(max_connections)
        self._max_idle = max_connections
        self._idle: dict[Origin, list[_Connection]] = {}
        self._busy: set[_Connection] = set()
        self._lock = threading.Lock()
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        origin: Origin = (url.raw_scheme, url.host, url.port or _default_port(url))
        data = _request_bytes(request, self._proxy)
        need: int | None = request.extensions.get(NEED_BODY)
        wait = request.extensions.get("timeout", {}).get("pool", self._timeout)
        if not self._slots.acquire(timeout=wait):
            raise httpx.PoolTimeout(f"all connections busy for {wait} s", request=request)
        try:
            started = time.monotonic()
            try:
                conn, (status, headers, content, keep) = self._exchange(
                    origin, data, request.method, started + self._timeout, need)
            except _Expired as exc:
                raise self._timed_out(request, exc.phase, started) from None
            except _Closed:
                raise httpx.RemoteProtocolError("server closed the connection without a "
                                                "response", request=request) from None
            except BaseException as exc:
                error = _as_httpx_error(exc, request)
                if error is exc:
                    raise
                raise error from exc
            if keep:
                self._keep(origin, conn)
            else:
                conn.close()
        finally:
            self._slots.release()
        return httpx.Response(status, headers=headers, stream=_Body(content), request=request)

    def _exchange(self, origin: Origin, data: bytes, method: str, deadline: float,
                  need: int | None) -> tuple[_Connection, Answer]:
        """Send the request and read the answer.  A reused connection that fails before any
        byte of a response came back was closed by the server as the request went out: the
        request goes again, at once, on a new connection."""
        conn, reused = self._connection(origin, deadline)
        while True:
            try:
                return conn, _attempt(conn, data, method, need)
            except BaseException as exc:
                conn.close()
                if not (reused and not conn.answered and isinstance(exc, _Closed | OSError)):
                    raise
            finally:
                self._forget(conn)
            logger.debug("the server closed a kept-alive connection to %s:%d as a request went "
                         "out; sending it again on a new connection", origin[1], origin[2])
            conn, reused = self._new_connection(origin, deadline), False

    def _connection(self, origin: Origin, deadline: float) -> tuple[_Connection, bool]:
        """A live idle connection to ``origin`` or a new one, and whether it was used before."""
        while (conn := self._take_idle(origin)) is not None:
            if conn.reusable():
                conn.start(deadline)
                return conn, True
            self._forget(conn)
            conn.close()
        return self._new_connection(origin, deadline), False

    def _take_idle(self, origin: Origin) -> _Connection | None:
        """The most recently used idle connection to ``origin``, unless it has been idle too
        long (then so have the others: all are closed)."""
        expired: list[_Connection] = []
        with self._lock:
            if self._closed:
                raise httpx.ConnectError("the transport is closed")
            idle = self._idle.get(origin)
            conn = idle.pop() if idle else None
            if conn is not None and time.monotonic() - conn.idle_since > self._expiry:
                expired = [conn, *(idle or ())]
                self._idle.pop(origin, None)
                conn = None
            if conn is not None:
                self._busy.add(conn)
        for old in expired:
            old.close()
        return conn

    def _new_connection(self, origin: Origin, deadline: float) -> _Connection:
        if self._closed:
            raise httpx.ConnectError("the transport is closed")
        conn = _Connection(self._connect(origin, deadline), deadline)
        with self._lock:
            self._busy.add(conn)
            if self._closed:  # closed while connecting
                conn.abort()
        return conn

    def _forget(self, conn: _Connection) -> None:
        with self._lock:
            self._busy.discard(conn)

    def _keep(self, origin: Origin, conn: _Connection) -> None:
        conn.idle_since = now = time.monotonic()
        expired: list[_Connection] = []
        with self._lock:
            idle = self._idle.setdefault(origin, [])
            while idle and now - idle[0].idle_since > self._expiry:
                expired.append(idle.pop(0))
            if len(idle) < self._max_idle and not self._closed and self._expiry > 0:
                idle.append(conn)
            else:
                expired.append(conn)
        for old in expired:
            old.close()

    def _connect(self, origin: Origin, deadline: float) -> socket.socket:
        """A connected socket (through the proxy, with TLS for https), within the deadline."""
        scheme, host, port = origin
        address = (self._proxy.host, self._proxy.port) if self._proxy else (host, port)
        timeout = min(self._connect_timeout, deadline - time.monotonic())
        if timeout <= 0:
            raise _Expired(CONNECTING)
        try:
            sock = socket.create_connection(address, timeout=timeout)
        except TimeoutError:
            raise _Expired(CONNECTING) from None
        except OSError as exc:
            raise httpx.ConnectError(f"connecting to {_authority(*address)}: {exc}") from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if scheme != b"https":
                return sock
            if self._proxy is not None:
                _tunnel(sock, host, port, self._proxy, deadline)
            sock.settimeout(max(deadline - time.monotonic(), 1e-3))
            return self._ssl.wrap_socket(sock, server_hostname=host)
        except BaseException as exc:
            sock.close()
            if isinstance(exc, TimeoutError):
                raise _Expired(CONNECTING) from None
            if isinstance(exc, OSError):
                raise httpx.ConnectError(f"connecting to {_authority(host, port)}: {exc}"
                                         ) from exc
            raise

    def _timed_out(self, request: httpx.Request, phase: str, started: float
                   ) -> httpx.TimeoutException:
        where = endpoint_text(request.url)
        elapsed = time.monotonic() - started
        ratelog.log(logging.WARNING, f"deadline:{where}:{phase}",
                    "request to %s timed out while %s, %.1f s after it started ([sink] "
                    "timeout_seconds = %g); it fails as a timeout and its batch is retried",
                    where, phase, elapsed, self._timeout)
        message = f"timed out while {phase} ({elapsed:.1f} s)"
        if phase == CONNECTING:
            return httpx.ConnectTimeout(message, request=request)
        if phase == SENDING:
            return httpx.WriteTimeout(message, request=request)
        return httpx.ReadTimeout(message, request=request)

    def close(self) -> None:
        """Close the idle connections and cut off the requests in progress (their reads end
        at once, so a stopping reporter can join its threads); no request starts after."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, {}
            busy = list(self._busy)
        for conn in busy:
            conn.abort()
        for conns in idle.values():
            for conn in conns:
                conn.close()


def endpoint_text(url: httpx.URL) -> str:
    """The URL without credentials or query: scheme, host, port and path."""
    return f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}{url.path}"


def _attempt(conn: _Connection, data: bytes, method: str, need: int | None) -> Answer:
    try:
        conn.send(data)
    except OSError as exc:
        # The server may have answered early (a 413 before the whole body) and closed: read
        # that answer if there is one, else the send failed.
        try:
            status, headers, content, _ = _read_response(conn, method, need)
        except (OSError, _Closed, httpx.RemoteProtocolError):
            raise exc from None
        return status, headers, content, False
    return _read_response(conn, method, need)


def _tunnel(sock: socket.socket, host: str, port: int, proxy: Proxy, deadline: float) -> None:
    """Ask the proxy for a tunnel to ``host:port`` (``CONNECT``), within the deadline."""
    authority = _authority(host, port).encode("ascii")
    lines = [b"CONNECT %s HTTP/1.1" % authority, b"Host: %s" % authority]
    if proxy.authorization:
        lines.append(b"Proxy-Authorization: " + proxy.authorization)
    conn = _Connection(sock, deadline)
    try:
        conn.send(b"\r\n".join(lines) + b"\r\n\r\n")
        head = conn.head()
    except _Expired:
        raise _Expired(CONNECTING) from None
    except _Closed:
        raise httpx.ProxyError("the proxy closed the connection without answering CONNECT"
                               ) from None
    _, status = _status_line(head.split(b"\r\n", 1)[0])
    if not 200 <= status < 300:
        raise httpx.ProxyError(f"the proxy answered {status} to CONNECT {authority.decode()}")
    if conn.buffer:
        raise httpx.ProxyError("the proxy sent data before the tunnel was open")


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _as_httpx_error(exc: BaseException, request: httpx.Request) -> BaseException:
    if isinstance(exc, httpx.HTTPError):
        exc.request = request
        return exc
    if isinstance(exc, OSError):
        return httpx.ReadError(str(exc) or type(exc).__name__, request=request)
    return exc  # KeyboardInterrupt and the like pass through


def _default_port(url: httpx.URL) -> int:
    return 443 if url.raw_scheme == b"https" else 80


def _request_bytes(request: httpx.Request, proxy: Proxy | None) -> bytes:
    url = request.url
    target = url.raw_path
    if proxy is not None and url.raw_scheme == b"http":  # absolute form, to the proxy
        target = url.raw_scheme + b"://" + url.netloc + url.raw_path
    lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), target)]
    for name, value in request.headers.raw:
        if b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name:
            raise httpx.LocalProtocolError(f"header {name!r} holds a line break",
                                           request=request)
        lines.append(name + b": " + value)
    if proxy is not None and proxy.authorization and url.raw_scheme == b"http":
        lines.append(b"Proxy-Authorization: " + proxy.authorization)
    lines.append(b"\r\n")
    return b"\r\n".join(lines) + request.read()


@dataclass(slots=True)
class _Framing:
    """What the headers say about the body and the connection."""

    length: bytes | None = None  # the Content-Length value, as sent
    chunked: bool = False
    connection: bytes = b""

    def content_length(self) -> int | None:
        """The length, or None if it is not a plain decimal number."""
        if self.length is None or not self.length.isdigit():
            return None
        return int(self.length)


def _read_response(conn: _Connection, method: str, need: int | None) -> Answer:
    """Status, headers, body, and whether the connection can carry another request.
    ``need``: the body is needed, whole, up to that many bytes; None: the status is the
    answer, and at most STATUS_BODY_BYTES of the body are read (see the module's doc)."""
    version, status, lines = _final_head(conn)
    headers, framing = _headers(lines)
    keep = (b"close" not in framing.connection if version == b"HTTP/1.1"
            else b"keep-alive" in framing.connection)
    if method == "HEAD" or status in (204, 304):
        return status, headers, b"", keep
    conn.phase = BODY
    if need is not None:
        content = _whole_body(conn, framing, need)
        return status, headers, content, keep and (framing.chunked or framing.length is not None)
    content, complete = _some_body(conn, framing)
    return status, headers, content, keep and complete


def _final_head(conn: _Connection) -> tuple[bytes, int, list[bytes]]:
    """The version, status and header lines of the response after any 1xx (100 Continue,
    103 Early Hints), of which a few are skipped."""
    for _ in range(MAX_INFORMATIONAL + 1):
        lines = conn.head().split(b"\r\n")
        version, status = _status_line(lines[0])
        if not 100 <= status < 200:
            return version, status, lines[1:]
    raise httpx.RemoteProtocolError(
        f"more than {MAX_INFORMATIONAL} informational (1xx) responses")


def _whole_body(conn: _Connection, framing: _Framing, limit: int) -> bytes:
    if framing.chunked:
        body = bytearray()
        _chunked_body(conn, limit, body)
        return bytes(body)
    if framing.length is None:
        return conn.rest(limit)  # the body ends when the server closes
    length = framing.content_length()
    if length is None or length > limit:
        raise httpx.RemoteProtocolError(
            f"bad or too large Content-Length {framing.length[:40]!r} (at most {limit})")
    return conn.take(length)


def _some_body(conn: _Connection, framing: _Framing) -> tuple[bytes, bool]:
    """Up to STATUS_BODY_BYTES of the body, and whether it was read whole (only then may the
    connection be reused).  A body that is unframed, too long or not read in time is left."""
    limit = STATUS_BODY_BYTES
    length = framing.content_length()
    body = bytearray()
    try:
        if framing.chunked:
            _chunked_body(conn, limit, body)
            return bytes(body), True
        if length is not None and length <= limit:
            return conn.take(length), True
    except (_Expired, OSError, httpx.RemoteProtocolError):
        pass
    return bytes(body or conn.buffer[:limit]), False


def _headers(lines: list[bytes]) -> tuple[list[tuple[bytes, bytes]], _Framing]:
    """The header pairs and what they say about the body."""
    headers: list[tuple[bytes, bytes]] = []
    framing = _Framing()
    for line in lines:
        name, sep, value = line.partition(b":")
        if not sep:
            raise httpx.RemoteProtocolError(f"malformed header line {line[:80]!r}")
        name, value = name.strip(), value.strip()
        headers.append((name, value))
        key = name.lower()
        if key == b"content-length":
            framing.length = value
        elif key == b"transfer-encoding":
            framing.chunked = value.lower().endswith(b"chunked")
        elif key == b"connection":
            framing.connection = value.lower()
    return headers, framing


def _status_line(line: bytes) -> tuple[bytes, int]:
    version, _, rest = line.partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/1.") or not code.isdigit():
        raise httpx.RemoteProtocolError(f"malformed status line {line[:80]!r}")
    return version, int(code)


def _chunked_body(conn: _Connection, limit: int, body: bytearray) -> None:
    """Read a chunked body into ``body`` (so a caller keeps what came before a failure)."""
    while True:
        size_text = conn.line().split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise httpx.RemoteProtocolError(f"bad chunk size {size_text[:40]!r}") from None
        if size == 0:
            while conn.line():  # trailers, up to the blank line
                pass
            return
        if size < 0 or len(body) + size > limit:
            raise httpx.RemoteProtocolError(f"response body over {limit} bytes")
        body += conn.take(size)
        if conn.take(2) != b"\r\n":
            raise httpx.RemoteProtocolError("chunk not followed by CRLF")
