"""Redis fails for a few seconds while a Collector produces events and the ReporterService
delivers them: killed (SIGKILL, then started again) or hung (SIGSTOP, then SIGCONT: sockets
stay open and nothing is answered, so every call waits for its timeout).  Both carry on by
themselves once it is back.

The server runs with ``appendonly yes`` and ``appendfsync always``: every write it answered
is on disk before the answer, so the restart loses nothing and every event collected before,
during and after the outage can be reconciled.  (Without persistence a restart empties Redis
and only events collected after it could be; bench/soak.py covers longer outages.)
"""

from __future__ import annotations

import threading
import time

import pytest

from collector import Collector
from tests.support.fixtures import MakeEndpoint, StartService
from tests.support.polling import wait_until
from tests.support.scenarios import (
    assert_reconciled,
    drained,
    make_config,
    received_keys,
    schema_of,
)
from tests.support.servers import Server

GAMES = ("arena", "puzzle", "kart")
OUTAGE_SECONDS = 3.0


class Producer(threading.Thread):
    """Collects events of GAMES round-robin, about 1000 a second, until stopped."""

    def __init__(self, collector: Collector) -> None:
        super().__init__(name="producer", daemon=True)
        self.collector = collector
        self.stop = threading.Event()
        self.collected: list[tuple[str, int]] = []
        self.errors: list[BaseException] = []

    def run(self) -> None:
        seq = 0
        while not self.stop.wait(0.01):
            for _ in range(10):
                game = GAMES[seq % len(GAMES)]
                try:
                    self.collector.collect(game, {"game": game, "seq": seq})
                except BaseException as exc:  # the test reports it
                    self.errors.append(exc)
                self.collected.append((game, seq))
                seq += 1


@pytest.mark.parametrize("fault", ["killed", "hung"])
def test_redis_outage_while_collecting_and_delivering(
    durable_server: Server, make_endpoint: MakeEndpoint, start_service: StartService, fault: str
) -> None:
    endpoint = make_endpoint()
    config = make_config(
        durable_server.url,
        endpoint.url,
        redis={"socket_timeout_seconds": 0.5, "connect_timeout_seconds": 0.5},
    )
    schema = schema_of(config)
    client = durable_server.client()
    service = start_service(config)
    collector = Collector(config=config)
    producer = Producer(collector)
    try:
        producer.start()
        wait_until(lambda: len(endpoint.events()) >= 200, what="delivery before the outage")

        if fault == "killed":
            durable_server.stop()
        else:
            durable_server.pause()
        down_at = time.monotonic()
        wait_until(lambda: collector.stats()["backend_errors"] >= 2, what="flushes failing")
        wait_until(
            lambda: time.monotonic() - down_at >= OUTAGE_SECONDS,
            step=0.1,
            what="the outage to last",
        )
        during = len(producer.collected)
        if fault == "killed":
            durable_server.start()
        else:
            durable_server.resume()

        wait_until(
            lambda: len(producer.collected) >= during + 1000,
            what="events collected after the restart",
        )
        producer.stop.set()
        producer.join(10)
        assert collector.flush(timeout=20)
        totals = wait_until(
            lambda: (
                (t := drained(client, schema))
                and t.counter("stored") >= len(producer.collected)
                and t
            ),
            timeout=40,
            what="everything delivered after the restart",
        )
    finally:
        producer.stop.set()
        collector.close(timeout=1)

    assert producer.errors == []  # collect() never raised into the game
    stats = collector.stats()
    assert stats["backend_errors"] >= 2
    assert stats["buffered"] == 0
    assert stats["accepted"] == len(producer.collected)
    assert stats["dropped_buffer_full"] == stats["dropped_at_close"] == 0
    assert stats["accepted"] == (
        stats["stored"]
        + stats["dropped_buffer_full"]
        + stats["dropped_at_close"]
        + stats["buffered"]
    )

    assert_reconciled(totals)
    # A write whose answer was lost in the outage is sent again as it is (the same writer id
    # and sequence number): Redis answers the repeat and stores each event once.
    assert totals.counter("stored") == stats["stored"]
    assert totals.counter("delivered") == totals.counter("stored")
    got = received_keys(endpoint)
    assert set(got) == set(producer.collected)  # before, during and after the outage
    assert service.runner.scheduler.running and not service.stop_event.is_set()
