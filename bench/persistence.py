"""What a Redis crash loses, per persistence setting: steady traffic, Redis SIGKILLed and
started again, then everything drained and counted.

    .venv/bin/python -m bench.persistence [--rate 2000] [--seconds 10] [--kill-at 5]
                                          [--shard-lease-seconds 10] [--small]

For each setting (no persistence; append-only file with fsync every second; with fsync
always) one private server on a free loopback port, a reporter (``ReporterService``) draining
to a local endpoint, and a producer thread calling ``collect()`` at ``--rate`` events/s with
unique ids.  At ``--kill-at`` seconds the server is SIGKILLed and started again at once on
the same port and directory.  At the end the producer flushes, the reporter drains, and the
figures are: events ``collect()`` accepted, distinct events the endpoint received, the
difference (lost), what the reporter's reset detection said (``store_resets`` and the events
it reported lost) and the SDK's own ``store_resets``.

A SIGKILL of the process is not a machine crash: what Redis wrote to its append-only file is
in the operating system's page cache and survives the process, so fsync every second and
always lose the same here.  fsync every second bounds the loss to about a second of writes
on a crash of the machine itself (power, kernel), which this script cannot cause.

``--small`` runs every setting with a second or two of traffic and a 1 s shard lease (the
reporter notices a reset at its next sweep of a shard it owns): a check that the script works
(``tests/test_benches.py`` runs it), not a measurement.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from bench._harness import command_line, footer, header, parse, server_binary, start_server
from collector import Collector
from collector.config import build_config, raw_settings
from collector.counters import Counter as C
from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint
from reporter._monitoring.accounting import read_totals
from reporter._service.service import ReporterService

GAMES = [f"game-{i:02d}" for i in range(20)]
SETTINGS = {
    "none": ["--appendonly", "no", "--save", ""],
    "aof everysec": ["--appendonly", "yes", "--appendfsync", "everysec"],
    "aof always": ["--appendonly", "yes", "--appendfsync", "always"],
}
# --small: every setting, in seconds.
SMALL = {"rate": 1000, "seconds": 1.0, "kill_at": 0.5, "shard_lease_seconds": 1.0}


class LostLines(logging.Handler):
    """Keeps the reporter's reset reports ("about N events lost")."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lost: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = re.search(r"about (\d+) events lost", record.getMessage())
        if found:
            self.lost.append(int(found.group(1)))


def config_for(url: str, sink: str, shard_lease_seconds: float) -> ReporterConfig:
    raw = raw_settings(ReporterConfig())
    raw["redis"].update(url=url, shards=4, socket_timeout_seconds=0.5, connect_timeout_seconds=0.5)
    raw["reporter"].update(shard_lease_seconds=shard_lease_seconds)
    raw["buffer"].update(max_events_per_game=1_000_000)
    raw["collector"].update(retry_max_delay_ms=200)
    raw["sink"].update(url=sink)
    return build_config(raw, "bench", env={}, interpolate=False, cls=ReporterConfig)


def produce(collector: Collector, rate: int, seconds: float) -> None:
    sent, started, pause = 0, time.monotonic(), threading.Event()
    while (elapsed := time.monotonic() - started) < seconds:
        for _ in range(int(elapsed * rate) - sent):
            collector.collect(GAMES[sent % len(GAMES)], {"id": sent})
            sent += 1
        pause.wait(0.005)


def drained(service: ReporterService) -> bool:
    summary = read_totals(service.store).summary()
    return not (summary["buffered"] or summary["pending_events"])


def run(name: str, binary: str, args: argparse.Namespace) -> dict[str, object]:
    server = start_server(binary, SETTINGS[name])
    endpoint = LocalEndpoint().start()
    lines = LostLines()
    logging.getLogger("reporter").addHandler(lines)
    config = config_for(server.url, endpoint.url, args.shard_lease_seconds)
    service = ReporterService(config)
    collector = Collector(config=config)
    try:
        service.start()
        producer = threading.Thread(target=produce, args=(collector, args.rate, args.seconds))
        producer.start()
        time.sleep(args.kill_at)
        server.stop()  # SIGKILL
        server.start()
        producer.join()
        collector.flush(timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not drained(service):
            time.sleep(0.2)
        time.sleep(2 * config.reporter.shard_lease_seconds)  # let resets be reported
        stats = collector.stats()
        received = {e["id"] for e in endpoint.events()}
        dropped = stats[C.DROPPED_BUFFER_FULL] + stats[C.DROPPED_AT_CLOSE]
        return {
            "setting": name,
            "accepted": stats[C.ACCEPTED],
            "delivered": len(received),
            "lost": stats[C.ACCEPTED] - len(received) - dropped,
            "reporter resets": service.tally.snapshot().get(C.STORE_RESETS, 0),
            "reported lost": sum(lines.lost),
            "sdk resets": stats[C.STORE_RESETS],
        }
    finally:
        logging.getLogger("reporter").removeHandler(lines)
        collector.close(timeout=5)
        service.stop(grace=0)
        service.store.close()
        endpoint.stop()
        server.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line(__doc__)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--kill-at", type=float, default=5.0)
    parser.add_argument(
        "--shard-lease-seconds",
        type=float,
        default=10.0,
        help="[reporter] shard_lease_seconds (10, the default)",
    )
    args = parse(parser, argv, SMALL)
    binary = server_binary()
    header(
        f"{args.rate} events/s for {args.seconds:g} s, Redis SIGKILLed and restarted at "
        f"{args.kill_at:g} s ({Path(binary).name})"
    )
    for name in SETTINGS:
        row = run(name, binary, args)
        print("  " + ", ".join(f"{k}: {v}" for k, v in row.items()), flush=True)
    footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
