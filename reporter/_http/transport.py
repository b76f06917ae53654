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

This module is the pool (connecting, proxies, reuse, the deadline's warnings); one exchange on
one socket is ``reporter._http.client_wire``.
"""

from __future__ import annotations

import base64
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import unquote, urlsplit

import httpx

from collector.logs import RateLimitedLog
from reporter._http.client_wire import (
    CONNECTING,
    SENDING,
    Answer,
    Closed,
    Connection,
    Expired,
    exchange,
    status_line,
)

logger = logging.getLogger("reporter")
ratelog = RateLimitedLog(logger, interval=30.0)

Origin = tuple[bytes, str, int]


class _Outgoing(NamedTuple):
    """A request's bytes and what the pool needs to know of it."""

    url: httpx.URL
    data: bytes
    wait: float | None  # the pool timeout (None: none)
    method: str = "POST"
    need: int | None = None  # the body is needed, whole, up to this many bytes


class Reply(NamedTuple):
    """A response as read: its status, its headers as sent, and its body (all of it, or the
    part the transport reads: see the module's doc)."""

    status: int
    headers: list[tuple[bytes, bytes]]
    content: bytes


# A request extension: the caller needs the whole response body, at most this many bytes.
NEED_BODY = "telemetry.need_body"


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


class SocketTransport(httpx.BaseTransport):
    """At most ``max_connections`` connections in use at once; idle ones are kept for reuse,
    up to ``keepalive_expiry`` seconds (0: never).

    A request that finds every connection in use waits for one, up to the request's pool
    timeout, then fails with ``httpx.PoolTimeout``; from then on ``timeout`` bounds it whole.
    ``ssl_context``: for https (the default context if None).  ``proxy``: an HTTP proxy every
    request goes through."""

    def __init__(
        self,
        connect_timeout: float,
        timeout: float,
        max_connections: int,
        *,
        keepalive_expiry: float = 4.0,
        ssl_context: ssl.SSLContext | None = None,
        proxy: Proxy | None = None,
    ) -> None:
        self._connect_timeout = connect_timeout
        self._timeout = timeout
        self._expiry = keepalive_expiry
        self._ssl = ssl_context or ssl.create_default_context()
        self._proxy = proxy
        self._slots = threading.BoundedSemaphore(max_connections)
        self._max_idle = max_connections
        self._idle: dict[Origin, list[Connection]] = {}
        self._busy: set[Connection] = set()
        self._lock = threading.Lock()
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.send_when(request, None)
        assert response is not None  # nobody to say no
        return response

    def send_when(
        self, request: httpx.Request, ready: Callable[[], bool] | None
    ) -> httpx.Response | None:
        """``handle_request``, asking ``ready()`` once the connection is ready (made, through
        the proxy, TLS done), right before the request's bytes go: a shared rate's slot is
        checked there, after any connecting, and the check may sleep.  False sends nothing,
        keeps the connection for the next request and returns None."""
        outgoing = _Outgoing(
            request.url,
            _request_bytes(request, self._proxy),
            request.extensions.get("timeout", {}).get("pool", self._timeout),
            request.method,
            request.extensions.get(NEED_BODY),
        )
        reply = self._send(outgoing, ready, lambda: request)
        return None if reply is None else response_of(reply, request)

    def wire_head(self, url: httpx.URL, headers: Sequence[tuple[bytes, bytes]]) -> bytes | None:
        """The request line and ``headers`` of a POST to ``url`` as ``post`` takes them, each
        line ended (the caller adds its own headers and the blank line); None through a proxy.
        A header with a line break is ``httpx.LocalProtocolError``."""
        if self._proxy is not None:
            return None
        return b"POST %s HTTP/1.1\r\n%s" % (url.raw_path, b"".join(_header_lines(headers)))

    def post(
        self,
        url: httpx.URL,
        data: bytes,
        wait: float | None,
        request_of: Callable[[], httpx.Request],
    ) -> Reply:
        """``handle_request`` for a POST whose bytes are made (``wire_head``, the rest of
        the headers, the blank line, the body): no ``httpx.Request`` or ``httpx.Response``
        is built on its way (about a third of the CPU of a request to a nearby endpoint).
        ``wait``: the pool timeout; ``request_of()``: the same request as an
        ``httpx.Request``, which an error names (built only then)."""
        reply = self._send(_Outgoing(url, data, wait), None, request_of)
        assert reply is not None  # nobody to say no
        return reply

    def _send(
        self,
        outgoing: _Outgoing,
        ready: Callable[[], bool] | None,
        request_of: Callable[[], httpx.Request],
    ) -> Reply | None:
        url, data, wait, method, need = outgoing
        origin: Origin = (url.raw_scheme, url.host, url.port or _default_port(url))
        if not self._slots.acquire(timeout=wait):
            raise httpx.PoolTimeout(f"all connections busy for {wait} s", request=request_of())
        try:
            started = time.monotonic()
            try:
                exchanged = self._exchange(
                    origin, data, method, started + self._timeout, need, ready
                )
                if exchanged is None:
                    return None
                conn, (status, headers, content, keep) = exchanged
            except Expired as exc:
                raise self._timed_out(request_of(), exc.phase, started) from None
            except Closed:
                raise httpx.RemoteProtocolError(
                    "server closed the connection without a response", request=request_of()
                ) from None
            except BaseException as exc:
                error = _as_httpx_error(exc, request_of)
                if error is exc:
                    raise
                raise error from exc
            if keep:
                self._keep(origin, conn)
            else:
                conn.close()
        finally:
            self._slots.release()
        return Reply(status, headers, content)

    def _exchange(
        self,
        origin: Origin,
        data: bytes,
        method: str,
        deadline: float,
        need: int | None,
        ready: Callable[[], bool] | None = None,
    ) -> tuple[Connection, Answer] | None:
        """Send the request and read the answer (None: ``ready()`` said not to send).  A
        reused connection that fails before any byte of a response came back was closed by
        the server as the request went out: the request goes again, at once, on a new
        connection."""
        conn, reused = self._connection(origin, deadline)
        if ready is not None:
            go = False
            try:
                go = ready()
            finally:
                if not go:  # not sent (or ready() raised): kept, as good as before
                    self._forget(conn)
                    self._keep(origin, conn)
            if not go:
                return None
        while True:
            try:
                return conn, exchange(conn, data, method, need)
            except BaseException as exc:
                conn.close()
                if not (reused and not conn.answered and isinstance(exc, Closed | OSError)):
                    raise
            finally:
                self._forget(conn)
            logger.debug(
                "the server closed a kept-alive connection to %s:%d as a request went "
                "out; sending it again on a new connection",
                origin[1],
                origin[2],
            )
            conn, reused = self._new_connection(origin, deadline), False

    def _connection(self, origin: Origin, deadline: float) -> tuple[Connection, bool]:
        """A live idle connection to ``origin`` or a new one, and whether it was used before."""
        while (conn := self._take_idle(origin)) is not None:
            if conn.reusable():
                conn.start(deadline)
                return conn, True
            self._forget(conn)
            conn.close()
        return self._new_connection(origin, deadline), False

    def _take_idle(self, origin: Origin) -> Connection | None:
        """The most recently used idle connection to ``origin``, unless it has been idle too
        long (then so have the others: all are closed)."""
        expired: list[Connection] = []
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

    def _new_connection(self, origin: Origin, deadline: float) -> Connection:
        if self._closed:
            raise httpx.ConnectError("the transport is closed")
        conn = Connection(self._connect(origin, deadline), deadline)
        with self._lock:
            self._busy.add(conn)
            if self._closed:  # closed while connecting
                conn.abort()
        return conn

    def _forget(self, conn: Connection) -> None:
        with self._lock:
            self._busy.discard(conn)

    def _keep(self, origin: Origin, conn: Connection) -> None:
        conn.idle_since = now = time.monotonic()
        expired: list[Connection] = []
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
            raise Expired(CONNECTING)
        try:
            sock = socket.create_connection(address, timeout=timeout)
        except TimeoutError:
            raise Expired(CONNECTING) from None
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
                raise Expired(CONNECTING) from None
            if isinstance(exc, OSError):
                raise httpx.ConnectError(f"connecting to {_authority(host, port)}: {exc}") from exc
            raise

    def _timed_out(
        self, request: httpx.Request, phase: str, started: float
    ) -> httpx.TimeoutException:
        where = endpoint_text(request.url)
        elapsed = time.monotonic() - started
        ratelog.log(
            logging.WARNING,
            f"deadline:{where}:{phase}",
            "request to %s timed out while %s, %.1f s after it started ([sink] "
            "timeout_seconds = %g); it fails as a timeout and its batch is retried",
            where,
            phase,
            elapsed,
            self._timeout,
        )
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


def _tunnel(sock: socket.socket, host: str, port: int, proxy: Proxy, deadline: float) -> None:
    """Ask the proxy for a tunnel to ``host:port`` (``CONNECT``), within the deadline."""
    authority = _authority(host, port).encode("ascii")
    lines = [b"CONNECT %s HTTP/1.1" % authority, b"Host: %s" % authority]
    if proxy.authorization:
        lines.append(b"Proxy-Authorization: " + proxy.authorization)
    conn = Connection(sock, deadline)
    try:
        conn.send(b"\r\n".join(lines) + b"\r\n\r\n")
        head = conn.head()
    except Expired:
        raise Expired(CONNECTING) from None
    except Closed:
        raise httpx.ProxyError(
            "the proxy closed the connection without answering CONNECT"
        ) from None
    _, status = status_line(head.split(b"\r\n", 1)[0])
    if not 200 <= status < 300:
        raise httpx.ProxyError(f"the proxy answered {status} to CONNECT {authority.decode()}")
    if conn.buffer:
        raise httpx.ProxyError("the proxy sent data before the tunnel was open")


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _as_httpx_error(exc: BaseException, request_of: Callable[[], httpx.Request]) -> BaseException:
    if isinstance(exc, httpx.HTTPError):
        exc.request = request_of()
        return exc
    if isinstance(exc, OSError):
        return httpx.ReadError(str(exc) or type(exc).__name__, request=request_of())
    return exc  # KeyboardInterrupt and the like pass through


def _default_port(url: httpx.URL) -> int:
    return 443 if url.raw_scheme == b"https" else 80


def response_of(reply: Reply, request: httpx.Request) -> httpx.Response:
    """The ``httpx.Response`` of a reply, as ``handle_request`` gives it."""
    return httpx.Response(
        reply.status, headers=reply.headers, stream=_Body(reply.content), request=request
    )


def _request_bytes(request: httpx.Request, proxy: Proxy | None) -> bytes:
    url = request.url
    target = url.raw_path
    if proxy is not None and url.raw_scheme == b"http":  # absolute form, to the proxy
        target = url.raw_scheme + b"://" + url.netloc + url.raw_path
    lines = [b"%s %s HTTP/1.1\r\n" % (request.method.encode("ascii"), target)]
    try:
        lines += _header_lines(request.headers.raw)
    except httpx.LocalProtocolError as exc:
        exc.request = request
        raise
    if proxy is not None and proxy.authorization and url.raw_scheme == b"http":
        lines.append(b"Proxy-Authorization: " + proxy.authorization + b"\r\n")
    lines.append(b"\r\n")
    return b"".join(lines) + request.read()


def _header_lines(headers: Sequence[tuple[bytes, bytes]]) -> list[bytes]:
    """Each header as its line, line break included; one that holds a line break of its own
    would end the head early (a request smuggled in): refused."""
    lines = []
    for name, value in headers:
        if b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name:
            raise httpx.LocalProtocolError(f"header {name!r} holds a line break")
        lines.append(b"%s: %s\r\n" % (name, value))
    return lines
