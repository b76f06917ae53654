"""Soak run: steady traffic through server restarts, endpoint outages and reporter kills.

    make soak                      # about 10 minutes
    .venv/bin/python -m bench.soak --seconds 120 --rate 5000   # a quicker pass
    .venv/bin/python -m bench.soak --small     # every step of the schedule in seconds

One producer process calls ``collect()`` at ``--rate`` events/s, two reporter processes
(``python -m reporter run``) drain to a local endpoint in this process, and a schedule
restarts the Redis server (SIGKILL; append-only file with fsync always, so acknowledged
writes survive), fails the endpoint with 503 for a while, and SIGKILLs a reporter. At the end
everything is drained and the counts are reconciled: every event the producer's collect()
accepted was received by the endpoint or is counted as dropped somewhere.

``--small`` runs the whole schedule with outages of a second: a check that the script works
(``tests/test_benches.py`` runs it), not a soak; it still fails unless the counts reconcile.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from bench._harness import (
    command_line,
    footer,
    header,
    module_process,
    parse,
    reporter_process,
    server_binary,
    start_server,
)
from collector import Collector
from collector.counters import Counter
from collector.store import KeySchema, SingleServer, Store
from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint
from reporter._monitoring.accounting import read_totals
from tests.support.servers import Server

GAMES = [f"game-{i:02d}" for i in range(20)]
PRODUCE = "--produce"
# --small: the whole schedule, in seconds.
SMALL = {"seconds": 6.0, "rate": 1000, "outage_seconds": 1.0, "reporter_down_seconds": 0.5}


def produce(url: str, rate: int, seconds: float, out: str) -> None:
    """Producer process: collect ``rate`` events/s with unique ids, then report stats."""
    collector = Collector(
        url=url,
        socket_timeout_seconds=0.5,
        connect_timeout_seconds=0.5,
        retry_max_delay_ms=500,
        max_events_per_game=200_000,
        shards=8,
    )
    sent = 0
    started = time.monotonic()
    stop = threading.Event()
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(elapsed * rate) - sent
        for _ in range(due):
            collector.collect(GAMES[sent % len(GAMES)], {"id": sent, "bt": sent % 2})
            sent += 1
        stop.wait(0.005)
    collector.flush(60)
    collector.close(timeout=60)
    Path(out).write_text(json.dumps(collector.stats()))


def write_config(path: Path, redis_url: str, sink_url: str) -> None:
    path.write_text(f"""
[redis]
url = "{redis_url}"
shards = 8
socket_timeout_seconds = 1.0
connect_timeout_seconds = 0.5
[buffer]
max_events_per_game = 200000
[reporter]
linger_ms = 500
poll_interval_ms = 50
lease_seconds = 5.0
shard_lease_seconds = 3.0
grace_seconds = 5.0
[sink]
url = "{sink_url}"
timeout_seconds = 2.0
[retry]
initial_delay_ms = 200
max_delay_ms = 5000
max_attempts = 1000
""")


class Outage:
    """The endpoint's failure switch."""

    def __init__(self) -> None:
        self.failing = False
        self.refused = 0

    def respond(self, _: int, __: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        if self.failing:
            self.refused += 1
            return 503, {"Retry-After": "1"}, b'{"error":"maintenance"}'
        return 200, {}, b"{}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = command_line(__doc__)
    ap.add_argument("--seconds", type=float, default=540.0, help="traffic duration (540)")
    ap.add_argument("--rate", type=int, default=10_000, help="events per second (10000)")
    ap.add_argument(
        "--outage-seconds",
        type=float,
        default=30.0,
        help="how long the Redis server is down, and the endpoint failing (30)",
    )
    ap.add_argument(
        "--reporter-down-seconds",
        type=float,
        default=5.0,
        help="how long the SIGKILLed reporter stays down (5)",
    )
    args = parse(ap, argv, SMALL)
    header(
        f"{args.rate} events/s for {args.seconds:g} s; outages of {args.outage_seconds:g} s, "
        f"a reporter down {args.reporter_down_seconds:g} s"
    )
    server = start_server(server_binary(), ["--appendonly", "yes", "--appendfsync", "always"])
    outage = Outage()
    endpoint = LocalEndpoint(outage.respond).start()
    tmp = Path(tempfile.mkdtemp(prefix="telemetry-soak-"))
    config = tmp / "soak.toml"
    write_config(config, server.url, endpoint.url)
    stats_file = tmp / "producer.json"
    t0 = time.monotonic()

    def say(msg: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f}s] {msg}", flush=True)

    reporters = [reporter_process(config, tmp / f"reporter{i}.log") for i in range(2)]
    producer = module_process(
        "bench.soak", PRODUCE, server.url, str(args.rate), str(args.seconds), str(stats_file)
    )
    s, off, down = args.seconds, args.outage_seconds, args.reporter_down_seconds
    schedule = [
        (0.2 * s, f"kill the Redis server (SIGKILL) for {off:g} s", "redis_down"),
        (0.2 * s + off, "start the Redis server again", "redis_up"),
        (0.45 * s, f"endpoint outage: 503 for {off:g} s", "sink_down"),
        (0.45 * s + off, "endpoint back", "sink_up"),
        (0.7 * s, "SIGKILL reporter 0", "kill_reporter"),
        (0.7 * s + down, "start reporter 0 again", "start_reporter"),
    ]
    try:
        for when, what, action in schedule:
            time.sleep(max(0.0, when - (time.monotonic() - t0)))
            say(what)
            act(action, server, outage, reporters, config, tmp)
        producer.wait()
        say("traffic done; draining")
        status = reconcile(server, endpoint, reporters, stats_file, outage, say)
        footer()
        return status
    finally:
        for proc in reporters:
            if proc.poll() is None:
                proc.kill()
        if producer.poll() is None:
            producer.kill()
        endpoint.stop()
        server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def act(
    action: str,
    server: Server,
    outage: Outage,
    reporters: list[subprocess.Popen[bytes]],
    config: Path,
    tmp: Path,
) -> None:
    if action == "redis_down":
        server.stop()
    elif action == "redis_up":
        server.start()
    elif action in ("sink_down", "sink_up"):
        outage.failing = action == "sink_down"
    elif action == "kill_reporter":
        reporters[0].send_signal(signal.SIGKILL)
        reporters[0].wait()
    else:
        reporters[0] = reporter_process(config, tmp / "reporter0.log")


