"""A lean HTTP/1.1 transport for the ``httpx.Client``: a bounded pool of keep-alive sockets.

The reporter is CPU-bound on small POSTs.  httpx's own transport (httpcore) costs several times
the CPU of the wire work itself, and ``http.client`` spends most of its share parsing headers
through the ``email`` package.  This transport keeps the ``httpx.Client`` interface (timeouts,
headers, ``MockTransport`` in tests) and does the wire work itself: the request is one
``sendall``, the response is usually one ``recv``.  It speaks plain HTTP/1.1 with keep-alive
and TLS, reads ``Content-Length``, chunked and read-until-close bodies, and skips ``1xx``
responses.  No HTTP/2, no proxies: set ``[sink] transport = "httpx"`` for those.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading

import httpx

from reporter._constants import MAX_BODY_BYTES, MAX_HEAD_BYTES, READ_BYTES

Origin = tuple[bytes, str, int]


class _Closed(Exception):
    """The server closed the connection before the response began."""


class _Connection:
    """One socket and what has been read from it but not consumed yet."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()

    def fill(self) -> bool:
        data = self.sock.recv(READ_BYTES)
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
            if not self.fill():
                if self.buffer:
                    raise httpx.RemoteProtocolError("connection closed inside the headers")
                raise _Closed
        data = bytes(self.buffer[:end])
        del self.buffer[:end + 4]
        return data

    def rest(self) -> bytes:
        while self.fill():
            if len(self.buffer) > MAX_BODY_BYTES:
                raise httpx.RemoteProtocolError("response body over 8 MiB")
        return bytes(self.buffer)

    def close(self) -> None:
        self.sock.close()

    def abort(self) -> None:
        """Cut off a request in progress on another thread: its reads end at once."""
        with contextlib.suppress(OSError):  # already closed
            self.sock.shutdown(socket.SHUT_RDWR)


class SocketTransport(httpx.BaseTransport):
    """At most ``max_connections`` connections in use at once; idle ones are kept for reuse.

    A request that finds every connection in use waits for one, up to the request's pool
    timeout, then fails with ``httpx.PoolTimeout``."""

    def __init__(self, connect_timeout: float, timeout: float, max_connections: int) -> None:
        self._connect_timeout = connect_timeout
        self._timeout = timeout
        self._ssl = ssl.create_default_context()
        self._slots = threading.BoundedSemaphore(max_connections)
        self._max_idle = max_connections
        self._idle: dict[Origin, list[_Connection]] = {}
        self._busy: set[_Connection] = set()
        self._lock = threading.Lock()
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        origin: Origin = (url.raw_scheme, url.host, url.port or _default_port(url))
        data = _request_bytes(request)
        wait = request.extensions.get("timeout", {}).get("pool", self._timeout)
        if not self._slots.acquire(timeout=wait):
            raise httpx.PoolTimeout(f"all connections busy for {wait} s", request=request)
        try:
            for _ in range(2):
                conn, reused = self._connection(origin, request)
                try:
                    conn.sock.sendall(data)
                    status, headers, content, keep = _read_response(conn, request.method)
                except _Closed:
                    conn.close()
                    if reused:
                        continue  # the server closed an idle keep-alive connection: once more
                    raise httpx.RemoteProtocolError("server closed the connection without a "
                                                    "response", request=request) from None
                except (BrokenPipeError, ConnectionResetError) as exc:
                    conn.close()
                    if reused:
                        continue
                    raise httpx.RemoteProtocolError(str(exc), request=request) from exc
                except BaseException as exc:
                    conn.close()
                    error = _as_httpx_error(exc, request)
                    if error is exc:
                        raise
                    raise error from exc
                finally:
                    with self._lock:
                        self._busy.discard(conn)
                if keep:
                    self._keep(origin, conn)
                else:
                    conn.close()
                return httpx.Response(status, headers=headers, content=content,
                                      request=request)
            raise httpx.RemoteProtocolError("connection closed twice", request=request)
        finally:
            self._slots.release()

    def _connection(self, origin: Origin, request: httpx.Request) -> tuple[_Connection, bool]:
        """An idle connection to ``origin`` or a new one, and whether it was used before."""
        with self._lock:
            if self._closed:
                raise httpx.ConnectError("the transport is closed", request=request)
            idle = self._idle.get(origin)
            conn = idle.pop() if idle else None
            if conn is not None:
                self._busy.add(conn)
                return conn, True
        conn = _Connection(self._connect(origin))
        with self._lock:
            self._busy.add(conn)
            if self._closed:  # closed while connecting
                conn.abort()
        return conn, False

    def _keep(self, origin: Origin, conn: _Connection) -> None:
        with self._lock:
            idle = self._idle.setdefault(origin, [])
            if len(idle) < self._max_idle and not self._closed:
                idle.append(conn)
                return
        conn.close()

    def _connect(self, origin: Origin) -> socket.socket:
        scheme, host, port = origin
        try:
            sock = socket.create_connection((host, port), timeout=self._connect_timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if scheme == b"https":
                sock = self._ssl.wrap_socket(sock, server_hostname=host)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port}: timed out") from exc
        except OSError as exc:
            raise httpx.ConnectError(f"connecting to {host}:{port}: {exc}") from exc
        sock.settimeout(self._timeout)
        return sock

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


