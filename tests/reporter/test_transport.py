"""The lean HTTP/1.1 transport against a scripted server on a loopback socket."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from reporter._transport import SocketTransport

# Given the request number (0, 1, ...) and the connection's request number, the raw reply;
# None closes the connection without answering.
Script = Callable[[int, int], bytes | None]

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class ScriptedServer:
    """Accepts connections, reads each request (head and Content-Length body) and answers
    from ``script``.  Records the requests and counts connections."""

    def __init__(self, script: Script, close_after_reply: bool = False) -> None:
        self.script = script
        self.close_after_reply = close_after_reply
        self.requests: list[tuple[bytes, bytes]] = []
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/ingest?x=1"

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(sock,), daemon=True).start()

    def _handle(self, sock: socket.socket) -> None:
        with sock:
            reader = sock.makefile("rb")
            served = 0
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                self.requests.append((head, reader.read(length)))
                reply = self.script(len(self.requests) - 1, served)
                served += 1
                if reply is None:
                    return
                sock.sendall(reply)
                if self.close_after_reply:
                    return

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def serve() -> Iterator[Callable[..., ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(script: Script, close_after_reply: bool = False) -> ScriptedServer:
        server = ScriptedServer(script, close_after_reply)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(transport=SocketTransport(2.0, 2.0, 8)) as c:
        yield c


def always(reply: bytes) -> Script:
    return lambda _n, _on_conn: reply


def post(client: httpx.Client, server: ScriptedServer, body: bytes = b'{"a":1}',
         **kwargs: Any) -> httpx.Response:
    return client.post(server.url, content=body, **kwargs)


def test_posts_the_request_and_keeps_the_connection(
        serve: Callable[..., ScriptedServer], client: httpx.Client) -> None:
    server = serve(always(OK))
    for i in range(3):
        response = post(client, server, b'{"n":%d}' % i, headers={"X-Key": f"k{i}"})
        assert (response.status_code, response.content) == (200, b"ok")
    assert server.connections == 1
    head, body = server.requests[2]
    assert head.startswith(b"POST /ingest?x=1 HTTP/1.1\r\n")
    assert b"\r\nX-Key: k2\r\n" in head
    assert b"\r\nContent-Length: 7\r\n" in head
    assert b"\r\nHost: 127.0.0.1:" in head
    assert body == b'{"n":2}'


@pytest.mark.parametrize("reply, content", [
    (b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n", b""),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"3\r\nabc\r\n5;ext=1\r\ndefgh\r\n0\r\nX-Trailer: t\r\n\r\n", b"abcdefgh"),
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", b"hi"),
    (b"HTTP/1.1 204 No Content\r\n\r\n", b""),
    (b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\ncontent-length: 4\r\n\r\nbusy", b"busy"),
])
def test_response_bodies_of_every_framing_keep_the_connection(
        serve: Callable[..., ScriptedServer], client: httpx.Client, reply: bytes,
        content: bytes) -> None:
    server = serve(always(reply))
    first = post(client, server)
    second = post(client, server)
    assert first.content == second.content == content
    assert server.connections == 1
    if first.status_code == 503:
        assert first.headers["Retry-After"] == "7"


@pytest.mark.parametrize("reply", [
    b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
])
def test_connection_close_opens_a_new_connection(
        serve: Callable[..., ScriptedServer], client: httpx.Client, reply: bytes) -> None:
    server = serve(lambda _n, _c: reply)
    assert post(client, server).content == b"ok"
    assert post(client, server).content == b"ok"
    assert server.connections == 2


def test_body_read_until_the_server_closes(
        serve: Callable[..., ScriptedServer], client: httpx.Client) -> None:
    server = serve(always(b"HTTP/1.1 200 OK\r\n\r\nuntil close"), close_after_reply=True)
    assert post(client, server).content == b"until close"
    assert post(client, server).content == b"until close"
    assert server.connections == 2


def test_idle_connection_closed_by_the_server_is_retried_once(
        serve: Callable[..., ScriptedServer], client: httpx.Client) -> None:
    # Every connection answers one request, then closes when the next one arrives.
    server = serve(lambda _n, on_conn: OK if on_conn == 0 else None)
    for _ in range(3):
        assert post(client, server).content == b"ok"
    assert server.connections == 3
    assert len(server.requests) == 5  # the 2nd and 3rd POSTs each went out twice


def test_fresh_connection_closed_without_a_reply_is_an_error(
        serve: Callable[..., ScriptedServer], client: httpx.Client) -> None:
    server = serve(lambda _n, _c: None)
    with pytest.raises(httpx.RemoteProtocolError, match="without a response"):
        post(client, server)


@pytest.mark.parametrize("reply, match", [
    (b"SPDY/3 200 OK\r\n\r\n", "malformed status line"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Content-Length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
])
def test_malformed_responses_are_protocol_errors(
        serve: Callable[..., ScriptedServer], client: httpx.Client, reply: bytes,
        match: str) -> None:
    server = serve(always(reply))
    with pytest.raises(httpx.RemoteProtocolError, match=match):
        post(client, server)
    assert post(client, serve(always(OK))).content == b"ok"


def test_truncated_body_is_a_protocol_error(
        serve: Callable[..., ScriptedServer], client: httpx.Client) -> None:
    server = serve(always(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"),
                   close_after_reply=True)
    with pytest.raises(httpx.RemoteProtocolError, match="inside the response body"):
        post(client, server)


def test_slow_server_is_a_read_timeout(serve: Callable[..., ScriptedServer]) -> None:
    hold = threading.Event()

    def slow(_n: int, _c: int) -> bytes:
        hold.wait(5)
        return OK

    server = serve(slow)
    try:
        with httpx.Client(transport=SocketTransport(2.0, 0.2, 8)) as c, \
                pytest.raises(httpx.ReadTimeout):
            c.post(server.url, content=b"x")
    finally:
        hold.set()


def test_refused_connection_is_a_connect_error(client: httpx.Client) -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    with pytest.raises(httpx.ConnectError, match=f"127.0.0.1:{port}"):
        client.post(f"http://127.0.0.1:{port}/", content=b"x")


def test_line_breaks_in_headers_are_refused_before_sending(
        serve: Callable[..., ScriptedServer], client: httpx.Client) -> None:
    server = serve(always(OK))
    request = httpx.Request("POST", server.url, content=b"x",
                            headers=[(b"X-Evil", b"a\r\nInjected: yes")])
    with pytest.raises(httpx.LocalProtocolError, match="X-Evil"):
        client.send(request)
    assert server.requests == []


def test_connections_are_shared_and_bounded(serve: Callable[..., ScriptedServer]) -> None:
    """Six threads, at most two connections: every request succeeds over those two."""
    in_flight, most = 0, 0
    lock = threading.Lock()

    def slow_ok(_n: int, _c: int) -> bytes:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        threading.Event().wait(0.05)
        with lock:
            in_flight -= 1
        return OK

    server = serve(slow_ok)
    client = httpx.Client(transport=SocketTransport(2.0, 5.0, 2))  # one client, as the sender
    errors: list[BaseException] = []

    def post_three() -> None:
        try:
            for _ in range(3):
                assert client.post(server.url, content=b"x").content == b"ok"
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=post_three) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    client.close()
    assert not errors
    assert len(server.requests) == 18
    assert most == 2
    assert server.connections == 2


def test_waiting_longer_than_the_pool_timeout_is_a_pool_timeout(
        serve: Callable[..., ScriptedServer]) -> None:
    hold = threading.Event()

    def held(_n: int, _c: int) -> bytes:
        hold.wait(5)
        return OK

    server = serve(held)
    client = httpx.Client(transport=SocketTransport(2.0, 5.0, 1),
                          timeout=httpx.Timeout(5.0, pool=0.2))
    first = threading.Thread(target=client.post, args=(server.url,), kwargs={"content": b"x"})
    first.start()
    try:
        wait_for(lambda: len(server.requests) == 1)
        with pytest.raises(httpx.PoolTimeout):
            client.post(server.url, content=b"y")
    finally:
        hold.set()
        first.join(10)
        client.close()
    assert len(server.requests) == 1


def test_close_closes_the_idle_connections(serve: Callable[..., ScriptedServer]) -> None:
    server = serve(always(OK))
    transport = SocketTransport(2.0, 2.0, 8)
    c = httpx.Client(transport=transport)
    c.post(server.url, content=b"x")
    [[conn]] = transport._idle.values()
    c.close()
    assert transport._idle == {}
    assert conn.sock.fileno() == -1


def wait_for(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        threading.Event().wait(0.01)
    raise AssertionError("condition not met in 5 s")
