"""Benchmark the anti-addiction sender's use of the interface's rate, and who goes first.

Two phases, each with a private Redis (on a free loopback port), reporter processes
(``python -m reporter run``) and the project's mock of the interface
(``reporter._demo.nppa_mock``: 10 requests/s per app id, a 60 s throttle answering 1006 to
any excess, and a count of every request in a sliding second).

- ``rate``: a backlog of ``--items`` (12,000: 94 requests of at most 128 items) drained by
  1 and by 3 reporters sharing the app id.  Prints items/s (from the first accepted request
  to the last), mean items per request, the most requests the mock saw in any sliding
  second, and the 1006 answers.  Target: 1,200 items/s (97 % of the 9.6 requests/s the
  reporters allow themselves, in full requests of 128), never more than 10 requests in a
  second, no 1006.
- ``trickle``: a busy game offered ``--busy-rate`` items/s on top of a backlog, next to
  ``--small-games`` (200) games that each report one event every ``--small-period`` (60 s),
  for ``--seconds`` (150), then the rest drained.  That is below the capacity in requests
  (5 + 3.3 of 9.6 a second).  Prints the p50/p99/max age at the interface of the small games'
  items (the mock's arrival time less ``ot``) and of the busy game's, and the items never
  delivered.  Target: none undelivered, the small games' p99 under 60 s.

    .venv/bin/python -m bench.nppa_rate [--phase rate trickle] [--reporters 1 3]
        [--items 12000] [--busy-rate 640] [--small-games 200] [--small-period 60]
        [--seconds 150] [--small]

``--small`` runs both phases with a few requests' worth of events, in seconds: a check that
the script works (``tests/test_benches.py`` runs it), not a measurement.  The exit status is
0 when every item was accepted (and, without ``--small``, every target was met).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path

from bench._harness import (
    command_line,
    exit_status,
    footer,
    header,
    parse,
    reporter_process,
    server_binary,
    start_server,
)
from collector import Collector, nppa
from collector.config import build_config, raw_settings
from reporter._config import ReporterConfig
from reporter._demo.nppa_mock import NppaEndpoint

APP_ID = "bench-app"
PHASES = ("rate", "trickle")
RATE_GAMES = 4
BUSY = "busy"
BUSY_BACKLOG = 2_560  # 20 full requests waiting when the trickle starts
SMALL = {
    "reporters": [2],
    "items": 768,
    "small_games": 10,
    "small_period": 2.0,
    "seconds": 4.0,
    "busy_rate": 256.0,
}
TARGET_ITEMS_PER_S = 1_200
TARGET_SMALL_P99_S = 60.0


@dataclass
class Drained:
    items: int
    seconds: float
    requests: int
    busiest: int
    throttled: int


def config_text(
    redis_url: str, endpoint: NppaEndpoint, secret: str, games: Sequence[str], linger_ms: int
) -> str:
    lines = [
        f'[redis]\nurl = "{redis_url}"\nshards = 16',
        "[buffer]",
        "max_events_per_game = 100000",
        "[reporter]",
        f"linger_ms = {linger_ms}",
        "poll_interval_ms = 20",
        '[sink]\nkind = "nppa"',
        f'[nppa]\nbase_url = "{endpoint.url}"\napp_id = "{APP_ID}"\nsecret_key = "{secret}"',
    ]
    lines += [f'[games."{game}"]\nbiz_id = "{biz(game)}"' for game in games]
    return "\n".join(lines) + "\n"


def biz(game: str) -> str:
    return f"biz-{game}"


def collector_for(redis_url: str) -> Collector:
    raw = raw_settings(ReporterConfig())
    raw["redis"].update(url=redis_url, shards=16)
    raw["buffer"].update(max_events_per_game=100_000)
    return Collector(config=build_config(raw, "<bench>", env={}, interpolate=False))


def collect(collector: Collector, game: str, count: int, serial: int) -> int:
    now = int(time.time())
    for i in range(serial, serial + count):
        make = nppa.login if i % 2 == 0 else nppa.logout
        collector.collect(game, make(si=f"{game[:16]}-{i // 2}", ot=now, pi="1" * 38))
    return serial + count


class Reporters:
    """``count`` reporter processes on one config; stopped (SIGTERM) on leaving."""

    def __init__(self, tmp: Path, config: Path, count: int) -> None:
        self._procs: list[subprocess.Popen[bytes]] = [
            reporter_process(config, tmp / f"reporter{i}.log") for i in range(count)
        ]

    def __enter__(self) -> Reporters:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            proc.terminate()
        for proc in self._procs:
            proc.wait(30)


def wait_accepted(endpoint: NppaEndpoint, total: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with endpoint.lock:
            if len(endpoint.accepted) >= total:
                return
        time.sleep(0.2)


def drain(binary: str, reporters: int, items: int) -> Drained:
    secret = os.urandom(16).hex()
    games = [f"game-{i}" for i in range(RATE_GAMES)]
    server = start_server(binary)
    tmp = Path(tempfile.mkdtemp(prefix="telemetry-bench-nppa-rate-"))
    try:
        with NppaEndpoint(
            app_id=APP_ID, secret_key=secret, biz_ids=[biz(g) for g in games]
        ) as endpoint:
            path = tmp / "nppa.toml"
            path.write_text(config_text(server.url, endpoint, secret, games, 1000))
            collector = collector_for(server.url)
            for i, game in enumerate(games):
                collect(collector, game, items // RATE_GAMES + (i < items % RATE_GAMES), 0)
            assert collector.flush(timeout=60)
            collector.close()
            with Reporters(tmp, path, reporters):
                wait_accepted(endpoint, items, 60 + 3 * items / 1000)
            with endpoint.lock:
                requests = list(endpoint.requests)
                accepted = len(endpoint.accepted)
            busiest = endpoint.busiest_second
    finally:
        server.cleanup()
    taken = [r.at for r in requests if r.errcode == 0]
    seconds = max(max(taken) - min(taken), 1e-6) if taken else 1e-6
    return Drained(
        accepted, seconds, len(taken), busiest, sum(1 for r in requests if r.errcode == 1006)
    )


@dataclass
class Trickled:
    offered: int
    accepted: int
    small_ages: list[float]
    busy_ages: list[float]
    busiest: int
    throttled: int
    requests_per_second: float


def offer(
    redis_url: str,
    busy_rate: float,
    small: Sequence[str],
    period: float,
    seconds: float,
    offered: Synchronized[int],
) -> None:
    """Collect the busy game's items at ``busy_rate`` a second and each small game's one item
    every ``period`` seconds (each at its own phase), for ``seconds``; ``offered`` counts
    them.  Run in a process of its own, so that the mock's arrival times (in the bench's
    process) do not wait for the collector's work."""
    collector = collector_for(redis_url)
    serial: dict[str, int] = {}

    def add(game: str, count: int) -> None:
        serial[game] = collect(collector, game, count, serial.get(game, 0))
        offered.value += count

    rng = random.Random(7)
    next_of = {game: rng.uniform(0, period) for game in small}
    start = time.monotonic()
    busy_done = 0
    while (elapsed := time.monotonic() - start) < seconds:
        due = int(elapsed * busy_rate) - busy_done
        if due > 0:
            add(BUSY, due)
            busy_done += due
        for game, at in next_of.items():
            if at <= elapsed:
                add(game, 1)
                next_of[game] = at + period
        time.sleep(0.05)
    assert collector.flush(timeout=60)
    collector.close()


