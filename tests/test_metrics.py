"""The metrics seam: counts and levels of the Collector and the ReporterService reach an
injected ``Metrics`` object by the vocabulary's names; the default reports nowhere."""

from __future__ import annotations

from collections.abc import Mapping

import redis

from collector import Collector
from collector.counters import REPORTER, SDK, Counter, Gauge
from collector.metrics import NO_METRICS, FanOut, Tally, fan_out
from reporter._demo.endpoint import LocalEndpoint
from reporter._service.service import ReporterService
from tests.support.entries import make_config
from tests.support.polling import wait_until


class Recording:
    """A Metrics implementation of the test's own: what was counted and watched."""

    def __init__(self) -> None:
        self.counted: dict[str, int] = {}
        self.watched: dict[str, object] = {}

    def count(self, counter: Counter, amount: int = 1) -> None:
        self.counted[str(counter)] = self.counted.get(str(counter), 0) + amount

    def add(self, amounts: Mapping[Counter, int]) -> None:
        for counter, amount in amounts.items():
            if amount:
                self.count(counter, amount)

    def watch(self, name: Counter | Gauge, read: object) -> None:
        self.watched[str(name)] = read


def test_fan_out_reports_to_the_tally_alone_by_default() -> None:
    tally = Tally()
    assert fan_out(tally, NO_METRICS) is tally
    both = fan_out(tally, Recording())
    assert isinstance(both, FanOut)


def test_a_collector_reports_its_counts_and_levels(redis_url: str) -> None:
    metrics = Recording()
    c = Collector(url=redis_url, key_prefix="metrics", metrics=metrics)
    try:
        for i in range(10):
            c.collect("g", {"i": i})
        c.collect("g", {"blob": "x" * 40_000})  # over max_event_bytes: refused, counted
        assert c.flush(timeout=10)
        stats = c.stats()
    finally:
        c.close(timeout=1)
    assert metrics.counted[Counter.STORED] == stats["stored"] == 10
    assert metrics.counted[Counter.DROPPED_TOO_LARGE] == stats["dropped_too_large"] == 1
    assert metrics.counted[Counter.FLUSHES] >= 1
    assert set(metrics.counted) <= set(SDK)
    assert set(metrics.watched) == {
        Counter.ACCEPTED,
        Counter.DROPPED_BUFFER_FULL,
        Gauge.BUFFERED,
        Gauge.UNCONFIRMED_WRITES,
    }
    assert metrics.watched[Counter.ACCEPTED]() == 10  # type: ignore[operator]


def test_a_tally_can_be_the_injected_metrics(redis_url: str) -> None:
    tally = Tally()
    c = Collector(url=redis_url, key_prefix="metrics", mode="sync", metrics=tally)
    try:
        c.collect("g", {"i": 1})
    finally:
        c.close(timeout=1)
    snapshot = tally.snapshot()
    assert (snapshot["accepted"], snapshot["stored"], snapshot["buffered"]) == (1, 1, 0)


def test_a_reporter_reports_its_counts_and_levels(redis_url: str, r: redis.Redis) -> None:
    metrics = Recording()
    with LocalEndpoint() as endpoint:
        config = make_config(
            redis_url,
            sink_url=endpoint.url,
            shards=2,
            reporter={"linger_ms": 0, "poll_interval_ms": 20},
        )
        c = Collector(config=config)
        service = ReporterService(config, metrics=metrics)
        try:
            for i in range(300):
                c.collect("g", {"i": i})
            assert c.flush(timeout=10)
            service.start()
            wait_until(lambda: metrics.counted.get(Counter.DELIVERED) == 300, what="300 delivered")
            levels = {name: read() for name, read in metrics.watched.items()}  # type: ignore[operator]
            counts = service.stop().counts
        finally:
            if not service.stop_event.is_set():
                service.stop(grace=0)
            c.close(timeout=1)
            service.store.close()
    assert set(metrics.watched) == {
        Gauge.HELD_BATCHES,
        Gauge.OWNED_SHARDS,
        Gauge.HOT_GAMES_SERVED,
        Gauge.SINK_GATE_OPEN,
    }
    assert levels[Gauge.OWNED_SHARDS] == 2 and levels[Gauge.SINK_GATE_OPEN] == 1
    assert set(metrics.counted) <= set(REPORTER)
    assert counts["delivered"] == metrics.counted[Counter.DELIVERED] == 300
    assert set(counts) <= set(REPORTER)  # the stopped: line holds counters, not levels
