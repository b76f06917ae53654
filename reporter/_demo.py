"""``telemetry-reporter demo``: the whole pipeline on a private server and a local endpoint.

``--sink json`` (the default) posts to a local JSON ingest endpoint; ``--sink nppa`` reports
two games' logins and logouts to a local mock of the anti-addiction interface.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable
from typing import TextIO

from collector import Collector
from collector.config import build_config, raw_settings
from reporter._accounting import read_totals
from reporter._config import ReporterConfig
from reporter._demo_sinks import DemoSink, JsonDemo, NppaDemo
from reporter._demo_summary import summary_rows
from reporter._embedded import EmbeddedServer
from reporter._service import ReporterService
from reporter._tables import table

SINKS: dict[str, Callable[[], DemoSink]] = {"json": JsonDemo, "nppa": NppaDemo}


def demo_config(redis_url: str, sink: DemoSink) -> ReporterConfig:
    raw = raw_settings(ReporterConfig.default())
    raw["redis"].update(url=redis_url, shards=8)
    raw["reporter"].update(linger_ms=500, poll_interval_ms=50, workers=4,
                           hot_games=dict(sink.hot_games))
    raw["buffer"].update(max_events_per_game=20_000)
    sink.configure(raw)
    return build_config(raw, "<demo>", env={}, interpolate=False, cls=ReporterConfig)


def _traffic(collector: Collector, sink: DemoSink, stop: threading.Event) -> None:
    """Logins and logouts of simulated players, paced to the sink's rates per game."""
    sessions = itertools.count(1)
    started = time.monotonic()
    sent = dict.fromkeys(sink.rates, 0)
    while not stop.is_set():
        elapsed = time.monotonic() - started
        for game, rate in sink.rates.items():
            due = int(elapsed * rate) - sent[game]
            for _ in range(due):
                session = next(sessions)
                collector.collect(game, sink.event(session, random.randint(0, 1)))
            sent[game] += max(0, due)
        stop.wait(0.01)


def run_demo(seconds: float, out: TextIO, sink_kind: str = "json") -> int:
    sink = SINKS[sink_kind]()
    server = EmbeddedServer().start()
    sink.start()
    collector: Collector | None = None
    service: ReporterService | None = None
    try:
        config = demo_config(server.url, sink)
        collector = Collector(config=config)
        service = ReporterService(config)
        print(f"demo: valkey-server on {server.url}, {sink.describe()}", file=out)
        print(f"demo: {len(sink.rates)} games, {sum(sink.rates.values())} events/s for "
              f"{seconds:g} s", file=out)
        service.start()
        stop = threading.Event()
        traffic = threading.Thread(target=_traffic, args=(collector, sink, stop), daemon=True)
        traffic.start()
        started = time.monotonic()
        while (left := seconds - (time.monotonic() - started)) > 0:
            stop.wait(min(1.0, left))
            figures = sink.figures()
            print(f"  {time.monotonic() - started:5.1f}s  collected "
                  f"{collector.stats()['accepted']:>7}  delivered {figures.events:>7}  "
                  f"requests {figures.posts:>5}", file=out)
        stop.set()
        traffic.join()
        collector.flush(10)
        _drain(service, 15.0)
        service.stop()
        rows = summary_rows(collector.stats(), read_totals(service.store), sink.figures())
        print("\nsummary\n" + table(("figure", "value", "meaning"), rows, align="lrl"),
              file=out)
        return 0
    finally:
        if service is not None and not service.stop_event.is_set():
            service.stop(grace=0)
        if collector is not None:
            collector.close(timeout=1)
        sink.stop()
        server.stop()


def _drain(service: ReporterService, seconds: float) -> None:
    """Wait (up to ``seconds``) until nothing is buffered or pending in Redis."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        totals = read_totals(service.store)
        if totals.buffered == 0 and totals.pending_events == 0:
            return
        if service.stop_event.wait(0.1):
            return
