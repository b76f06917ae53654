"""Clients that flood an HTTP server on 127.0.0.1, for the tests and ``bench/``."""

from __future__ import annotations

import contextlib
import select
import socket
import threading

PIPELINED = b"GET /metrics HTTP/1.1\r\nHost: flood\r\n\r\n" * 400
# Linux's TCP states in which the peer has closed its side (tcp_states.h).
_TCP_CLOSE, _TCP_CLOSE_WAIT = 7, 8


def peer_closed(sock: socket.socket) -> bool:
    """Whether the peer closed (or reset) the connection, without reading what it sent."""
    try:
        if sock.recv(1, socket.MSG_PEEK) == b"":
            return True
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True
    # Answers wait unread ahead of the peer's FIN, which no peek reaches: ask the kernel.
    if hasattr(socket, "TCP_INFO"):
        state = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
        return state in (_TCP_CLOSE, _TCP_CLOSE_WAIT)
    return False


class PipelinedFlood:
    """``count`` connections that each send 400 ``GET /metrics`` at once and never read an
    answer (a receive buffer of 4 KB, so the server's answers back up soon).  As a context
    manager, each one the server closes is opened again at once, as a hostile client would."""

    def __init__(self, address: tuple[str, int], count: int, timeout: float = 10.0) -> None:
        self.address = address
        self.timeout = timeout
        self.socks = [self._open() for _ in range(count)]
        self.opened = count
        self.failed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._reopen, daemon=True)

    def _open(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.address)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.send(PIPELINED)
        return sock

    def _reopen(self) -> None:
        while not self.stop.wait(0.05):
            readable, _, _ = select.select(self.socks, [], [], 0)
            for sock in readable:
                if peer_closed(sock):
                    sock.close()
                    try:
                        self.socks[self.socks.index(sock)] = self._open()
                        self.opened += 1
                    except OSError:
                        self.failed += 1

    def close(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(self.timeout)
        for sock in self.socks:
            sock.close()

    def __enter__(self) -> PipelinedFlood:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
