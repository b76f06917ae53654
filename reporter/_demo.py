"""``telemetry-reporter demo``: the whole pipeline on a private server and a local endpoint."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Mapping
from typing import TextIO

from collector import Collector
from collector.config import build_config, raw_settings
from collector.counters import Counter as C
from collector.counters import Gauge
from reporter._accounting import Totals, read_totals
from reporter._config import ReporterConfig
from reporter._embedded import EmbeddedServer
from reporter._endpoint import LocalEndpoint, Received
from reporter._service import ReporterService
from reporter._tables import table

HOT_GAME = "arena-hot"
# Events per second each simulated game produces.
GAMES = {HOT_GAME: 3000, "puzzle-quest": 200, "kart-racer": 150, "card-club": 100,
         "farm-story": 50, "tiny-chess": 5}


def demo_config(redis_url: str, sink_url: str) -> ReporterConfig:
    raw = raw_settings(ReporterConfig.default())
    raw["redis"].update(url=redis_url, shards=8)
    raw["sink"].update(url=sink_url)
    raw["reporter"].update(linger_ms=500, poll_interval_ms=50, workers=4,
                           hot_games={HOT_GAME: 2})
    raw["buffer"].update(max_events_per_game=20_000)
    return build_config(raw, "<demo>", env={}, interpolate=False, cls=ReporterConfig)


def _traffic(collector: Collector, stop: threading.Event) -> None:
    """Logins and logouts of simulated players, paced to the rates in GAMES."""
    sessions = itertools.count(1)
    started = time.monotonic()
    sent = dict.fromkeys(GAMES, 0)
    while not stop.is_set():
        elapsed = time.monotonic() - started
        for game, rate in GAMES.items():
            due = int(elapsed * rate) - sent[game]
            for _ in range(due):
                collector.collect(game, {
                    "si": f"s{next(sessions):08d}", "bt": random.randint(0, 1),
                    "ot": int(time.time()), "ct": 0, "pi": f"1{random.randrange(10**37):037d}",
                    "sent_ms": time.time_ns() // 1_000_000,
                })
            sent[game] += max(0, due)
        stop.wait(0.01)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_demo(seconds: float, out: TextIO) -> int:
    server = EmbeddedServer().start()
    endpoint = LocalEndpoint().start()
    collector: Collector | None = None
    service: ReporterService | None = None
    try:
        config = demo_config(server.url, endpoint.url)
        collector = Collector(config=config)
        service = ReporterService(config)
        print(f"demo: valkey-server on {server.url}, ingest endpoint {endpoint.url}", file=out)
        print(f"demo: {len(GAMES)} games ({HOT_GAME} is hot, 2 dedicated threads), "
              f"{sum(GAMES.values())} events/s for {seconds:g} s", file=out)
        service.start()
        stop = threading.Event()
        traffic = threading.Thread(target=_traffic, args=(collector, stop), daemon=True)
        traffic.start()
        started = time.monotonic()
        while (left := seconds - (time.monotonic() - started)) > 0:
            stop.wait(min(1.0, left))
            elapsed = time.monotonic() - started
            stats = collector.stats()
            print(f"  {elapsed:5.1f}s  collected {stats['accepted']:>7}  delivered "
                  f"{len(endpoint.events()):>7}  batches {len(endpoint.received):>5}", file=out)
        stop.set()
        traffic.join()
        collector.flush(10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            totals = read_totals(service.store)
            if totals.buffered == 0 and totals.pending_events == 0:
                break
            if service.stop_event.wait(0.1):
                break
        service.stop()
        print(_summary(collector, service, endpoint), file=out)
        return 0
    finally:
        if service is not None and not service.stop_event.is_set():
            service.stop(grace=0)
        if collector is not None:
            collector.close(timeout=1)
        endpoint.stop()
        server.stop()


def _summary(collector: Collector, service: ReporterService, endpoint: LocalEndpoint) -> str:
    with endpoint.lock:
        received = list(endpoint.received)
    rows = summary_rows(collector.stats(), read_totals(service.store), received)
    return "\nsummary\n" + table(("figure", "value", "meaning"), rows, align="lrl")


# A demo summary row: a name of the shared vocabulary (or "endpoint: ..." / "latency ..."),
# its value, what it means.
Row = tuple[str, object, str]


def summary_rows(stats: Mapping[str, int], totals: Totals, received: list[Received]
                 ) -> list[Row]:
    """Each row is one figure of the shared vocabulary (collector.counters), from the SDK or
    from Redis, or a figure of the endpoint's, named as such."""
    events = [e for r in received for e in r.events]
    latencies = [
        r.at * 1000 - e["sent_ms"] for r in received for e in r.events
        if isinstance(e, dict) and "sent_ms" in e
    ]
    batches = len(received)
    sdk: list[Row] = [
        (C.ACCEPTED, stats[C.ACCEPTED], "events collect() took (SDK)"),
        (C.DROPPED_BUFFER_FULL, stats[C.DROPPED_BUFFER_FULL],
         "dropped: the SDK's buffer was full"),
        (C.DROPPED_AT_CLOSE, stats[C.DROPPED_AT_CLOSE], "dropped: not stored by close()"),
    ]
    store: list[Row] = [
        (name, totals.counter(name), meaning) for name, meaning in (
            (C.STORED, "events written to Redis"),
            (C.DELIVERED, "events the endpoint accepted, acknowledged"),
            (C.EVICTED, "events pushed out by a game's cap"),
            (C.STALE, "events older than max_age_seconds, never sent"),
            (C.DEAD_EVENTS, "events in dead-lettered batches"),
            (C.DEAD_BATCHES, "batches dead-lettered"),
            (C.BATCHES_DELIVERED, "batches acknowledged as delivered"),
        )
    ]
    store += [
        (Gauge.BUFFERED, totals.buffered, "events still waiting in Redis"),
        (Gauge.PENDING_EVENTS, totals.pending_events, "events in batches not finished"),
        (Gauge.UNACCOUNTED, totals.unaccounted, "stored events in none of these states"),
    ]
    endpoint: list[Row] = [
        ("endpoint: events", len(events), "events received, duplicates included"),
        ("endpoint: POSTs", batches, "requests answered 2xx"),
        ("endpoint: mean batch", f"{len(events) / batches:.1f}" if batches else "-",
         "events per POST"),
        ("endpoint: largest batch", max((len(r.events) for r in received), default=0),
         "events in the largest POST"),
        ("latency p50", f"{_percentile(latencies, 0.50):.0f} ms", "collect() to receipt"),
        ("latency p99", f"{_percentile(latencies, 0.99):.0f} ms", "collect() to receipt"),
    ]
    return [*sdk, *store, *endpoint]
