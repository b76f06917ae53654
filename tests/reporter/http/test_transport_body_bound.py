"""The body of an answer whose status is the answer (a 2xx to a POST) is read no further than
``STATUS_BODY_BYTES``: a huge one sent fast is neither read nor kept, and one sent slowly does
not hold the request until its deadline.  A real local server sends 50 MB."""

from __future__ import annotations

import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator

import httpx
import pytest

from reporter._http.client_wire import STATUS_BODY_BYTES
from reporter._http.transport import SocketTransport
from tests.support.rawhttp import Act, RawServer, after, always, trickle

HUGE = 50 * 1024 * 1024
CHUNK = 16 * 1024
DEADLINE = 10.0  # the request's deadline: generous, so only waiting for the body reaches it
PAYLOAD = memoryview(b"x" * HUGE)
CHUNKED = b"".join(
    [f"{CHUNK:x}\r\n".encode() + b"x" * CHUNK + b"\r\n"] * (HUGE // CHUNK) + [b"0\r\n\r\n"]
)


class Sent:
    """What the server managed to send of a body before the client stopped taking it."""

    def __init__(self) -> None:
        self.bytes = 0
        self.ended = threading.Event()

    def body(self, head: bytes, body: bytes | memoryview) -> Act:
        def act(sock: socket.socket, stop: threading.Event) -> bool:
            try:
                sock.sendall(head)
                view = memoryview(body)
                while view and not stop.is_set():
                    sent = sock.send(view[: 1024 * 1024])
                    self.bytes += sent
                    view = view[sent:]
            except OSError:  # the client closed the connection: it wants no more
                pass
            finally:
                self.ended.set()
            return False

        return act


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(transport=SocketTransport(2.0, DEADLINE, 8)) as c:
        yield c


@pytest.mark.parametrize(
    ("head", "body"),
    [
        (f"HTTP/1.1 200 OK\r\nContent-Length: {HUGE}\r\n\r\n".encode(), PAYLOAD),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", CHUNKED),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", PAYLOAD),  # until the close
    ],
    ids=["content-length", "chunked", "until-close"],
)
def test_a_huge_2xx_body_sent_fast_is_read_no_further_than_the_bound(
    client: httpx.Client, head: bytes, body: bytes | memoryview
) -> None:
    sent = Sent()
    server = RawServer(always(sent.body(head, body)))
    try:
        tracemalloc.start()
        try:
            response = client.post(server.url(), content=b"[]")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert response.status_code == 200
        assert len(response.content) <= STATUS_BODY_BYTES
        # Nothing near the body was kept in memory, and the client stopped taking it: the
        # server's sends failed long before its end (what the kernels' buffers held, at most).
        assert peak < 8 * 1024 * 1024, f"{peak:,} bytes allocated at the peak"
        assert sent.ended.wait(DEADLINE)
        assert sent.bytes < HUGE // 2, f"{sent.bytes:,} of {HUGE:,} bytes taken"
    finally:
        server.close()


def test_a_huge_2xx_body_sent_slowly_does_not_hold_the_request(client: httpx.Client) -> None:
    slow = after(
        f"HTTP/1.1 200 OK\r\nContent-Length: {HUGE}\r\n\r\n".encode() + b"x" * 1000,
        trickle(b"x" * 10_000, 0.05),
    )
    server = RawServer(always(slow))
    try:
        started = time.monotonic()
        response = client.post(server.url(), content=b"[]")
        took = time.monotonic() - started
        assert response.status_code == 200
        # The status is the answer: the request ends with it, far from its 10 s deadline
        # (waiting for the body, it would end at the deadline).
        assert took < DEADLINE / 2, f"the request took {took:.1f} s"
    finally:
        server.close()
