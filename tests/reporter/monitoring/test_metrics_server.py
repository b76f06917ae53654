"""The metrics HTTP server under hostile clients: deadlines, the connection cap, failed
accepts backed off, bounded log state.  Real sockets on 127.0.0.1; bounds on time are only
"answered at all before a generous timeout"."""

from __future__ import annotations

import json
import logging
import socket
import struct
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from reporter._http import bounded_server
from reporter._http.bounded_server import BoundedServer, Serving
from reporter._http.server_wire import MAX_HEAD_BYTES, Answer, Request
from reporter._http.shedding import Limits
from reporter._monitoring import server as server_module
from reporter._monitoring.health import Health
from reporter._monitoring.server import MetricsServer
from tests.support.polling import wait_until
from tests.support.scriptcalls import store_of

ROOT = Path(__file__).resolve().parents[3]
WAIT = 10.0  # seconds a test waits for anything before it fails


class Handler:
    """/healthz and /echo answer at once; /slow and /readyz wait until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.paths: list[str] = []

    def __call__(self, request: Request) -> Answer:
        self.paths.append(request.path)
        if request.path in ("/slow", "/readyz"):
            self.release.wait(WAIT)
        if request.path == "/boom":
            raise RuntimeError("a bug")
        return Answer(200, "text/plain", request.path.encode())


@pytest.fixture
def handler() -> Iterator[Handler]:
    h = Handler()
    yield h
    h.release.set()


def serve(handler: Handler, **limits: float) -> BoundedServer:
    server = BoundedServer(
        ("127.0.0.1", 0),
        socket.AF_INET,
        Serving(
            handler,
            lambda r: r.path == "/healthz",
            health=lambda r: r.path in ("/healthz", "/readyz"),
        ),
        Limits(**limits),  # type: ignore
    )
    server.start()
    return server


@pytest.fixture
def running() -> Iterator[list[BoundedServer]]:
    servers: list[BoundedServer] = []
    yield servers
    for server in servers:
        server.stop()


def url(server: BoundedServer, path: str) -> str:
    host, port = server.address
    return f"http://{host}:{port}{path}"


def connect(server: BoundedServer, send: bytes = b"") -> socket.socket:
    sock = socket.create_connection(server.address, timeout=WAIT)
    if send:
        sock.sendall(send)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed the connection (EOF or reset) before ``WAIT``."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def test_a_request_that_never_completes_is_closed_and_counted(
    handler: Handler, running: list[BoundedServer]
) -> None:
    server = serve(handler, request_seconds=0.3)
    running.append(server)
    idle = connect(server)
    half = connect(server, b"GET /metr")
    with idle, half:
        assert closed_by_server(idle)
        assert closed_by_server(half)
    wait_until(lambda: server.counts.dropped()["deadline"] == 2, timeout=WAIT, what="both counted")
    assert server.open_connections == 0
    assert httpx.get(url(server, "/echo"), timeout=WAIT).text == "/echo"  # still serving


def test_a_trickled_request_meets_one_deadline_for_the_whole_request(
    handler: Handler, running: list[BoundedServer]
) -> None:
    server = serve(handler, request_seconds=0.5)
    running.append(server)
    with connect(server) as sock:
        sock.settimeout(WAIT)
        sent = 0
        stop = threading.Event()
        try:
            for byte in b"GET /echo HTTP/1.1\r\nHost: x\r\n" * 100:  # never ends
                sock.send(bytes([byte]))
                sent += 1
                if stop.wait(0.02):
                    break
        except OSError:  # closed by the server: the deadline held despite the trickle
            pass
    assert sent < 3000
    assert server.counts.dropped()["deadline"] == 1


def test_past_the_cap_the_longest_waiting_connection_gives_way(
    handler: Handler, running: list[BoundedServer]
) -> None:
    server = serve(handler, max_connections=5)  # 4, and 1 kept for health probes
    running.append(server)
    idle = [connect(server) for _ in range(4)]
    wait_until(lambda: server.open_connections == 4, timeout=WAIT, what="4 open")
    # a probe still gets in, in place of the oldest idle connection
    assert httpx.get(url(server, "/healthz"), timeout=WAIT).text == "/healthz"
    assert closed_by_server(idle[0])
    assert server.counts.dropped()["over_cap"] == 1
    assert server.open_connections <= 4
    for sock in idle:
        sock.close()


def test_past_the_cap_with_every_connection_answered_the_new_one_is_closed(
    handler: Handler, running: list[BoundedServer]
) -> None:
    server = serve(handler, max_connections=3, workers=2)  # 2, and 1 kept for health
    running.append(server)
    busy = [connect(server, b"GET /slow HTTP/1.1\r\n\r\n") for _ in range(2)]
    wait_until(lambda: handler.paths.count("/slow") == 2, timeout=WAIT, what="both working")
    busy.append(connect(server, b"GET /readyz HTTP/1.1\r\n\r\n"))  # the kept slot
    wait_until(lambda: "/readyz" in handler.paths, timeout=WAIT, what="the probe working")
    with connect(server) as extra:
        assert closed_by_server(extra)
    assert server.counts.dropped()["over_cap"] == 1
    handler.release.set()
    for sock in busy:
        with sock:
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 OK\r\n")


def test_kept_alive_and_pipelined_requests_are_answered_in_order(
    handler: Handler, running: list[BoundedServer]
) -> None:
    server = serve(handler)
    running.append(server)
    with httpx.Client(timeout=WAIT) as client:
        for path in ["/a", "/healthz", "/b"]:
            assert client.get(url(server, path)).text == path
    assert server.open_connections <= 1
    with connect(
        server,
        b"GET /healthz HTTP/1.1\r\n\r\nGET /x HTTP/1.1\r\n\r\n"
        b"HEAD /healthz HTTP/1.1\r\nConnection: close\r\n\r\n",
    ) as sock:
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    answers = received.split(b"HTTP/1.1 200 OK\r\n")
    assert len(answers) == 4
    assert answers[1].endswith(b"/healthz") and answers[2].endswith(b"/x")
    assert b"Connection: close" in answers[3] and answers[3].endswith(b"\r\n\r\n")  # HEAD


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /" + b"a" * (MAX_HEAD_BYTES + 10), b"414"),
        (b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n", b"431"),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nab", b"405"),
        (b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", b"501"),
        (b"GET / HTTP/1.1\r\nContent-Length: 999999\r\n\r\n", b"413"),
        (b"GET / HTTP/2.0\r\n\r\n", b"505"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", b"400"),
    ],
)
def test_requests_it_will_not_serve_are_answered_closed_and_counted(
    handler: Handler, running: list[BoundedServer], request_bytes: bytes, status: bytes
) -> None:
    server = serve(handler)
    running.append(server)
    with connect(server, request_bytes) as sock:
        answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 " + status), answer
        assert b"Connection: close" in answer
        assert closed_by_server(sock)
    assert server.counts.dropped()["bad_request"] == 1
    assert not handler.paths


def test_a_small_body_is_read_and_ignored(handler: Handler, running: list[BoundedServer]) -> None:
    server = serve(handler)
    running.append(server)
    answer = httpx.request("GET", url(server, "/echo"), content=b"x" * 5000, timeout=WAIT)
    assert answer.text == "/echo"


def test_long_paths_reset_by_the_client_leave_no_log_and_no_state(
    handler: Handler, running: list[BoundedServer], caplog: pytest.LogCaptureFixture
) -> None:
    server = serve(handler)
    running.append(server)
    assert httpx.get(url(server, "/echo"), timeout=WAIT).text == "/echo"
    keys = bounded_server.ratelog.keys
    tracemalloc.start()
    try:
        with caplog.at_level(logging.DEBUG, logger="reporter"):
            before = tracemalloc.get_traced_memory()[0]
            for i in range(100):
                sock = connect(server, f"GET /{i}".encode() + b"a" * 60_000 + b" HTTP/1.1\r\n\r\n")
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )  # close sends a reset
                sock.close()
            wait_until(lambda: server.open_connections == 0, timeout=WAIT, what="all closed")
            kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 1_000_000  # 100 paths of 60 KB: nothing of them is kept
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert bounded_server.ratelog.keys == keys
    assert httpx.get(url(server, "/echo"), timeout=WAIT).text == "/echo"


def test_a_failing_handler_is_a_500_logged_once_under_one_key(
    handler: Handler, running: list[BoundedServer], caplog: pytest.LogCaptureFixture
) -> None:
    server = serve(handler)
    running.append(server)
    keys = bounded_server.ratelog.keys
    with caplog.at_level(logging.ERROR, logger="reporter"):
        for _ in range(20):
            answer = httpx.get(url(server, "/boom"), timeout=WAIT)
            assert answer.status_code == 500
            assert "a bug" not in answer.text
    assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) <= 1
    assert bounded_server.ratelog.keys <= keys + 1


# A server in a child process whose file limit is used up: its accepts fail with EMFILE,
# are counted and backed off, and it serves again once descriptors are free.
EMFILE_CHILD = """
import json, os, resource, socket, sys, time
from reporter._http.bounded_server import BoundedServer, Serving
from reporter._monitoring.health import Health
from reporter._monitoring.server import MetricsServer
from reporter._http.shedding import Limits
from reporter._http.server_wire import Answer
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
ok = Serving(lambda r: Answer(200, "text/plain", b"ok"), lambda r: True)
server = BoundedServer(("127.0.0.1", 0), socket.AF_INET, ok, Limits())
server.start()
held = []
try:
    while True:
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
print(server.address[1], flush=True)
sys.stdin.readline()  # the parent has connected: let the server fail for a while
time.sleep(1.5)
print(json.dumps(server.counts.accept_errors()), flush=True)
for fd in held:
    os.close(fd)
