"""The bounded server with request bodies (the HTTP ingest's use): bodies read whole within
the bound, a screen that answers a head before its body, ``100 Continue``, more answer
fields.  Real sockets on 127.0.0.1."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from reporter._http.bounded_server import BoundedServer, Serving
from reporter._http.server_wire import Answer, Request
from reporter._http.shedding import Limits

WAIT = 10.0
METHODS = ("GET", "POST")


def echo(request: Request) -> Answer:
    """The body's length and its first bytes; a field of its own."""
    return Answer(
        200,
        "text/plain",
        f"{request.method} {len(request.body)} ".encode() + request.body[:16],
        headers=(("X-Seen", request.path),),
    )


def screen(request: Request) -> Answer | None:
    if request.header(b"authorization") != b"Bearer good":
        return Answer(401, "text/plain", b"who are you?")
    return None


@pytest.fixture
def server() -> Iterator[BoundedServer]:
    s = BoundedServer(
        ("127.0.0.1", 0),
        socket.AF_INET,
        Serving(echo, lambda r: True, name="test", methods=METHODS, screen=screen, chunked=True),
        Limits(max_body_bytes=100_000, request_seconds=2.0),
    )
    s.start()
    yield s
    s.stop()


def chunked_post(*chunks: bytes, trailer: bytes = b"") -> bytes:
    body = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(c), c) for c in chunks)
    return (
        b"POST /in HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + body + b"0\r\n" + trailer + b"\r\n"
    )


def post(body: bytes, token: bytes = b"good", extra: bytes = b"") -> bytes:
    return (
        b"POST /in HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + b"\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body
    )


def answers(sock: socket.socket, count: int) -> list[bytes]:
    """Read ``count`` whole answers (each has a Content-Length)."""
    data, out = b"", []
    while len(out) < count:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0:
            head = data[:head_end]
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            if len(data) >= head_end + 4 + length:
                out.append(data[: head_end + 4 + length])
                data = data[head_end + 4 + length :]
                continue
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"closed after {len(out)} answers: {data!r}")
        data += chunk
    return out


def connect(server: BoundedServer) -> socket.socket:
    return socket.create_connection(server.address, timeout=WAIT)


def test_a_body_is_read_whole_and_the_answer_carries_its_fields(server: BoundedServer) -> None:
    body = b"x" * 90_000
    with connect(server) as sock:
        sock.sendall(post(body[:1000]))
        sock.sendall(post(body))  # pipelined, and larger than one read
        first, second = answers(sock, 2)
    assert first.startswith(b"HTTP/1.1 200 OK\r\n")
    assert first.endswith(b"POST 1000 xxxxxxxxxxxxxxxx")
    assert b"\r\nX-Seen: /in\r\n" in first
    assert second.endswith(b"POST 90000 xxxxxxxxxxxxxxxx")


def test_a_body_over_the_bound_is_refused_from_its_head(server: BoundedServer) -> None:
    with connect(server) as sock:
        sock.sendall(b"POST /in HTTP/1.1\r\nContent-Length: 100001\r\n\r\n")
        (answer,) = answers(sock, 1)
        assert answer.startswith(b"HTTP/1.1 413 ")
        assert b"Connection: close" in answer
    assert server.counts.dropped()["bad_request"] == 1


def test_the_screen_answers_before_the_body_and_then_closes(server: BoundedServer) -> None:
    with connect(server) as sock:
        sock.sendall(post(b"y" * 50_000, token=b"bad")[:-50_000])  # the head alone
        (answer,) = answers(sock, 1)
        assert answer.startswith(b"HTTP/1.1 401 ")
        assert b"Connection: close" in answer
        sock.sendall(b"y" * 50_000)  # read and dropped while the server lingers
        assert sock.recv(100) == b""


def test_a_screened_request_whose_body_came_whole_keeps_the_connection(
    server: BoundedServer,
) -> None:
    with connect(server) as sock:
        sock.sendall(post(b"z" * 300, token=b"bad") + post(b"after"))
        refused, served = answers(sock, 2)
    assert refused.startswith(b"HTTP/1.1 401 ") and b"Connection: close" not in refused
    assert served.endswith(b"POST 5 after")


def test_a_client_that_waits_for_100_continue_is_asked_for_its_body(
    server: BoundedServer,
) -> None:
    with connect(server) as sock:
        message = post(b"b" * 2000, extra=b"Expect: 100-continue\r\n")
        sock.sendall(message[:-2000])
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(message[-2000:])
        (answer,) = answers(sock, 1)
    assert answer.endswith(b"POST 2000 bbbbbbbbbbbbbbbb")


def test_a_method_it_does_not_serve_is_refused_naming_the_ones_it_does(
    server: BoundedServer,
) -> None:
    with connect(server) as sock:
        sock.sendall(b"DELETE /in HTTP/1.1\r\n\r\n")
        (answer,) = answers(sock, 1)
    assert answer.startswith(b"HTTP/1.1 405 ")
    assert b"\r\nAllow: GET, POST\r\n" in answer


def test_a_body_in_chunks_is_decoded_as_it_arrives(server: BoundedServer) -> None:
    message = chunked_post(b"a" * 5000, b"b" * 20, b"c", trailer=b"X-Sum: 1\r\n")
    with connect(server) as sock:
        for i in range(0, len(message), 7):  # in pieces that cut every line somewhere
            sock.sendall(message[i : i + 7])
        sock.sendall(post(b"after"))  # the next request on the same connection
        first, second = answers(sock, 2)
    assert first.endswith(b"POST 5021 aaaaaaaaaaaaaaaa")
    assert second.endswith(b"POST 5 after")


@pytest.mark.parametrize(
    ("message", "status"),
    [
        (chunked_post(b"x" * 60_000, b"y" * 40_001), 413),  # over max_body_bytes in all
        (chunked_post(b"x").replace(b"1;ext=1", b"z"), 400),  # a size that is not hex
        (chunked_post(b"xy").replace(b"xy\r\n", b"xyz"), 400),  # no CRLF after the data
        (chunked_post(b"x").replace(b"chunked", b"gzip, chunked"), 501),
        (chunked_post(b"x").replace(b"\r\n\r\n", b"\r\nContent-Length: 7\r\n\r\n", 1), 400),
        (chunked_post(b"x", trailer=b"X-Big: " + b"t" * 9000 + b"\r\n"), 431),
    ],
)
def test_a_body_in_chunks_that_breaks_the_rules_is_refused(
    server: BoundedServer, message: bytes, status: int
) -> None:
    with connect(server) as sock:
        sock.sendall(message)
        (answer,) = answers(sock, 1)
    assert answer.startswith(b"HTTP/1.1 %d " % status)
    assert b"Connection: close" in answer


def test_a_server_that_takes_no_chunks_refuses_them() -> None:
    s = BoundedServer(
        ("127.0.0.1", 0), socket.AF_INET, Serving(echo, lambda r: True, methods=METHODS)
    )
    s.start()
    try:
        with connect(s) as sock:
            sock.sendall(chunked_post(b"x"))
            (answer,) = answers(sock, 1)
        assert answer.startswith(b"HTTP/1.1 501 ")
    finally:
        s.stop()
