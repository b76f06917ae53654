"""Scale figures: many active games, many registered games, a million buffered events, and
``status`` on 16,384 shards.

Parts (``--only`` runs one; each starts its own private server(s) on free loopback ports,
never the machine's Redis on 6379):

* ``trickle``: one collector process offers ``--rate`` events/s (10,000) over ``--games``
  (10,000) cold games, each a steady trickle, plus one hot game with ``--hot-share`` (20 %) of
  the traffic and its own pool, for ``--seconds`` (600); ``--reporters`` reporter processes
  (1) deliver to the bench endpoint (``bench/_fast_endpoint.py``, counting unique events per
  game).  Checks: every game's events delivered, collect-to-delivery p99 within
  ``linger_ms + 2 s``, reporter RSS at 20 % of the run (minute 2 of 10) and at the end within
  10 %.
* ``sweep``: ``--sweep-games`` (1,000 / 10,000 / 100,000) games registered; the sweep's reads
  (ring pages, then each listed game's length and head, every shard) timed with all of them
  holding events and with only ``--sweep-active`` (1,000) holding events; and the server time
  of un-registering a game (claim.lua on an empty buffer: SREM + ZREM) against the previous
  design's LREM over a ring list as long as a shard's.
* ``memory``: ``--memory-events`` (1,000,000) events over ``--memory-games`` games through
  collect.lua on one server and RPUSHed as plain lists on a second one started with it:
  ``used_memory`` growth per event on each; and what a shard keeps to answer repeats:
  ``--kept-writers`` (1,000) SDK writers with 16 unanswered writes each, bytes per remembered
  write and per writer.
* ``status``: ``telemetry-reporter status --no-shards`` (a real process) with
  ``--status-shards`` (16,384) shards and ``--status-games`` (10,000) games buffered; and the
  full form's read of a shard holding ``--status-dead`` (2,000) dead letters (Redis time of
  ``read_shard``, and a whole ``status`` read) against one holding none.

    .venv/bin/python -m bench.scale [--only PART] [--seconds 600] [--rate 10000] ... [--small]

``--small`` runs every part with a few hundred games and a few seconds of trickle: a check
that the script works (``tests/test_benches.py`` runs it), not a measurement.  Only "every
game's events delivered" then sets the exit status; the time, memory and RSS targets are
printed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from bench._fast_endpoint import FastEndpoint
from bench._harness import command_line, footer, header, parse, server_binary, start_server
from bench._pipeline_workload import our_raw
from bench._scale_checks import (
    memory_side_by_side,
    status_no_shards,
    status_with_dead,
    sweep_row,
    written_once_memory,
)
from bench._scale_trickle import HOT, rss_at, run_trickle
from collector.counters import Counter
from tests.support.servers import Server

PARTS = ("trickle", "sweep", "memory", "status")
# --small: every part, in seconds.
SMALL = {
    "seconds": 3.0,
    "warmup": 0.0,
    "rate": 500.0,
    "games": 100,
    "linger_ms": 500,
    "poll_ms": 100,
    "workers": 2,
    "cap": 5000,
    "sweep_games": "100,1000",
    "sweep_active": 50,
    "memory_events": 20_000,
    "memory_games": 20,
    "kept_writers": 20,
    "status_shards": 256,
    "status_games": 200,
    "status_runs": 1,
    "status_dead": 100,
}


@dataclass
class Check:
    name: str
    ok: bool
    target: bool = True  # a time, memory or RSS target; False: nothing may be lost

    def show(self) -> None:
        print(f"  {self.name:58} {verdict(self.ok)}")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def private_server() -> Server:
    return start_server(server_binary())


def trickle(args: argparse.Namespace) -> list[Check]:
    server = private_server()
    endpoint = FastEndpoint(per_game=True)
    try:
        reporter = {"poll_interval_ms": args.poll_ms, "workers": args.workers}
        raw = our_raw(
            server.url,
            endpoint.url,
            cap=args.cap,
            linger_ms=args.linger_ms,
            hot_games={HOT: args.hot_threads},
            reporter=reporter,
        )
        print(
            f"trickle: {args.rate:,.0f} events/s offered over {args.games:,} games + {HOT} "
            f"at {args.hot_share:.0%} ({args.hot_threads} threads), {args.warmup:g} s "
            f"warm-up + {args.seconds:g} s, "
            f"{args.reporters} reporter process(es); reporter: shards "
            f"{raw['redis']['shards']}, workers {args.workers}, linger_ms {args.linger_ms}, "
            f"poll_interval_ms {args.poll_ms}, other settings default",
            flush=True,
        )
        result = run_trickle(
            raw,
            endpoint,
            games=args.games,
            hot_share=args.hot_share,
            rate=args.rate,
            seconds=args.seconds,
            reporters=args.reporters,
            settle=args.linger_ms / 1000 + 120,
            warmup=args.warmup,
        )
    finally:
        endpoint.stop()
        server.cleanup()
    loads = [v for _, v in result.load]
    print(
        f"  collected {result.sent:,} in {result.seconds:.1f} s "
        f"({result.sent / result.seconds:,.0f}/s); SDK counters {result.collector_stats}"
    )
    print(
        f"  delivered {result.delivered:,} unique events ({result.duplicates:,} duplicates), "
        f"{result.games_expected - len(result.games_short):,} of {result.games_expected:,} "
        f"games complete; backlog gone {result.drain_after_s:.1f} s after the last collect"
    )
    for game, want, got in result.games_short[:5]:
        print(f"    short: {game} expected {want}, delivered {got}")
    print(
        f"  collect-to-delivery ms: p50 {result.p50_ms:,}, p99 {result.p99_ms:,}, max "
        f"{result.max_ms:,}; p99 after the {args.warmup:g} s warm-up "
        f"{result.p99_after_warmup_ms:,}; p99 by minute of delivery: "
        f"{', '.join(f'{p:,}' for p in result.p99_by_minute)}"
    )
    early_at = args.warmup + args.seconds * 0.2
    early, late = rss_at(result, early_at), result.rss[-1][1]
    print(
        f"  reporter RSS MiB at {early_at:.0f} s: {[k / 1024 for k in early]}, at the end: "
        f"{[round(k / 1024, 1) for k in late]}; reporter CPU s: "
        f"{[round(c, 1) for c in result.reporter_cpu]}"
    )
    print(
        f"  load average (1 min) during the run: min {min(loads):.1f}, median "
        f"{sorted(loads)[len(loads) // 2]:.1f}, max {max(loads):.1f}"
    )
    checks = [
        Check(
            "every game's events delivered",
            not result.games_short and result.delivered == result.collector_stats[Counter.STORED],
            target=False,
        ),
        Check(
            f"p99 <= linger + 2 s ({args.linger_ms + 2000:,} ms), whole run",
            result.p99_ms <= args.linger_ms + 2000,
        ),
        Check(
            f"p99 <= linger + 2 s ({args.linger_ms + 2000:,} ms), after the warm-up",
            result.p99_after_warmup_ms <= args.linger_ms + 2000,
        ),
        Check(
            "reporter RSS at the end within 10 % of 20 % past the warm-up",
            all(b <= a * 1.1 for a, b in zip(early, late, strict=True)),
        ),
    ]
    for check in checks:
        check.show()
    return checks


def sweep(args: argparse.Namespace) -> list[Check]:
    server = private_server()
    try:
        client = server.client()
        print(
            f"sweep: shards {args.sweep_shards}; {args.sweep_active:,} games with events in "
            "the 'few' column; times are the median of 5 rounds over every shard; "
            "un-register: server time of claim.lua on an empty game (SREM + ZREM), old LREM: "
            "LREM over a list as long as a shard's ring",
            flush=True,
        )
        print(
            f"  {'registered':>10} {'all active: s':>14} {'listed':>8} {'few active: s':>14} "
            f"{'listed':>8} {'un-register us':>15} {'old LREM us':>12}"
        )
        rows = []
        for n in args.sweep_games:
            row = sweep_row(client, server.url, n, args.sweep_active, args.sweep_shards)
            rows.append(row)
            unregister = f"{row.unregister_us:.1f}" if n > args.sweep_active else "-"
            print(
                f"  {n:>10,} {row.all_active_s:>14.4f} {row.all_active_listed:>8,} "
                f"{row.few_active_s:>14.4f} {row.few_active_listed:>8,} "
                f"{unregister:>15} {row.lrem_us:>12.1f}",
                flush=True,
            )
    finally:
        server.cleanup()
    few = [r.few_active_s for r in rows]
    check = Check(
        "sweep with few active flat (max <= 2x min) across registered", max(few) <= 2 * min(few)
    )
    check.show()
    return [check]


def memory(args: argparse.Namespace) -> list[Check]:
    project, plain = private_server(), private_server()
    try:
        result = memory_side_by_side(
            project.client(),
            project.url,
            plain.client(),
            args.memory_events,
            args.memory_games,
            args.sweep_shards,
        )
    finally:
        project.cleanup()
        plain.cleanup()
    ratio = result.project_bytes_per_event / result.plain_bytes_per_event
    print(
        f"memory: {result.events:,} events over {result.games:,} games, entries of "
        f"{result.entry_bytes:.0f} bytes on average; used_memory growth per event: project "
        f"{result.project_bytes_per_event:.1f} bytes, plain lists "
        f"{result.plain_bytes_per_event:.1f} bytes, ratio {ratio:.3f}"
    )
    check = Check("project within 1.1x of plain lists", ratio <= 1.1)
    check.show()
    server = private_server()
    try:
        kept = written_once_memory(server.url, args.kept_writers, 16)
    finally:
        server.cleanup()
    print(
        f"written-once memory: {kept.writers:,} writers with {kept.writes_each} writes "
        f"each in a shard: {kept.record_bytes:.1f} bytes per remembered write, "
        f"{kept.writer_bytes:.1f} bytes per writer"
    )
    return [check]


def status(args: argparse.Namespace) -> list[Check]:
    server = private_server()
    try:
        result = status_no_shards(
            server.client(), server.url, args.status_shards, args.status_games, args.status_runs
        )
    finally:
        server.cleanup()
    print(
        f"status --no-shards: {result.shards:,} shards, {result.games:,} games: "
        f"{', '.join(f'{s:.2f}' for s in result.seconds)} s ({result.lines} lines printed)"
    )
    check = Check("under 2 s", max(result.seconds) < 2)
    check.show()
    server = private_server()
    try:
        none, dead = (status_with_dead(server.url, n) for n in (0, args.status_dead))
    finally:
        server.cleanup()
    print(
        f"status with dead letters: read_shard of a shard holding {dead.dead:,} dead letters "
        f"{dead.server_ms:.3f} ms of Redis time (median of 20; {none.server_ms:.3f} ms "
        f"holding none); a full status read {dead.status_seconds * 1000:.1f} ms "
        f"({none.status_seconds * 1000:.1f} ms)"
    )
    return [check]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = command_line(__doc__)
    p.add_argument("--only", choices=PARTS, action="append", help="run only this part (repeatable)")
    p.add_argument(
        "--seconds", type=float, default=600.0, help="trickle duration after the warm-up (600)"
    )
    p.add_argument(
        "--warmup", type=float, default=60.0, help="trickle warm-up before it, whole minutes (60)"
    )
    p.add_argument("--rate", type=float, default=10_000, help="offered events/s (10000)")
    p.add_argument("--games", type=int, default=10_000, help="cold games (10000)")
    p.add_argument("--hot-share", type=float, default=0.2, help="hot game's share (0.2)")
    p.add_argument("--hot-threads", type=int, default=2, help="hot game's pool (2)")
    p.add_argument("--linger-ms", type=int, default=10_000, help="[reporter] linger_ms (10000)")
    p.add_argument("--poll-ms", type=int, default=500, help="[reporter] poll_interval_ms (500)")
    p.add_argument("--workers", type=int, default=4, help="[reporter] workers (4)")
    p.add_argument("--reporters", type=int, default=1, help="reporter processes (1)")
    p.add_argument("--cap", type=int, default=20_000, help="max_events_per_game (20000)")
    p.add_argument(
        "--sweep-games",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1_000, 10_000, 100_000],
        help="registered games (1000,10000,100000)",
    )
    p.add_argument("--sweep-active", type=int, default=1_000)
    p.add_argument("--sweep-shards", type=int, default=16, help="shards of sweep and memory (16)")
    p.add_argument("--memory-events", type=int, default=1_000_000)
    p.add_argument("--memory-games", type=int, default=1_000)
    p.add_argument(
        "--kept-writers",
        type=int,
        default=1_000,
        help="SDK writers remembered in a shard, 16 writes each (1000)",
    )
    p.add_argument("--status-shards", type=int, default=16_384)
    p.add_argument("--status-games", type=int, default=10_000)
    p.add_argument("--status-runs", type=int, default=3, help="status processes timed (3)")
    p.add_argument(
        "--status-dead",
        type=int,
        default=2_000,
        help="dead letters in one shard for status's reads (2000)",
    )
    return parse(p, argv, SMALL)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    parts = args.only or list(PARTS)
    header()
    run = {"trickle": trickle, "sweep": sweep, "memory": memory, "status": status}
    checks = [check for part in parts for check in run[part](args)]
    footer()
    return 0 if all(c.ok or (args.small and c.target) for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