sys.stdin.readline()
server.stop()
"""


def test_accepts_failing_for_lack_of_descriptors_back_off_and_recover() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", EMFILE_CHILD],
        cwd=ROOT,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as child:
        assert child.stdin is not None and child.stdout is not None
        try:
            port = int(child.stdout.readline())
            waiting = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
            child.stdin.write("go\n")
            child.stdin.flush()
            errors = json.loads(child.stdout.readline())
            # Spinning would fail hundreds of thousands of times in 1.5 s; backing off, a few.
            assert 1 <= errors.get("EMFILE", 0) <= 100, errors
            with waiting:  # once descriptors are free, the waiting connection is served
                waiting.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
                assert waiting.recv(4096).startswith(b"HTTP/1.1 200 OK\r\n")
            child.stdin.write("stop\n")
            child.stdin.flush()
            assert child.wait(WAIT) == 0
        finally:
            child.kill()


class Broken:
    """A metrics collector with a bug whose message names a host."""

    def collect(self) -> list[object]:
        raise RuntimeError("cannot reach redis://admin@db.internal:6379")


@pytest.mark.parametrize("details", [False, True])
def test_a_500_names_the_error_only_when_the_operator_asks(
    client: redis.Redis, details: bool, caplog: pytest.LogCaptureFixture
) -> None:
    health = Health(store_of(client), threading.Event(), 30.0, frozenset)
    server = MetricsServer(("127.0.0.1", 0), Broken(), health, details=details)
    server_module.ratelog.reset("bug:/metrics")  # logged by an earlier test within 30 s
    server.start()
    try:
        with caplog.at_level(logging.ERROR, logger="reporter"):
            answer = httpx.get(f"{server.url}/metrics", timeout=WAIT)
        assert answer.status_code == 500
        assert ("db.internal" in answer.text) is details
        assert "RuntimeError" in caplog.text  # the log has the traceback either way
        assert httpx.get(f"{server.url}/healthz", timeout=WAIT).json() == {"alive": True}
    finally:
        server.stop()