def _as_httpx_error(exc: BaseException, request: httpx.Request) -> BaseException:
    if isinstance(exc, httpx.HTTPError):
        exc.request = request
        return exc
    if isinstance(exc, TimeoutError):
        return httpx.ReadTimeout(str(exc) or "timed out", request=request)
    if isinstance(exc, OSError):
        return httpx.ReadError(str(exc), request=request)
    return exc  # KeyboardInterrupt and the like pass through


def _default_port(url: httpx.URL) -> int:
    return 443 if url.raw_scheme == b"https" else 80


def _request_bytes(request: httpx.Request) -> bytes:
    lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), request.url.raw_path)]
    for name, value in request.headers.raw:
        if b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name:
            raise httpx.LocalProtocolError(f"header {name!r} holds a line break",
                                           request=request)
        lines.append(name + b": " + value)
    lines.append(b"\r\n")
    return b"\r\n".join(lines) + request.read()


def _read_response(conn: _Connection, method: str
                   ) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    """Status, headers, body, and whether the connection can carry another request."""
    while True:
        lines = conn.head().split(b"\r\n")
        version, status = _status_line(lines[0])
        if not 100 <= status < 200:
            break  # 1xx (100 Continue, 103 Early Hints) come before the real response
    headers, length, chunked, connection = _headers(lines[1:])
    keep = b"close" not in connection if version == b"HTTP/1.1" else b"keep-alive" in connection
    if method == "HEAD" or status in (204, 304):
        return status, headers, b"", keep
    if chunked:
        return status, headers, _chunked_body(conn), keep
    if length is not None:
        return status, headers, conn.take(length), keep
    return status, headers, conn.rest(), False  # the body ends when the server closes


def _headers(lines: list[bytes]) -> tuple[list[tuple[bytes, bytes]], int | None, bool, bytes]:
    """The header pairs, Content-Length, whether the body is chunked, the Connection value."""
    headers: list[tuple[bytes, bytes]] = []
    length: int | None = None
    chunked = False
    connection = b""
    for line in lines:
        name, sep, value = line.partition(b":")
        if not sep:
            raise httpx.RemoteProtocolError(f"malformed header line {line[:80]!r}")
        name, value = name.strip(), value.strip()
        headers.append((name, value))
        key = name.lower()
        if key == b"content-length":
            length = _content_length(value)
        elif key == b"transfer-encoding":
            chunked = value.lower().endswith(b"chunked")
        elif key == b"connection":
            connection = value.lower()
    return headers, length, chunked, connection


def _status_line(line: bytes) -> tuple[bytes, int]:
    version, _, rest = line.partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/1.") or not code.isdigit():
        raise httpx.RemoteProtocolError(f"malformed status line {line[:80]!r}")
    return version, int(code)


def _content_length(value: bytes) -> int:
    if not value.isdigit() or int(value) > MAX_BODY_BYTES:
        raise httpx.RemoteProtocolError(f"bad or too large Content-Length {value[:40]!r}")
    return int(value)


def _chunked_body(conn: _Connection) -> bytes:
    body = bytearray()
    while True:
        size_text = conn.line().split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise httpx.RemoteProtocolError(f"bad chunk size {size_text[:40]!r}") from None
        if size == 0:
            while conn.line():  # trailers, up to the blank line
                pass
            return bytes(body)
        if len(body) + size > MAX_BODY_BYTES:
            raise httpx.RemoteProtocolError("response body over 8 MiB")
        body += conn.take(size)
        if conn.take(2) != b"\r\n":
            raise httpx.RemoteProtocolError("chunk not followed by CRLF")
