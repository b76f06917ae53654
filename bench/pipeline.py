"""Benchmark the whole pipeline: drain+POST rate, end-to-end rate, collect-to-delivery latency.

Everything runs against a private server started on a free loopback port (never the machine's
Redis on 6379) and a fast local ingest endpoint, each part in its own process so no two share
a GIL:

* endpoint: an asyncio HTTP/1.1 keep-alive server (``bench/_fast_endpoint.py``).  It parses
  Content-Length, decodes each body with orjson, counts events, drops duplicate batch ids
  (counted) and keeps a histogram of ``receive time - event["t"]`` in ms.  The project's
  ``reporter._demo.endpoint.LocalEndpoint`` (ThreadingHTTPServer) is measured once for comparison
  ("endpoint capacity"); it is too slow to measure 100k events/s.
* reporter: ``ReporterService`` built with ``build_config(raw_settings(ReporterConfig()), ...)``
  in a child process; the reference design's drain loop in a child process for the baseline.
* collector: ``Collector.collect()`` in a child process, paced to ``--rate``; the reference
  design's per-event script call for the baseline.

Phases (each for ours, then the baseline):

1. drain+POST: pre-load ``--events`` events across ``--games`` games (a whole number of
   batches per game, cap large enough that nothing is evicted), then start the reporter and
   time from ``start()`` until the endpoint has the last event.
2. end-to-end: the collector process offers ``--rate`` events/s across ``--e2e-games`` games
   (one hot game with ``--hot-share`` of the traffic and its own pool) for ``--seconds``; the
   reporter runs in another process.  Afterwards it waits for the backlog to drain and checks
   collected = delivered + counted drops + still buffered (``reporter._monitoring.accounting``).
3. latency: p50/p99/max of receive time - collect time over every delivered event of phase 2.

The baseline (the reference design, in ``bench/_baseline.py``; it is not project code): a
per-event Lua script (RPUSH, LTRIM to the cap, SADD into a registry set) called in the collecting
thread, and one thread that loops over the registry doing LRANGE 0 127 + LTRIM 128 -1 per game
(one MULTI/EXEC round trip) and one httpx POST per drained batch.

    .venv/bin/python -m bench.pipeline [--seconds 60] [--rate 50000] [--events 300000]
        [--server redis|valkey] [--skip-baseline] [--rounds N] [--profile DIR] [--small]

``--rounds N`` runs phase 1 N times, ours and the baseline each time, the order alternating
(ours first in odd rounds): on a shared host whose load drifts, one pair's ratio says little.
It prints every round's ratio and their median; the table shows the round with the median
ratio.

``--small`` runs every phase, ours and the baseline, in seconds with tiny sizes: a check that
the script works (``tests/test_benches.py`` runs it), not a measurement.

This file is the entry point (arguments, setup, running the phases, printing); the parts are
private modules beside it: ``_pipeline_workload`` (events, pacing, the project config),
``_fast_endpoint``, ``_baseline``, ``_pipeline_children`` (the reporter and collector
processes), ``_pipeline_phases`` (running and reading each phase) and ``_pipeline_report``
(results, the table, the checks, profile summaries).
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

import httpx
import orjson
import redis

from bench._fast_endpoint import (
    FastEndpoint,
    endpoint_capacity,
    local_endpoint_capacity,
)
from bench._harness import (
    command_line,
    describe_server,
    footer,
    header,
    parse,
    server_binary,
    start_server,
)
from bench._pipeline_phases import PY_SPY, Context, run_drain, run_e2e
from bench._pipeline_report import (
    DrainResult,
    E2EResult,
    Row,
    drain_rows,
    e2e_rows,
    median_pair,
    print_checks,
    print_rounds,
    print_table,
    summarise_profile,
)
from bench._pipeline_workload import HOT_GAME, HOT_THREADS, our_raw
from reporter._config import ReporterConfig

# --small: every phase, ours and the baseline (the drain twice, the order alternating), in
# about 30 s.
SMALL = {
    "seconds": 2.0,
    "rate": 2000.0,
    "events": 2560,
    "games": 4,
    "e2e_games": 8,
    "cap": 5000,
    "linger_ms": 200,
    "probe_seconds": 0.2,
    "rounds": 2,
}


# -- setup ----------------------------------------------------------------------------------------


def print_setup(ctx: Context) -> None:
    args = ctx.args
    probe = args.probe_seconds
    hx = endpoint_capacity(ctx.endpoint.url, "httpx", probe)
    std = endpoint_capacity(ctx.endpoint.url, "http.client", probe)
    print(
        f"endpoint, one client thread, 128 events/POST: bench asyncio endpoint "
        f"{hx.events_per_s:,.0f} events/s with httpx ({hx.client_cpu_us_per_post:,.0f} us "
        f"client CPU/POST), {std.events_per_s:,.0f} with http.client "
        f"({std.client_cpu_us_per_post:,.0f} us); reporter._demo.endpoint.LocalEndpoint "
        f"{local_endpoint_capacity(probe):,.0f} events/s with httpx"
    )
    ctx.endpoint.reset()
    r = our_raw(
        "", "", cap=0, linger_ms=args.linger_ms, hot_games={}, reporter=ctx.reporter_overrides
    )["reporter"]
    shards = ReporterConfig().redis.shards
    print(
        f"reporter: shards {shards}, workers {r['workers']}, max_batches_per_claim "
        f"{r['max_batches_per_claim']}, poll_interval_ms {r['poll_interval_ms']}, linger_ms "
        f"{r['linger_ms']}, other settings default; e2e: {args.rate:,.0f} events/s offered "
        f"over {args.e2e_games} games, {HOT_GAME} {args.hot_share:.0%} with {HOT_THREADS} "
        f"threads, max_events_per_game {args.cap:,}"
    )


def describe(ctx: Context) -> str:
    return (
        f"server: {describe_server(ctx.server)}\nclient: redis-py {redis.__version__}, httpx "
        f"{httpx.__version__}, orjson {orjson.__version__}"
    )


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = command_line(__doc__, server_option=True)
    p.add_argument("--seconds", type=float, default=60.0, help="end-to-end duration (60)")
    p.add_argument("--rate", type=float, default=50_000, help="offered events/s (50000)")
    p.add_argument("--e2e-games", type=int, default=50, help="games in the e2e run (50)")
    p.add_argument(
        "--hot-share",
        type=float,
        default=0.2,
        help=f"share of the e2e traffic for {HOT_GAME}, which gets "
        f"{HOT_THREADS} dedicated threads (0.2)",
    )
    p.add_argument(
        "--cap", type=int, default=20_000, help="max_events_per_game in the e2e run (20000)"
    )
    p.add_argument(
        "--events",
        type=int,
        default=300_000,
        help="events pre-loaded for drain+POST, rounded up to whole batches (300000)",
    )
    p.add_argument("--games", type=int, default=20, help="games pre-loaded (20)")
    p.add_argument("--linger-ms", type=int, default=1000, help="[reporter] linger_ms (1000)")
    p.add_argument("--workers", type=int, help="[reporter] workers (default: the project's)")
    p.add_argument(
        "--claim-batches",
        type=int,
        help="[reporter] max_batches_per_claim (default: the project's)",
    )
    p.add_argument("--only", choices=("drain", "e2e"), help="run one phase only")
    p.add_argument("--skip-baseline", action="store_true")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="drain+POST pairs (ours and the baseline, the order alternating); "
        "the table shows the pair with the median ratio (1)",
    )
    p.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="py-spy record each reporter process into DIR and summarise",
    )
    p.add_argument(
        "--probe-seconds",
        type=float,
        default=2.0,
        help="length of each endpoint capacity probe at the start (2)",
    )
    args = parse(p, argv, SMALL)
    if (
        args.e2e_games < 2
        or args.games < 1
        or args.seconds <= 0
        or args.rate <= 0
        or args.rounds < 1
    ):
        p.error("need --e2e-games >= 2, --games >= 1, --rounds >= 1 and positive --seconds/--rate")
    return args


def run_all(ctx: Context) -> tuple[DrainResult | None, E2EResult | None]:
    args = ctx.args
    kinds = ("ours",) if args.skip_baseline else ("ours", "baseline")
    drain: dict[str, DrainResult] = {}
    e2e: dict[str, E2EResult] = {}
    rows: list[Row] = []
    pairs: list[dict[str, DrainResult]] = []
    if args.only in (None, "drain"):
        for n in range(args.rounds):  # the order alternates, so a drifting load hits both
            pair: dict[str, DrainResult] = {}
            for kind in kinds if n % 2 == 0 else kinds[::-1]:
                print(f"... drain+POST: {kind} (round {n + 1} of {args.rounds})", file=sys.stderr)
                pair[kind] = run_drain(kind, ctx)
            pairs.append(pair)
        drain = median_pair(pairs)
        rows += drain_rows(drain["ours"], drain.get("baseline"))
    if args.only in (None, "e2e"):
        for kind in kinds:
            print(f"... end-to-end {args.seconds:g} s: {kind}", file=sys.stderr)
            e2e[kind] = run_e2e(kind, ctx)
        rows += e2e_rows(e2e["ours"], e2e.get("baseline"))
    print()
    print_table(rows)
    if pairs and "baseline" in pairs[0]:
        print_rounds(pairs)
    print()
    print_checks(drain.get("ours"), e2e.get("ours"), args.linger_ms, args.rate)
    return drain.get("ours"), e2e.get("ours")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    binary = server_binary(args.server)
    if args.profile is not None:
        if not PY_SPY.exists():
            print(
                f"--profile needs py-spy beside this Python ({PY_SPY}); install it with "
                f"{Path(sys.executable).with_name('pip')} install py-spy (the project's "
                "'profile' extra)",
                file=sys.stderr,
            )
            return 2
        args.profile.mkdir(parents=True, exist_ok=True)
    server = start_server(binary)
    endpoint: FastEndpoint | None = None
    try:
        endpoint = FastEndpoint()
        overrides = {
            k: v
            for k, v in (("workers", args.workers), ("max_batches_per_claim", args.claim_batches))
            if v
        }
        ctx = Context(args, server, server.client(), endpoint, args.profile, overrides)
        header(describe(ctx))
        print_setup(ctx)
        run_all(ctx)
        footer()
        if args.profile is not None:
            for path in sorted(args.profile.glob("*.txt")):
                summarise_profile(path)
    finally:
        if endpoint is not None:
            with suppress(Exception):
                endpoint.stop()
        server.cleanup()
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    sys.exit(main())
