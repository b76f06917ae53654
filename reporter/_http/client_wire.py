"""One HTTP/1.1 exchange on one socket, under one deadline: the wire half of
``reporter._http.transport``.

``Connection`` reads and writes a socket against the current request's deadline, naming the
phase it was in when the deadline passed (``Expired``).  ``exchange`` sends a request and reads
its response: the status line after at most ``MAX_INFORMATIONAL`` 1xx answers, the headers,
and the body by its framing (``Content-Length``, chunked, or until close), whole up to a
limit when the caller needs it, else at most ``STATUS_BODY_BYTES`` (see the transport's doc).
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import time
from dataclasses import dataclass

import httpx

from reporter._constants import MAX_HEAD_BYTES, READ_BYTES

Answer = tuple[int, list[tuple[bytes, bytes]], bytes, bool]  # status, headers, body, keep

# Body bytes read at most when the status and headers are the answer (the default).
STATUS_BODY_BYTES = 64 * 1024
# Informational (1xx) responses skipped before the real one, at most.
MAX_INFORMATIONAL = 8

CONNECTING = "connecting"
SENDING = "sending"
STATUS_LINE = "waiting for the status line"
HEADERS = "reading headers"
BODY = "reading the body"


class Closed(Exception):
    """The server closed the connection before the response began."""


class Expired(Exception):
    """The request's deadline passed while it was in ``phase``."""

    def __init__(self, phase: str) -> None:
        super().__init__(phase)
        self.phase = phase


class Connection:
    """One socket, what has been read from it but not consumed yet, and the current request's
    deadline and phase."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        # Plain sockets are asked whether anything came in while idle with a poll, which
        # leaves the socket as it is (a TLS socket is read, and so is any where there is no
        # poll: see reusable).
        self._idle_poll: select.poll | None = None
        if not isinstance(sock, ssl.SSLSocket) and hasattr(select, "poll"):
            self._idle_poll = select.poll()
            self._idle_poll.register(sock, select.POLLIN)
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
            raise Expired(self.phase)
        self.sock.settimeout(remaining)

    def send(self, data: bytes) -> None:
        self.phase = SENDING
        view = memoryview(data)
        while view:
            self._arm()
            try:
                sent = self.sock.send(view)
            except TimeoutError:
                raise Expired(SENDING) from None
            view = view[sent:]

    def fill(self) -> bool:
        self._arm()
        try:
            data = self.sock.recv(READ_BYTES)
        except TimeoutError:
            raise Expired(self.phase) from None
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
        del self.buffer[: end + 2]
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
                raise Closed
        data = bytes(self.buffer[:end])
        del self.buffer[: end + 4]
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
        if self._idle_poll is not None:
            try:
                return not self._idle_poll.poll(0)  # readable: EOF, or bytes nobody asked for
            except OSError:
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


def exchange(conn: Connection, data: bytes, method: str, need: int | None) -> Answer:
    try:
        conn.send(data)
    except OSError as exc:
        # The server may have answered early (a 413 before the whole body) and closed: read
        # that answer if there is one, else the send failed.
        try:
            status, headers, content, _ = _read_response(conn, method, need)
        except (OSError, Closed, httpx.RemoteProtocolError):
            raise exc from None
        return status, headers, content, False
    return _read_response(conn, method, need)


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


def _read_response(conn: Connection, method: str, need: int | None) -> Answer:
    """Status, headers, body, and whether the connection can carry another request.
    ``need``: the body is needed, whole, up to that many bytes; None: the status is the
    answer, and at most STATUS_BODY_BYTES of the body are read (see the module's doc)."""
    version, status, lines = _final_head(conn)
    headers, framing = _headers(lines)
    keep = (
        b"close" not in framing.connection
        if version == b"HTTP/1.1"
        else b"keep-alive" in framing.connection
    )
    if method == "HEAD" or status in (204, 304):
        return status, headers, b"", keep
    conn.phase = BODY
    if need is not None:
        content = _whole_body(conn, framing, need)
        return status, headers, content, keep and (framing.chunked or framing.length is not None)
    content, complete = _some_body(conn, framing)
    return status, headers, content, keep and complete


def _final_head(conn: Connection) -> tuple[bytes, int, list[bytes]]:
    """The version, status and header lines of the response after any 1xx (100 Continue,
    103 Early Hints), of which a few are skipped."""
    for _ in range(MAX_INFORMATIONAL + 1):
        lines = conn.head().split(b"\r\n")
        version, status = status_line(lines[0])
        if not 100 <= status < 200:
            return version, status, lines[1:]
    raise httpx.RemoteProtocolError(f"more than {MAX_INFORMATIONAL} informational (1xx) responses")


def _whole_body(conn: Connection, framing: _Framing, limit: int) -> bytes:
    if framing.chunked:
        body = bytearray()
        _chunked_body(conn, limit, body)
        return bytes(body)
    if framing.length is None:
        return conn.rest(limit)  # the body ends when the server closes
    length = framing.content_length()
    if length is None or length > limit:
        raise httpx.RemoteProtocolError(
            f"bad or too large Content-Length {framing.length[:40]!r} (at most {limit})"
        )
    return conn.take(length)


def _some_body(conn: Connection, framing: _Framing) -> tuple[bytes, bool]:
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
    except (Expired, OSError, httpx.RemoteProtocolError):
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


def status_line(line: bytes) -> tuple[bytes, int]:
    version, _, rest = line.partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/1.") or not code.isdigit():
        raise httpx.RemoteProtocolError(f"malformed status line {line[:80]!r}")
    return version, int(code)


def _chunked_body(conn: Connection, limit: int, body: bytearray) -> None:
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
