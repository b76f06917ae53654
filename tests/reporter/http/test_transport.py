"""The lean HTTP/1.1 transport against a scripted server on a loopback socket."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from reporter._http.transport import NEED_BODY, Proxy, SocketTransport
from tests.support.markers import secret
from tests.support.polling import wait_until
from tests.support.rawhttp import (
    OK,
    Act,
    RawServer,
    Script,
    after,
    always,
    reset,
    then_hold,
    trickle,
)

KEY = secret("key")
PW = secret("pw")
Serve = Callable[..., RawServer]


@pytest.fixture
def serve() -> Iterator[Serve]:
    servers: list[RawServer] = []

    def start(script: Script, **kwargs: Any) -> RawServer:
        server = RawServer(script, **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(transport=SocketTransport(2.0, 2.0, 8)) as c:
        yield c


def post(
    client: httpx.Client, server: RawServer, body: bytes = b'{"a":1}', **kwargs: Any
) -> httpx.Response:
    return client.post(server.url(), content=body, **kwargs)


def test_posts_the_request_and_keeps_the_connection(serve: Serve, client: httpx.Client) -> None:
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


def test_send_when_asks_with_the_connection_ready_and_may_send_nothing(serve: Serve) -> None:
    """A rate's slot is checked once the connection is made, right before the bytes go
    (``send_when``); a no sends nothing, returns None and keeps the connection."""
    server = serve(always(OK))
    transport = SocketTransport(2.0, 2.0, 8)
    client = httpx.Client(transport=transport)
    seen: list[int] = []

    def ready() -> bool:
        seen.append(len(server.requests))
        return True

    def request() -> httpx.Request:
        return client.build_request("POST", server.url(), content=b'{"a":1}')

    try:
        answer = transport.send_when(request(), ready)
        assert answer is not None and answer.status_code == 200
        assert seen == [0] and len(server.requests) == 1  # it ran before the request went
        answer = transport.send_when(request(), ready)
        assert answer is not None and answer.status_code == 200
        assert seen == [0, 1] and server.connections == 1  # and on a kept connection too
        assert transport.send_when(request(), lambda: False) is None
        assert len(server.requests) == 2  # nothing sent
        assert transport.handle_request(request()).status_code == 200
        assert server.connections == 1  # the connection was kept for the next request
    finally:
        client.close()


@pytest.mark.parametrize(
    "reply, content",
    [
        (b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n", b""),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n5;ext=1\r\ndefgh\r\n0\r\nX-Trailer: t\r\n\r\n",
            b"abcdefgh",
        ),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", b"hi"),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b""),
        (b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\ncontent-length: 4\r\n\r\nbusy", b"busy"),
    ],
)
def test_response_bodies_of_every_framing_keep_the_connection(
    serve: Serve, client: httpx.Client, reply: bytes, content: bytes
) -> None:
    server = serve(always(reply))
    first = post(client, server)
    second = post(client, server)
    assert first.content == second.content == content
    assert server.connections == 1
    if first.status_code == 503:
        assert first.headers["Retry-After"] == "7"


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ],
)
def test_connection_close_opens_a_new_connection(
    serve: Serve, client: httpx.Client, reply: bytes
) -> None:
    server = serve(lambda _n, _c: reply)
    assert post(client, server).content == b"ok"
    assert post(client, server).content == b"ok"
    assert server.connections == 2


def test_body_read_until_the_server_closes_when_the_body_is_needed(
    serve: Serve, client: httpx.Client
) -> None:
    server = serve(always(b"HTTP/1.1 200 OK\r\n\r\nuntil close"), close_after_reply=True)
    assert post(client, server, extensions={NEED_BODY: 100}).content == b"until close"
    assert post(client, server, extensions={NEED_BODY: 100}).content == b"until close"
    assert server.connections == 2


def test_fresh_connection_closed_without_a_reply_is_an_error(
    serve: Serve, client: httpx.Client
) -> None:
    server = serve(lambda _n, _c: None)
    with pytest.raises(httpx.RemoteProtocolError, match="without a response"):
        post(client, server)


@pytest.mark.parametrize(
    "reply, match",
    [
        (b"SPDY/3 200 OK\r\n\r\n", "malformed status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
        (b"HTTP/1.1 100 Continue\r\n\r\n" * 50, "informational"),
    ],
)
def test_malformed_responses_are_protocol_errors(
    serve: Serve, client: httpx.Client, reply: bytes, match: str
) -> None:
    server = serve(always(reply))
    with pytest.raises(httpx.RemoteProtocolError, match=match):
        post(client, server)
    assert post(client, serve(always(OK))).content == b"ok"


@pytest.mark.parametrize(
    "reply, match",
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 52428800\r\n\r\n" + b"x" * 5000, "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"800\r\n" + b"x" * 2048,
            "over 1024 bytes",
        ),
    ],
)
def test_a_needed_body_that_is_malformed_or_too_long_is_a_protocol_error(
    serve: Serve, client: httpx.Client, reply: bytes, match: str
) -> None:
    server = serve(always(reply))
    with pytest.raises(httpx.RemoteProtocolError, match=match):
        post(client, server, extensions={NEED_BODY: 1024})


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 52428800\r\n\r\n" + b"x" * 100_000,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nno length, kept alive",
    ],
)
def test_the_status_is_the_answer_and_an_odd_body_is_left_with_its_connection(
    serve: Serve, client: httpx.Client, reply: bytes
) -> None:
    """A body too long, unframed on a kept-alive connection, malformed or cut short: the
    answer comes without waiting for it, and the connection is not used again."""
    server = serve(always(then_hold(reply)))
    done: list[httpx.Response] = []
    threading.Thread(
        target=lambda: done.append(
            client.send(client.build_request("POST", server.url(), content=b"x"), stream=True)
        ),
        daemon=True,
    ).start()
    wait_until(lambda: done, what="the answer, without waiting for the body")
    assert done[0].status_code == 200
    done[0].close()
    assert post(client, serve(always(OK))).status_code == 200
    wait_until(lambda: server.closed == 1, what="the odd connection closed, not kept")


def test_truncated_body_is_a_protocol_error_when_the_body_is_needed(
    serve: Serve, client: httpx.Client
) -> None:
    server = serve(
        always(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"), close_after_reply=True
    )
    with pytest.raises(httpx.RemoteProtocolError, match="inside the response body"):
        post(client, server, extensions={NEED_BODY: 100})


def test_slow_server_is_a_read_timeout(serve: Serve) -> None:
    hold = threading.Event()

    def slow(_n: int, _c: int) -> bytes:
        hold.wait(5)
        return OK

    server = serve(slow)
    try:
        with (
            httpx.Client(transport=SocketTransport(2.0, 0.2, 8)) as c,
            pytest.raises(httpx.ReadTimeout),
        ):
            c.post(server.url(), content=b"x")
    finally:
        hold.set()


def test_refused_connection_is_a_connect_error(client: httpx.Client) -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    with pytest.raises(httpx.ConnectError, match=f"127.0.0.1:{port}"):
        client.post(f"http://127.0.0.1:{port}/", content=b"x")


def test_line_breaks_in_headers_are_refused_before_sending(
    serve: Serve, client: httpx.Client
) -> None:
    server = serve(always(OK))
    request = httpx.Request(
        "POST", server.url(), content=b"x", headers=[(b"X-Evil", b"a\r\nInjected: yes")]
    )
    with pytest.raises(httpx.LocalProtocolError, match="X-Evil"):
        client.send(request)
    assert server.requests == []


def test_connections_are_shared_and_bounded(serve: Serve) -> None:
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
                assert client.post(server.url(), content=b"x").content == b"ok"
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


def test_waiting_longer_than_the_pool_timeout_is_a_pool_timeout(serve: Serve) -> None:
    hold = threading.Event()

    def held(_n: int, _c: int) -> bytes:
        hold.wait(5)
        return OK

    server = serve(held)
    client = httpx.Client(
        transport=SocketTransport(2.0, 5.0, 1), timeout=httpx.Timeout(5.0, pool=0.2)
    )
    first = threading.Thread(target=client.post, args=(server.url(),), kwargs={"content": b"x"})
    first.start()
    try:
        wait_until(lambda: len(server.requests) == 1)
        with pytest.raises(httpx.PoolTimeout):
            client.post(server.url(), content=b"y")
    finally:
        hold.set()
        first.join(10)
        client.close()
    assert len(server.requests) == 1


def test_close_closes_the_idle_connections(serve: Serve) -> None:
    server = serve(always(OK))
    transport = SocketTransport(2.0, 2.0, 8)
    c = httpx.Client(transport=transport)
    c.post(server.url(), content=b"x")
    [[conn]] = transport._idle.values()
    c.close()
    assert transport._idle == {}
    assert conn.sock.fileno() == -1


# --- one deadline per request -------------------------------------------------------------

HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"


def continues(every: float) -> Act:
    """A ``100 Continue`` every so often, and never the response."""

    def act(sock: socket.socket, stop: threading.Event) -> bool:
        while not stop.wait(every):
            sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        return False

    return act


@pytest.mark.parametrize(
    "act, phase",
    [
        (trickle(HEAD + b"ok", 0.3), "waiting for the status line"),
        (after(HEAD[:17], trickle(HEAD[17:] + b"ok", 0.3)), "reading headers"),
        (continues(every=0.3), "waiting for the status line"),
        (
            after(b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n", trickle(b"x" * 20, 0.3)),
            "reading the body",
        ),
    ],
)
def test_a_trickling_peer_is_cut_off_by_the_deadline(
    serve: Serve, caplog: pytest.LogCaptureFixture, act: Act, phase: str
) -> None:
    """One byte every 0.3 s never lets a read wait 1 s, yet the request ends at its 1 s
    deadline, with a WARNING naming the endpoint (without credentials or query) and phase."""
    server = serve(always(act))
    url = server.url().replace("http://", f"http://user:{PW}@") + f"&api_key={KEY}"
    with (
        httpx.Client(transport=SocketTransport(2.0, 1.0, 8)) as c,
        pytest.raises(httpx.ReadTimeout, match=phase),
    ):
        c.post(url, content=b"x", extensions={NEED_BODY: 100})
    [record] = [r for r in caplog.records if "timed out" in r.getMessage()]
    assert record.levelname == "WARNING"
    message = record.getMessage()
    assert f"http://127.0.0.1:{server.port}/ingest timed out while {phase}" in message
    assert KEY not in message and PW not in message


def test_a_peer_that_does_not_read_is_cut_off_while_sending(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:  # accepts nothing, reads nothing
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/ingest"
        with (
            httpx.Client(transport=SocketTransport(2.0, 0.5, 8)) as c,
            pytest.raises(httpx.WriteTimeout, match="sending"),
        ):
            c.post(url, content=b"x" * 50_000_000)
    assert any("while sending" in r.getMessage() for r in caplog.records)


def test_a_2xx_whose_body_trickles_is_answered_at_the_deadline(serve: Serve) -> None:
    """The status is the answer: the body is waited for until the deadline at most, and the
    connection is then dropped."""
    body = after(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", trickle(b"x" * 100, 0.3))
    server = serve(lambda n, _c: OK if n else body)
    with httpx.Client(transport=SocketTransport(2.0, 1.0, 8)) as c:
        response = c.post(server.url(), content=b"x")
        assert response.status_code == 200
        assert 0 < len(response.content) < 100
        assert c.post(server.url(), content=b"x").content == b"ok"
    assert server.connections == 2


# --- connection reuse -----------------------------------------------------------------------


def test_a_connection_idle_longer_than_the_expiry_is_not_reused(serve: Serve) -> None:
    server = serve(always(OK))
    with httpx.Client(transport=SocketTransport(2.0, 2.0, 8, keepalive_expiry=1.0)) as c:
        c.post(server.url(), content=b"x")
        c.post(server.url(), content=b"x")  # at once: reused
        assert server.connections == 1
        threading.Event().wait(1.2)
        c.post(server.url(), content=b"x")
        assert server.connections == 2
        wait_until(lambda: server.closed == 1, what="the expired connection closed")


def test_connections_the_server_closed_while_idle_are_noticed_before_reuse(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    """Both pooled connections were closed by the server (its keep-alive timeout): the
    request goes out once, on a new connection, instead of failing on one dead connection,
    then on the other."""
    caplog.set_level(logging.DEBUG, "reporter")
    server = serve(always(OK))
    transport = SocketTransport(2.0, 5.0, 8)
    with httpx.Client(transport=transport) as c:
        two_at_once(c, server)
        assert sum(len(v) for v in transport._idle.values()) == 2
        wait_until(lambda: server.idle() == 2, what="both server handlers back to waiting")
        server.close_idle()
        wait_until(lambda: server.closed == 2, what="the server closing both idle connections")
        assert c.post(server.url(), content=b"x").content == b"ok"
    assert len(server.requests) == 3
    assert server.connections == 3
    assert not [r for r in caplog.records if "sending it again" in r.getMessage()]


def test_a_request_the_server_closes_on_is_sent_again_on_a_new_connection(serve: Serve) -> None:
    """The close races with the request: each connection answers one request and closes
    when the next one arrives.  The request goes again at once on a NEW connection, never on
    the other pooled one (which would fail the same way: "closed twice")."""
    server = serve(lambda _n, on_conn: OK if on_conn == 0 else None)
    with httpx.Client(transport=SocketTransport(2.0, 5.0, 8)) as c:
        two_at_once(c, server)
        for _ in range(3):
            request = c.build_request(
                "POST", server.url(), content=b"x", headers={"Idempotency-Key": "b-1"}
            )
            assert c.send(request).content == b"ok"
    again = [head for head, _ in server.requests[2:]]
    assert len(again) == 6  # each went twice: on a pooled connection, then on a new one
    assert all(b"\r\nIdempotency-Key: b-1\r\n" in head for head in again)
    assert server.connections == 5


def test_a_fresh_connection_reset_is_an_error_not_sent_again(serve: Serve) -> None:
    server = serve(always(reset))
    with (
        httpx.Client(transport=SocketTransport(2.0, 5.0, 8)) as c,
        pytest.raises(httpx.TransportError),
    ):
        c.post(server.url(), content=b"x")
    assert len(server.requests) == 1


def two_at_once(c: httpx.Client, server: RawServer) -> None:
    """Two requests at the same time, so the pool holds two connections."""
    both = threading.Barrier(2)

    def held(_n: int, _c: int) -> bytes:
        both.wait(5)
        return OK

    script, server.script = server.script, held
    threads = [
        threading.Thread(target=c.post, args=(server.url(),), kwargs={"content": b"x"})
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    server.script = script
    assert server.connections == 2


# --- proxies ---------------------------------------------------------------------------------


def test_plain_http_through_a_proxy_uses_the_absolute_form(serve: Serve) -> None:
    proxy = serve(always(OK))
    transport = SocketTransport(
        2.0, 5.0, 8, proxy=Proxy.parse(f"http://us%40er:p%3Ass@127.0.0.1:{proxy.port}")
    )
    with httpx.Client(transport=transport) as c:
        assert c.post("http://ingest.invalid:8080/v1?x=1", content=b"x").content == b"ok"
        assert c.post("http://ingest.invalid:8080/v1?x=1", content=b"x").content == b"ok"
    head, _ = proxy.requests[0]
    assert head.startswith(b"POST http://ingest.invalid:8080/v1?x=1 HTTP/1.1\r\n")
    assert b"\r\nHost: ingest.invalid:8080\r\n" in head
    assert b"\r\nProxy-Authorization: Basic dXNAZXI6cDpzcw==\r\n" in head  # us@er:p:ss
    assert proxy.connections == 1


@pytest.mark.parametrize("url", ["https://proxy:3128", "http://", "socks5://h:1", "http://h:port"])
def test_proxy_urls_the_builtin_transport_cannot_use(url: str) -> None:
    with pytest.raises(ValueError, match=r"proxy|[Pp]ort"):
        Proxy.parse(url)
