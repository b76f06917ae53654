"""Hostile HTTP peers: the ReporterService against a raw-socket endpoint that misbehaves on
purpose (tests/support/rawhttp.py).  Each case asserts what became of every event, from the counters
in Redis and the reporter's own tally (delivered, dead-lettered with its reason, or retried),
and that the accounting adds up; docs/delivery.md's "hostile peers" table lists the cases.
"""

from __future__ import annotations

import email.utils
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from collector.store import KeySchema
from reporter._monitoring.accounting import Totals
from reporter._service.service import ReporterService
from tests.support.fixtures import StartService
from tests.support.polling import wait_until
from tests.support.rawhttp import OK, Act, RawServer, after, then_hold, trickle
from tests.support.scenarios import (
    drain,
    drained,
    fill,
    games_in_distinct_shards,
    make_config,
    schema_of,
)
from tests.support.scriptcalls import store_of
from tests.support.servers import Server

Reply = bytes | Act | None


@dataclass
class Peer:
    """Answers the first ``bad_requests`` requests with ``bad(number)``, the rest with ``good``
    (200 by default); notes which request numbers were answered with a 2xx (``good``, and
    ``bad`` too if ``bad_is_2xx``) and when each request arrived."""

    bad: Callable[[int], Reply]
    bad_requests: int = 1_000_000
    good: Reply = OK
    bad_is_2xx: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    answered: set[int] = field(default_factory=set)
    arrivals: list[float] = field(default_factory=list)

    def __call__(self, number: int, _on_conn: int) -> Reply:
        with self.lock:
            self.arrivals.append(time.monotonic())
            good = number >= self.bad_requests
            if good or self.bad_is_2xx:
                self.answered.add(number)
        return self.good if good else self.bad(number)


@dataclass
class Run:
    service: ReporterService
    client: redis.Redis
    schema: KeySchema
    server: RawServer
    peer: Peer

    def accepted(self) -> Counter[str]:
        """Batch ids of the requests the peer answered ``good``, with how often each came."""
        bodies = self.server.bodies()
        with self.peer.lock:
            return Counter(str(bodies[n]["batch_id"]) for n in self.peer.answered)

    def tally(self, name: str) -> int:
        return int(self.service.tally.snapshot().get(name, 0))


@pytest.fixture
def hostile(own_server: Server, start_service: StartService) -> Iterator[Callable[..., Run]]:
    servers: list[RawServer] = []

    def start(peer: Peer, reset_on_accept: int = 0, **sections: dict[str, Any]) -> Run:
        server = RawServer(peer, reset_on_accept=reset_on_accept)
        servers.append(server)
        config = make_config(own_server.url, server.url("/ingest"), **sections)
        service = start_service(config)
        wait_until(
            lambda: len(service.ownership.owned()) == config.redis.shards, what="every shard owned"
        )
        return Run(service, own_server.client(), schema_of(config), server, peer)

    yield start
    for server in servers:
        server.close()


def store_two_games(run: Run, each: int = 256) -> int:
    """``each`` events for each of two games in different shards; the number stored."""
    games = games_in_distinct_shards(run.schema, 2, "hostile")
    return len(fill(run.client, run.schema, dict.fromkeys(games, each)))


def messages(caplog: pytest.LogCaptureFixture, level: int = logging.WARNING) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level]


def assert_delivered_once(run: Run, stored: int, retried: int) -> None:
    """Everything delivered (the accounting adds up), ``retried`` retries counted, and no
    batch accepted twice."""
    totals = drain(run.client, run.schema)
    assert totals.counter("delivered") == stored
    assert totals.dead_now == 0
    assert totals.counter("batches_retried") == retried
    assert run.tally("batches_retried") == retried
    accepted = run.accepted()
    assert max(accepted.values()) == 1, "a batch accepted twice"
    assert sum(accepted.values()) == totals.counter("batches_delivered")


HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n"
LONG_HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"


def test_trickled_head_is_cut_by_the_deadline_and_retried(
    hostile: Callable[..., Run], caplog: pytest.LogCaptureFixture
) -> None:
    run = hostile(
        Peer(lambda _n: trickle(HEAD + b'{"ok":true}', 0.4), bad_requests=2),
        sink={"timeout_seconds": 1.0},
    )
    stored = store_two_games(run)
    assert_delivered_once(run, stored, retried=2)
    timeouts = [m for m in messages(caplog) if "timed out while" in m]
    assert timeouts and f"127.0.0.1:{run.server.port}/ingest" in timeouts[0]


def head_then_trickled_body(_n: int) -> Act:
    return after(LONG_HEAD, trickle(b"x" * 100, 0.4))  # 40 s of body


def test_trickled_2xx_body_is_delivered_without_a_retry(hostile: Callable[..., Run]) -> None:
    """The body is waited for until the deadline (1 s) at most; the batch is delivered."""
    run = hostile(Peer(head_then_trickled_body, bad_is_2xx=True), sink={"timeout_seconds": 1.0})
    stored = store_two_games(run)
    assert_delivered_once(run, stored, retried=0)
    assert sum(run.accepted().values()) == 4


def endless_continue(_n: int) -> Act:
    def act(sock: Any, stop: threading.Event) -> bool:
        while not stop.wait(0.05):
            sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        return False

    return act


def test_endless_100_continue_is_a_protocol_error_and_retried(hostile: Callable[..., Run]) -> None:
    run = hostile(Peer(endless_continue, bad_requests=2))
    stored = store_two_games(run)
    assert_delivered_once(run, stored, retried=2)


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 52428800\r\n\r\n" + b"x" * 100_000,
        b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"ok":true}',
    ],
    ids=["huge-2xx-body", "2xx-without-length"],
)
def test_an_odd_2xx_body_counts_as_delivered_and_is_never_sent_again(
    hostile: Callable[..., Run], answer: bytes
) -> None:
    run = hostile(Peer(lambda _n: then_hold(answer), bad_is_2xx=True))
    stored = store_two_games(run, each=128)
    assert_delivered_once(run, stored, retried=0)
    assert len(run.server.requests) == 2  # 256 events, 2 batches, each sent once