def reconcile(
    server: Server,
    endpoint: LocalEndpoint,
    reporters: list[subprocess.Popen[bytes]],
    stats_file: Path,
    outage: Outage,
    say: Any,
) -> int:
    client = redis.Redis.from_url(server.url)
    schema = KeySchema(ReporterConfig().redis.key_prefix, 8)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        totals = read_totals(Store(SingleServer(client), schema))
        if totals.buffered == 0 and totals.pending_events == 0:
            break
        time.sleep(1)
    for proc in reporters:
        proc.send_signal(signal.SIGTERM)
    codes = [proc.wait(30) for proc in reporters]
    totals = read_totals(Store(SingleServer(client), schema))
    produced = json.loads(stats_file.read_text())
    ids = [e["id"] for e in endpoint.events()]
    distinct = len(set(ids))
    c = totals.counter
    counted_drops = (
        produced[Counter.DROPPED_BUFFER_FULL]
        + produced[Counter.DROPPED_AT_CLOSE]
        + c(Counter.EVICTED)
        + c(Counter.STALE)
        + totals.dead_now
    )
    rows = {
        "accepted by collect()": produced[Counter.ACCEPTED],
        "SDK dropped (buffer full + at close)": produced[Counter.DROPPED_BUFFER_FULL]
        + produced[Counter.DROPPED_AT_CLOSE],
        "SDK backend errors (retried)": produced[Counter.BACKEND_ERRORS],
        "stored (Redis counter)": c(Counter.STORED),
        "evicted by cap": c(Counter.EVICTED),
        "stale": c(Counter.STALE),
        "dead-lettered": totals.dead_now,
        "delivered (acked)": c(Counter.DELIVERED),
        "received by endpoint": len(ids),
        "received, distinct ids": distinct,
        "duplicates received": len(ids) - distinct,
        "requests refused during outage": outage.refused,
        "batches retried / reaped": f"{c(Counter.BATCHES_RETRIED)} / {c(Counter.BATCHES_REAPED)}",
        "still buffered or pending": totals.buffered + totals.pending_events,
        "Redis unaccounted": totals.unaccounted,
        "reporter exit codes (SIGTERM)": codes,
    }
    width = max(len(k) for k in rows)
    for name, value in rows.items():
        print(f"  {name:<{width}}  {value}")
    missing = produced[Counter.ACCEPTED] - distinct - counted_drops
    ok = missing <= 0 and totals.unaccounted == 0 and codes == [0, 0]
    say(
        f"accepted - distinct received - counted drops = {missing}: "
        + ("RECONCILED" if ok else "NOT RECONCILED")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == [PRODUCE]:  # the producer process this script starts
        produce(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
        sys.exit(0)
    sys.exit(main())
