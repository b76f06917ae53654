"""The ingest when things go wrong: Redis unreachable (the buffer fills: 503, nothing taken is
dropped), a client that trickles its request, a stop with events still buffered."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import redis

from reporter._ingest.service import IngestService
from tests.support.ingest_requests import StartIngest, as_array, ingest_config
from tests.support.polling import wait_until
from tests.support.servers import Server, free_port

DOWN = {"socket_timeout_seconds": 0.2, "connect_timeout_seconds": 0.2}


def test_a_full_buffer_answers_503_and_what_it_took_is_kept(
    own_server: Server, start_ingest: StartIngest
) -> None:
    """Redis is down: the buffer fills to its bound and stays there.  Each request is taken
    whole or refused whole (503, Retry-After); none taken is pushed out while the flusher's
    failing writes come and go, and once Redis is back every one is stored."""
    own_server.stop()
    config = ingest_config(
        own_server.url,
        redis=DOWN,
        collector={"max_buffer_events": 1000, "flush_interval_ms": 1, "retry_max_delay_ms": 10},
        ingest={"retry_after_seconds": 7, "max_events_per_request": 100},
    )
    ingest = start_ingest(config)
    taken = refused = 0
    deadline = time.monotonic() + 2.0
    with httpx.Client(base_url=ingest.url, timeout=10) as client:
        n = 0
        while time.monotonic() < deadline:
            events = [{"seq": n * 100 + i} for i in range(100)]
            answer = client.post("/v1/games/arena/events", content=as_array(events))
            if answer.status_code == 202:
                taken += 100
            else:
                assert answer.status_code == 503, answer.text
                assert answer.headers["Retry-After"] == "7"
                assert "buffer is full" in answer.json()["error"]
                refused += 1
            n += 1
    assert refused > 0 and 0 < taken <= 1000
    stats = ingest.collector.stats()
    assert stats["dropped_buffer_full"] == 0
    assert stats["accepted"] == taken
    own_server.start()
    assert ingest.collector.flush(20)
    stats = ingest.collector.stats()
    assert stats["stored"] == taken and stats["dropped_buffer_full"] == 0


def test_a_trickling_client_is_cut_off_and_others_are_served_meanwhile(
    redis_url: str, start_ingest: StartIngest
) -> None:
    ingest = start_ingest(ingest_config(redis_url, ingest={"request_timeout_seconds": 1.0}))
    host, port = ingest.url.removeprefix("http://").split(":")
    body = as_array([{"seq": 1}])
    head = (
        f"POST /v1/games/arena/events HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    closed = threading.Event()

    def trickle() -> None:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            try:
                for byte in head + body:  # one byte every 0.1 s: 9 s for the whole request
                    sock.sendall(bytes([byte]))
                    time.sleep(0.1)
                    sock.setblocking(False)
                    try:
                        if sock.recv(100) == b"":
                            break
                    except BlockingIOError:
                        pass
                    finally:
                        sock.setblocking(True)
            except OSError:  # reset by the server
                pass
            closed.set()

    started = time.monotonic()
    thread = threading.Thread(target=trickle)
    thread.start()
    served = httpx.post(f"{ingest.url}/v1/games/arena/events", content=body, timeout=10)
    assert served.status_code == 202  # the trickler holds no thread
    assert closed.wait(10)
    assert time.monotonic() - started < 5  # the deadline of the whole request, not per byte
    thread.join()
    wait_until(lambda: _dropped(ingest, "deadline") == 1, timeout=5, what="the cut counted")
    assert ingest.collector.stats()["accepted"] == 1


def _dropped(ingest: IngestService, reason: str) -> int:
    text = httpx.get(f"{ingest.url}/metrics", timeout=10).text
    line = f'telemetry_ingest_connections_dropped_total{{reason="{reason}"}} '
    return int(float(text.split(line)[1].split()[0]))


def test_stop_stores_what_it_took_then_refuses_new_connections(
    redis_url: str, r: redis.Redis, start_ingest: StartIngest
) -> None:
    config = ingest_config(redis_url, collector={"flush_interval_ms": 60_000})
    ingest = start_ingest(config)
    url = ingest.url
    events = [{"seq": i} for i in range(500)]
    answer = httpx.post(f"{url}/v1/games/arena/events", content=as_array(events), timeout=10)
    assert answer.status_code == 202
    assert ingest.collector.stats()["stored"] == 0  # the flush interval is a minute away
    counts = ingest.stop(timeout=5)
    assert counts["sdk"]["stored"] == 500 and counts["sdk"]["dropped_at_close"] == 0
    (queue,) = r.keys("*:q:arena")
    assert r.llen(queue) == 500
    try:
        httpx.post(f"{url}/v1/games/arena/events", content=as_array(events), timeout=2)
    except httpx.ConnectError:
        pass
    else:
        raise AssertionError("the stopped ingest still answered")


def test_stop_is_bounded_when_redis_is_gone_and_counts_what_is_left(
    start_ingest: StartIngest,
) -> None:
    config = ingest_config(f"redis://127.0.0.1:{free_port()}/0", redis=DOWN)
    ingest = start_ingest(config)
    answer = httpx.post(
        f"{ingest.url}/v1/games/arena/events", content=as_array([{"seq": 1}] * 50), timeout=10
    )
    assert answer.status_code == 202
    started = time.monotonic()
    counts = ingest.stop(timeout=0.5)
    assert time.monotonic() - started < 3
    assert counts["sdk"]["dropped_at_close"] == 50