def trickle(
    binary: str, reporters: int, busy_rate: float, small_games: int, period: float, seconds: float
) -> Trickled:
    secret = os.urandom(16).hex()
    small = [f"small-{i:03d}" for i in range(small_games)]
    games = [BUSY, *small]
    server = start_server(binary)
    tmp = Path(tempfile.mkdtemp(prefix="telemetry-bench-nppa-trickle-"))
    try:
        with NppaEndpoint(
            app_id=APP_ID, secret_key=secret, biz_ids=[biz(g) for g in games]
        ) as endpoint:
            path = tmp / "nppa.toml"
            path.write_text(config_text(server.url, endpoint, secret, games, 1000))
            collector = collector_for(server.url)
            collect(collector, BUSY, BUSY_BACKLOG, 1_000_000)
            assert collector.flush(timeout=60)
            collector.close()
            spawn = multiprocessing.get_context("spawn")
            offered = spawn.Value("q", BUSY_BACKLOG)
            with Reporters(tmp, path, reporters):
                producer = spawn.Process(
                    target=offer, args=(server.url, busy_rate, small, period, seconds, offered)
                )
                producer.start()
                producer.join()
                # what is left goes within the freshness window, or never
                wait_accepted(endpoint, offered.value, 200)
            with endpoint.lock:
                accepted = list(endpoint.accepted)
                requests = list(endpoint.requests)
            busiest = endpoint.busiest_second
    finally:
        server.cleanup()
    small_ages = [a.at - a.item["ot"] for a in accepted if a.biz_id != biz(BUSY)]
    busy_ages = [a.at - a.item["ot"] for a in accepted if a.biz_id == biz(BUSY)]
    taken = [r.at for r in requests if r.errcode == 0]
    span = max(max(taken) - min(taken), 1e-6) if taken else 1e-6
    return Trickled(
        offered.value,
        len(accepted),
        small_ages,
        busy_ages,
        busiest,
        sum(1 for r in requests if r.errcode == 1006),
        len(taken) / span,
    )


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: Sequence[str] | None = None) -> int:
    ap = command_line(__doc__)
    ap.add_argument("--phase", choices=PHASES, nargs="+", default=list(PHASES))
    ap.add_argument(
        "--reporters",
        type=int,
        nargs="+",
        default=[1, 3],
        help="reporter processes of the rate phase (1 3); the trickle phase runs with the last",
    )
    ap.add_argument("--items", type=int, default=12_000, help="backlog of the rate phase")
    ap.add_argument(
        "--busy-rate",
        type=float,
        default=640.0,
        help="items/s offered by the busy game (640: 5 full requests/s)",
    )
    ap.add_argument("--small-games", type=int, default=200)
    ap.add_argument(
        "--small-period",
        type=float,
        default=60.0,
        help="seconds between two items of one small game (60)",
    )
    ap.add_argument(
        "--seconds", type=float, default=150.0, help="how long the trickle is offered (150)"
    )
    args = parse(ap, argv, SMALL)
    binary = server_binary()
    everything = targets = True
    header("the interface's rate (10 requests/s per app id) used by reporters sharing it")
    if "rate" in args.phase:
        print(f"rate: a backlog of {args.items:,} items")
        print(
            f"{'reporters':>9} {'items/s':>9} {'items/request':>14} "
            f"{'max requests in a sliding second':>33} {'1006':>5}"
        )
        for n in args.reporters:
            d = drain(binary, n, args.items)
            print(
                f"{n:>9} {d.items / d.seconds:>9,.0f} {d.items / max(d.requests, 1):>14.1f} "
                f"{d.busiest:>33} {d.throttled:>5}",
                flush=True,
            )
            everything &= d.items == args.items
            targets &= (
                d.items / d.seconds >= TARGET_ITEMS_PER_S and d.busiest <= 10 and not d.throttled
            )
    if "trickle" in args.phase:
        n = args.reporters[-1]
        print(
            f"trickle: busy game {args.busy_rate:g} items/s on a backlog of {BUSY_BACKLOG:,}, "
            f"{args.small_games} small games one item per {args.small_period:g} s each, "
            f"{args.seconds:g} s, {n} reporters"
        )
        t = trickle(binary, n, args.busy_rate, args.small_games, args.small_period, args.seconds)
        p99 = percentile(t.small_ages, 0.99)
        print(
            f"  small games' age at the interface s: p50 {percentile(t.small_ages, 0.5):.1f} "
            f"p99 {p99:.1f} max {max(t.small_ages, default=float('nan')):.1f}"
        )
        print(
            f"  busy game's age at the interface s: p50 {percentile(t.busy_ages, 0.5):.1f} "
            f"p99 {percentile(t.busy_ages, 0.99):.1f}"
        )
        print(
            f"  offered {t.offered:,} accepted {t.accepted:,} never delivered "
            f"{t.offered - t.accepted:,}; requests/s {t.requests_per_second:.2f}; "
            f"max requests in a sliding second {t.busiest}; 1006 {t.throttled}"
        )
        everything &= t.accepted == t.offered
        targets &= p99 < TARGET_SMALL_P99_S and t.busiest <= 10 and not t.throttled
    print(
        "PASS"
        if targets
        else f"FAIL: under {TARGET_ITEMS_PER_S:,} items/s, over 10 requests "
        f"in a second, a 1006, or small games' p99 age over {TARGET_SMALL_P99_S:g} s"
    )
    if not everything:
        print("FAIL: not every item was accepted")
    footer()
    return exit_status(kept=everything, targets=targets, small=args.small)


if __name__ == "__main__":
    sys.exit(main())