def test_retry_after_nan_is_ignored_with_a_warning(
    hostile: Callable[..., Run], caplog: pytest.LogCaptureFixture
) -> None:
    busy = b"HTTP/1.1 503 Busy\r\nRetry-After: nan\r\nContent-Length: 0\r\n\r\n"
    run = hostile(Peer(lambda _n: busy, bad_requests=1))
    stored = store_two_games(run)
    assert_delivered_once(run, stored, retried=1)
    logged = messages(caplog)
    assert any("Retry-After 'nan' (not a finite number): ignored" in m for m in logged)
    assert not [m for m in messages(caplog, logging.ERROR)], "a sweep failed"


def test_retry_after_as_an_http_date_is_honoured(hostile: Callable[..., Run]) -> None:
    def busy(_n: int) -> bytes:
        when = email.utils.formatdate(time.time() + 2, usegmt=True)
        return b"HTTP/1.1 503 Busy\r\nRetry-After: %s\r\nContent-Length: 0\r\n\r\n" % when.encode()

    run = hostile(Peer(busy, bad_requests=1), reporter={"workers": 1})
    games = games_in_distinct_shards(run.schema, 1, "dated")
    stored = len(fill(run.client, run.schema, {games[0]: 100}))
    assert_delivered_once(run, stored, retried=1)
    first, second = run.peer.arrivals[:2]
    assert second - first >= 1.0  # the date has whole seconds: 1 to 2 s from the answer


def test_retry_after_huge_is_capped_and_the_stale_events_are_announced(
    hostile: Callable[..., Run], caplog: pytest.LogCaptureFixture
) -> None:
    busy = b"HTTP/1.1 429 Slow down\r\nRetry-After: 999999999\r\nContent-Length: 0\r\n\r\n"
    run = hostile(Peer(lambda _n: busy, bad_requests=1))
    games = games_in_distinct_shards(run.schema, 1, "capped")
    fill(run.client, run.schema, {games[0]: 100})
    keys = run.schema.for_game(games[0])
    retry = wait_until(
        lambda: run.client.zrange(keys.retry, 0, -1, withscores=True),
        what="the batch waiting for its retry",
    )
    seconds, micros = run.client.time()
    due_in = retry[0][1] / 1000 - (seconds + micros / 1e6)
    assert 590 <= due_in <= 601  # capped at 600 s, not 31 years
    assert not run.service.gate.is_open()  # claims pause as long
    [warning] = [m for m in messages(caplog) if "freshness window" in m]
    assert "wait of 600 s" in warning and "the 100 events of batch" in warning
    totals = store_of(run.client, run.schema).read_shards()
    assert sum(s.pending_events for s in totals) == 100  # counted, waiting, not lost
    assert run.tally("batches_retried") == 1


def test_reset_on_accept_is_retried(hostile: Callable[..., Run]) -> None:
    run = hostile(Peer(lambda _n: OK, bad_requests=0), reset_on_accept=2)
    stored = store_two_games(run)
    assert_delivered_once(run, stored, retried=2)


def test_close_without_a_response_is_retried(hostile: Callable[..., Run]) -> None:
    run = hostile(Peer(lambda _n: None, bad_requests=2))
    stored = store_two_games(run)
    assert_delivered_once(run, stored, retried=2)


def test_a_redirect_is_dead_lettered_with_its_status(hostile: Callable[..., Run]) -> None:
    moved = (
        b"HTTP/1.1 301 Moved Permanently\r\nLocation: http://127.0.0.1:9/elsewhere\r\n"
        b"Content-Length: 0\r\n\r\n"
    )
    run = hostile(Peer(lambda _n: moved))
    stored = store_two_games(run, each=128)
    totals = drain(run.client, run.schema)
    assert totals.dead_now == stored
    assert totals.counter("delivered") == 0
    dead = store_of(run.client, run.schema).dead_batches(100)
    assert [(b.reason, b.attempts) for b in dead] == [("HTTP 301", 1)] * 2
    assert len(run.server.requests) == 2  # not followed, not retried


def test_four_endless_responses_do_not_hold_2000_events(
    hostile: Callable[..., Run], caplog: pytest.LogCaptureFixture
) -> None:
    """The default 4 workers and max_connections: the first 4 requests get a response that
    trickles forever (a header byte every 1.5 s); each is cut at its 5 s deadline and retried,
    and all 2,000 events get through within 40 s."""
    endless = after(b"HTTP/1.1 200 OK\r\n", trickle(b"X-Slow: " + b"a" * 100_000, 1.5))
    run = hostile(
        Peer(lambda _n: endless, bad_requests=4),
        reporter={"workers": 4},
        sink={"timeout_seconds": 5.0},
    )
    games = games_in_distinct_shards(run.schema, 4, "endless")
    stored = len(fill(run.client, run.schema, dict.fromkeys(games, 500)))
    totals = wait_until(
        lambda: all_delivered(run, 2000), timeout=40.0, what="all 2,000 events delivered"
    )
    assert totals.counter("delivered") == stored == 2000
    assert totals.counter("batches_retried") == 4
    assert any("timed out while reading headers" in m for m in messages(caplog))


def all_delivered(run: Run, events: int) -> Totals | None:
    totals = drained(run.client, run.schema)
    return totals if totals is not None and totals.counter("delivered") == events else None
