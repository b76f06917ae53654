"""A raw-socket HTTP/1.1 peer on 127.0.0.1 that answers byte for byte from a script, and can
misbehave on purpose: trickle, hang, reset, close without answering, over TLS or not.

The script is called with the request's number (0, 1, ... in arrival order) and its number on
its connection, and returns what to do: bytes (sent at once, then the next request is read),
None (close without answering), or an ``Act`` (see ``trickle``, ``hang``, ``reset``,
``then_hold``), which works on the socket itself and says whether to read another request.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

import orjson

Act = Callable[[socket.socket, threading.Event], bool]
Script = Callable[[int, int], "bytes | Act | None"]

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def always(reply: bytes | Act | None) -> Script:
    return lambda _n, _on_conn: reply


def trickle(data: bytes, interval: float, then: bytes = b"") -> Act:
    """Send ``data`` one byte every ``interval`` seconds, then ``then`` at once; the
    connection stays open for the next request."""

    def act(sock: socket.socket, stop: threading.Event) -> bool:
        for i in range(len(data)):
            if stop.wait(interval if i else 0):
                return False
            sock.sendall(data[i : i + 1])
        if then:
            sock.sendall(then)
        return True

    return act


def after(first: bytes, act: Act) -> Act:
    """Send ``first`` at once, then do ``act``."""

    def both(sock: socket.socket, stop: threading.Event) -> bool:
        sock.sendall(first)
        return act(sock, stop)

    return both


def hang(sock: socket.socket, stop: threading.Event) -> bool:
    """Answer nothing and keep the connection until the peer closes it or the server stops."""
    return then_hold(b"")(sock, stop)


def then_hold(data: bytes) -> Act:
    """Send ``data``, then keep the connection open, reading nothing more, until the peer
    closes it or the server stops."""

    def act(sock: socket.socket, stop: threading.Event) -> bool:
        if data:
            sock.sendall(data)
        sock.settimeout(0.05)
        while not stop.is_set():
            try:
                if not sock.recv(65536):
                    return False
            except TimeoutError:
                continue
            except OSError:
                return False
        return False

    return act


def reset(sock: socket.socket, stop: threading.Event) -> bool:
    """Close with a TCP reset (SO_LINGER 0) instead of an orderly close."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return False


class RawServer:
    """Accepts connections (the first ``reset_on_accept`` are reset at once), reads each
    request (head and Content-Length body) and answers from ``script``; with ``tls``, over
    TLS.  Records the requests and counts connections."""

    def __init__(
        self,
        script: Script,
        *,
        close_after_reply: bool = False,
        reset_on_accept: int = 0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.script = script
        self.close_after_reply = close_after_reply
        self.reset_on_accept = reset_on_accept
        self.tls = tls
        self.lock = threading.Lock()
        self.requests: list[tuple[bytes, bytes]] = []
        self.connections = 0
        self.closed = 0  # connections that have ended, by either side
        self.stop = threading.Event()
        self._socks: list[socket.socket] = []
        self._idle: set[socket.socket] = set()  # waiting for their next request
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True, name="raw-server").start()

    def url(self, path: str = "/ingest?x=1") -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}{path}"

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                number = self.connections
                self._socks.append(sock)
            if number <= self.reset_on_accept:
                reset(sock, self.stop)
                self._ended(sock)
                continue
            threading.Thread(target=self._handle, args=(sock,), daemon=True).start()

    def _ended(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.close()
        with self.lock:
            self.closed += 1

    def _handle(self, sock: socket.socket) -> None:
        try:
            if self.tls is not None:
                sock.settimeout(5)
                sock = self.tls.wrap_socket(sock, server_side=True)
                sock.settimeout(None)
                with self.lock:
                    self._socks.append(sock)
            self._converse(sock)
        except OSError:
            pass
        finally:
            self._ended(sock)

    def _converse(self, sock: socket.socket) -> None:
        reader = sock.makefile("rb")
        served = 0
        while not self.stop.is_set():
            head = b""
            with self.lock:
                self._idle.add(sock)
            while not head.endswith(b"\r\n\r\n"):
                line = reader.readline()
                if not line:
                    return
                head += line
            with self.lock:
                self._idle.discard(sock)
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            with self.lock:
                self.requests.append((head, reader.read(length)))
                number = len(self.requests) - 1
            reply = self.script(number, served)
            served += 1
            if reply is None:
                return
            if isinstance(reply, bytes):
                sock.sendall(reply)
            elif not reply(sock, self.stop):
                return
            if self.close_after_reply:
                return

    def bodies(self) -> list[Any]:
        """The JSON bodies received, parsed."""
        with self.lock:
            return [orjson.loads(body) for _, body in self.requests if body]

    def idle(self) -> int:
        """Connections waiting for their next request (a handler that has just answered
        comes back to waiting a moment after the client has the answer)."""
        with self.lock:
            return len(self._idle)

    def close_idle(self) -> None:
        """Close the connections waiting for a request, as a keep-alive timeout does."""
        with self.lock:
            idle, self._idle = list(self._idle), set()
        for sock in idle:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.stop.set()
        self._listener.close()
        with self.lock:
            socks = list(self._socks)
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def raw_server(script: Script, **kwargs: Any) -> Iterator[RawServer]:
    server = RawServer(script, **kwargs)
    try:
        yield server
    finally:
        server.close()
