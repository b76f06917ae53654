"""``telemetry-reporter demo``: the whole pipeline on a private server and a local endpoint.

``--sink json`` (the default) posts to a local JSON ingest endpoint; ``--sink nppa`` reports
two games' logins and logouts to a local mock of the anti-addiction interface.  Either ends
with a verdict line (every event the SDK accepted in one end state, or what does not add up)
and two lines on what to do next.
"""

from __future__ import annotations

import itertools
import random
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from collector import Collector
from collector.config import build_config, raw_settings
from reporter._config import ReporterConfig
from reporter._demo.embedded import EmbeddedServer
from reporter._demo.sinks import DemoSink, JsonDemo, NppaDemo
from reporter._demo.summary import summary_rows, verdict
from reporter._exceptions import ReporterError
from reporter._monitoring.accounting import read_totals
from reporter._service.service import ReporterService
from reporter._sinks.registry import make_sink
from reporter._tables import table

SINKS: dict[str, Callable[[], DemoSink]] = {"json": JsonDemo, "nppa": NppaDemo}
EXIT_NOT_ACCOUNTED = 1  # the verdict: the events do not add up
EXIT_NO_SERVER = 2  # a set-up problem, like a config error: no server to start (what to install)


def demo_config(redis_url: str, sink: DemoSink) -> ReporterConfig:
    raw = raw_settings(ReporterConfig.default())
    raw["redis"].update(url=redis_url, shards=8)
    raw["reporter"].update(
        linger_ms=500, poll_interval_ms=50, workers=4, hot_games=dict(sink.hot_games)
    )
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


def run_demo(
    seconds: float, out: TextIO, sink_kind: str = "json", err: TextIO | None = None
) -> int:
    """Run the demo, print its progress, summary, verdict and next steps to ``out``.

    Exit code: 0 when every event is accounted for, 1 when they do not add up,
    ``EXIT_NO_SERVER`` (with the reason on ``err``) when no server could be started.
    """
    try:
        server = EmbeddedServer().start()
    except ReporterError as exc:
        print(f"telemetry-reporter demo: {exc}", file=err or sys.stderr)
        return EXIT_NO_SERVER
    try:
        sink = SINKS[sink_kind]()
        sink.start()
        try:
            print(f"demo: {server.name} on {server.url}, {sink.describe()}", file=out)
            accounted = _run(server.url, sink, seconds, out)
            next_steps = make_sink(demo_config(server.url, sink)).next_steps()
        finally:
            sink.stop()
    finally:
        server.stop()
    for line in next_steps:
        print(line, file=out)
    return 0 if accounted else EXIT_NOT_ACCOUNTED


def _run(redis_url: str, sink: DemoSink, seconds: float, out: TextIO) -> bool:
    """Traffic for ``seconds``, a drain, the summary and the verdict line: True when every
    event is accounted for."""
    collector: Collector | None = None
    service: ReporterService | None = None
    try:
        config = demo_config(redis_url, sink)
        collector = Collector(config=config)
        service = ReporterService(config)
        print(
            f"demo: {len(sink.rates)} games, {sum(sink.rates.values())} events/s for {seconds:g} s",
            file=out,
        )
        service.start()
        _traffic_for(seconds, collector, sink, out)
        collector.flush(10)
        _drain(service, 15.0)
        service.stop()
        stats, totals = collector.stats(), read_totals(service.store)
        rows = summary_rows(stats, totals, sink.figures())
        print("\nsummary\n" + table(("figure", "value", "meaning"), rows, align="lrl"), file=out)
        ok, line = verdict(stats, totals)
        print(f"\n{line}", file=out)
        return ok
    finally:
        if service is not None and not service.stop_event.is_set():
            service.stop(grace=0)
        if collector is not None:
            collector.close(timeout=1)


def _traffic_for(seconds: float, collector: Collector, sink: DemoSink, out: TextIO) -> None:
    """Simulated games for ``seconds``, with a progress line each second."""
    stop = threading.Event()
    traffic = threading.Thread(target=_traffic, args=(collector, sink, stop), daemon=True)
    traffic.start()
    started = time.monotonic()
    try:
        while (left := seconds - (time.monotonic() - started)) > 0:
            stop.wait(min(1.0, left))
            figures = sink.figures()
            print(
                f"  {time.monotonic() - started:5.1f}s  collected "
                f"{collector.stats()['accepted']:>7}  delivered {figures.events:>7}  "
                f"requests {figures.posts:>5}",
                file=out,
            )
    finally:
        stop.set()
        traffic.join()


def _drain(service: ReporterService, seconds: float) -> None:
    """Wait (up to ``seconds``) until nothing is buffered or pending in Redis."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        totals = read_totals(service.store)
        if totals.buffered == 0 and totals.pending_events == 0:
            return
        if service.stop_event.wait(0.1):
            return
