"""``telemetry-reporter demo``: the whole pipeline on a private server and a local endpoint."""

from __future__ import annotations

import itertools
import random
import threading
import time
from typing import TextIO

from collector import Collector
from collector.config import build_config, raw_settings
from reporter._accounting import read_totals
from reporter._config import ReporterConfig
from reporter._embedded import EmbeddedServer
from reporter._endpoint import LocalEndpoint
from reporter._service import ReporterService
from reporter._status import table

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
    totals = read_totals(service.store)
    events = endpoint.events()
    latencies = [
        r.at * 1000 - e["sent_ms"] for r in endpoint.received for e in r.events
        if isinstance(e, dict) and "sent_ms" in e
    ]
    batches = len(endpoint.received)
    stats = collector.stats()
    rows = [
        ("collected", stats["accepted"]),
        ("delivered", len(events)),
        ("evicted by cap", totals.counter("evicted")),
        ("stale", totals.counter("stale")),
        ("dead-lettered", totals.dead_events),
        ("dropped in SDK", stats["dropped_buffer_full"] + stats["dropped_at_close"]),
        ("still buffered", totals.buffered + totals.pending_events),
        ("batches", batches),
        ("mean batch size", f"{len(events) / batches:.1f}" if batches else "-"),
        ("largest batch", max((len(r.events) for r in endpoint.received), default=0)),
        ("latency p50", f"{_percentile(latencies, 0.50):.0f} ms"),
        ("latency p99", f"{_percentile(latencies, 0.99):.0f} ms"),
    ]
    return "\nsummary\n" + table(("", "value"), rows)
