"""``/healthz`` and ``/readyz`` answer during a flood of ``/metrics``: connections that
pipeline requests and never read the answers, and connections that keep every slot busy with
answers being computed.  Real sockets on 127.0.0.1, the real metrics server and readiness."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
import redis

from reporter._http.bounded_server import BoundedServer, Serving
from reporter._http.server_wire import Answer, Request
from reporter._http.shedding import Limits
from reporter._monitoring.health import Health
from reporter._monitoring.server import MetricsServer
from tests.support.floods import PipelinedFlood
from tests.support.polling import wait_until
from tests.support.scriptcalls import store_of

WAIT = 10.0


class ManyGauges:
    """A metrics collector with an answer of about 40 KB, like a reporter with many games."""

    def collect(self) -> list[object]:
        from prometheus_client.metrics_core import GaugeMetricFamily

        families = []
        for n in range(400):
            family = GaugeMetricFamily(f"flood_gauge_{n}", "a gauge of the test", labels=["g"])
            family.add_metric([f"game-{n}"], float(n))
            families.append(family)
        return families


@pytest.fixture
def metrics_server(client: redis.Redis) -> Iterator[MetricsServer]:
    health = Health(store_of(client), threading.Event(), 30.0, frozenset)
    health.leases_renewed()
    server = MetricsServer(("127.0.0.1", 0), ManyGauges(), health)
    server.start()
    yield server
    server.stop()


def probes(url: str, count: int, paths: tuple[str, ...] = ("/readyz", "/healthz")) -> list[str]:
    """``count`` requests of ``paths`` in turn, each on a new connection; what went wrong
    with each that was not a 200."""
    failed = []
    for n in range(count):
        path = paths[n % len(paths)]
        try:
            answer = httpx.get(url + path, timeout=5.0, headers={"Connection": "close"})
            if answer.status_code != 200:
                failed.append(f"{path}: {answer.status_code}")
        except httpx.HTTPError as exc:
            failed.append(f"{path}: {type(exc).__name__}")
    return failed


def test_health_answers_while_pipelined_metrics_answers_go_unread(
    metrics_server: MetricsServer,
) -> None:
    host, port = metrics_server.url.removeprefix("http://").split(":")
    # 70 connections against the default cap of 64: the server's answers to each back up
    # within a few requests, and the flood keeps every slot it is given.
    with PipelinedFlood((host, int(port)), 70) as flood:
        wait_until(
            lambda: metrics_server.counts.dropped()["over_cap"] > 0,
            timeout=WAIT,
            what="the flood to fill the cap",
        )
        failed = probes(metrics_server.url, 40)
        assert flood.opened > 70  # the server closed some, and they came back
    assert not failed, f"{len(failed)} of 40 probes failed: {failed[:5]}"


class Counting:
    """Answers every request with 256 KB, counting them."""

    def __init__(self) -> None:
        self.answered = 0

    def __call__(self, request: Request) -> Answer:
        self.answered += 1
        return Answer(200, "text/plain", b"x" * 256 * 1024)


def stalled(handler: Counting) -> bool:
    """Whether no answer was asked for during the last second."""
    before = handler.answered
    threading.Event().wait(1.0)
    return handler.answered == before


def test_connections_whose_answers_are_not_taken_give_way_to_a_scraper() -> None:
    handler = Counting()
    server = BoundedServer(
        ("127.0.0.1", 0),
        socket.AF_INET,
        Serving(handler, lambda r: r.path == "/healthz"),
        Limits(max_connections=8, answer_seconds=60.0),  # no health paths: none kept
    )
    server.start()
    flood = PipelinedFlood(server.address, 8)  # not reopened: each keeps its slot
    try:
        wait_until(lambda: stalled(handler), timeout=WAIT, what="every answer to back up")
        assert server.open_connections == 8
        host, port = server.address
        # A new scraper takes the place of the one kept waiting longest, well before the
        # answer deadline would have closed it (then the slot it leaves is free).
        assert not probes(f"http://{host}:{port}", 3, ("/metrics",))
        assert server.counts.dropped()["over_cap"] == 1
    finally:
        flood.close()
        server.stop()


class Busy:
    """Every request but the health ones waits until released: every slot is being answered."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = 0

    def __call__(self, request: Request) -> Answer:
        if request.path not in ("/healthz", "/readyz"):
            self.started += 1
            self.release.wait(WAIT)
        return Answer(200, "text/plain", request.path.encode())


def test_health_answers_while_every_slot_waits_for_its_answer() -> None:
    busy = Busy()
    server = BoundedServer(
        ("127.0.0.1", 0),
        socket.AF_INET,
        Serving(
            busy, lambda r: r.path == "/healthz", health=lambda r: r.path in ("/healthz", "/readyz")
        ),
        Limits(max_connections=16, workers=2),
    )
    server.start()
    held = []
    try:
        for _ in range(16):
            sock = socket.create_connection(server.address, timeout=WAIT)
            sock.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            held.append(sock)
        wait_until(lambda: busy.started == 2, timeout=WAIT, what="both workers busy")
        host, port = server.address
        assert not probes(f"http://{host}:{port}", 10)
        # the share kept for health is for health: a scrape in it is refused, and counted
        with socket.create_connection(server.address, timeout=WAIT) as extra:
            extra.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            assert extra.recv(4096).startswith(b"HTTP/1.1 503 ")
        assert server.counts.dropped()["over_cap"] >= 1
    finally:
        busy.release.set()
        for sock in held:
            sock.close()
        server.stop()


class Blocking:
    """/slow waits until released; /block (answered on the selector thread) holds the whole
    server until unblocked; the rest answer at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.unblock = threading.Event()
        self.paths: list[str] = []

    def __call__(self, request: Request) -> Answer:
        self.paths.append(request.path)
        if request.path == "/slow":
            self.release.wait(WAIT)
        if request.path == "/block":
            self.unblock.wait(WAIT)
        return Answer(200, "text/plain", request.path.encode())


def test_a_probe_is_answered_before_the_connections_behind_it_push_it_out() -> None:
    handler = Blocking()
    server = BoundedServer(
        ("127.0.0.1", 0),
        socket.AF_INET,
        Serving(
            handler,
            lambda r: r.path in ("/healthz", "/block"),
            health=lambda r: r.path in ("/healthz", "/block"),
        ),
        Limits(max_connections=3, workers=2),  # 2, and 1 kept for health
    )
    server.start()
    socks = []
    try:
        for _ in range(2):  # every slot of the others' share is being answered
            socks.append(socket.create_connection(server.address, timeout=WAIT))
            socks[-1].sendall(b"GET /slow HTTP/1.1\r\n\r\n")
        wait_until(lambda: handler.paths.count("/slow") == 2, timeout=WAIT, what="both busy")
        socks.append(socket.create_connection(server.address, timeout=WAIT))
        socks[-1].sendall(b"GET /block HTTP/1.1\r\nConnection: close\r\n\r\n")
        wait_until(lambda: "/block" in handler.paths, timeout=WAIT, what="the server held")
        # While the server is held, a probe and then seven idle connections wait to be
        # accepted: the next round accepts all eight, each pushing out the one before.
        probe = socket.create_connection(server.address, timeout=WAIT)
        socks.append(probe)
        probe.sendall(b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
        socks += [socket.create_connection(server.address, timeout=WAIT) for _ in range(7)]
        handler.unblock.set()
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := probe.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
    finally:
        handler.release.set()
        handler.unblock.set()
        for sock in socks:
            sock.close()
        server.stop()
