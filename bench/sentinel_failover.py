"""What a Sentinel failover loses: the primary killed or demoted under steady traffic, repeated.

    .venv/bin/python -m bench.sentinel_failover [--runs 7] [--rate 2000] [--kill-after 10000]
        [--after 8] [--how kill|demote] [--wait-for-replicas 0] [--small]

Each run starts a primary, one replica and three sentinels (``tests.support.servers.SentinelGroup``:
down-after 1 s, failover timeout 3 s) on free loopback ports, a reporter
(``ReporterService``) draining to a local endpoint and a producer thread calling
``collect()`` at ``--rate`` events/s over 8 games.  Once ``--kill-after`` events are
delivered the primary is SIGKILLed (``--how demote``: ``SENTINEL FAILOVER``, which promotes
the replica and then turns the old primary into its replica); collecting goes on ``--after``
seconds past the promotion of the replica; then the SDK flushes and the reporter drains
(``tests/support/sentinel.py``).  Per run and in total: events collected, distinct events
delivered, duplicates, missing (collected, never delivered, counted nowhere) and how long the
sentinels took.  ``--wait-for-replicas`` sets ``[redis] wait_for_replicas`` (where this
version has it).

``--small`` runs one failover with a few hundred events either side of it, in seconds (most of
them the sentinels' own timeouts): a check that the script works (``tests/test_benches.py``
runs it), not a measurement.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from bench._harness import command_line, footer, header, parse, server_binary
from reporter._demo.endpoint import LocalEndpoint
from reporter._service.service import ReporterService
from tests.support.sentinel import FailoverRun, run_failover, sentinel_config
from tests.support.servers import SentinelGroup

GAMES = [f"bench-game-{i}" for i in range(8)]
SMALL = {"runs": 1, "rate": 1000, "kill_after": 500, "after": 1.0}  # --small: one failover


def one_run(binary: str, args: argparse.Namespace) -> FailoverRun:
    group = SentinelGroup(binary).start()
    endpoint = LocalEndpoint().start()
    try:
        extra = {"wait_for_replicas": args.wait_for_replicas} if args.wait_for_replicas else {}
        config = sentinel_config(group, endpoint.url, redis=extra)
        service = ReporterService(config)
        service.start()
        try:
            return run_failover(
                group,
                config,
                endpoint,
                games=GAMES,
                rate=args.rate,
                kill_after_delivered=args.kill_after,
                after_failover_seconds=args.after,
                how=args.how,
            )
        finally:
            service.stop(grace=0)
            service.store.close()
    finally:
        endpoint.stop()
        group.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line(__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--rate", type=int, default=2000, help="events per second")
    parser.add_argument(
        "--kill-after",
        type=int,
        default=10_000,
        help="events delivered before the primary is killed",
    )
    parser.add_argument(
        "--after", type=float, default=8.0, help="seconds of collecting after the promotion"
    )
    parser.add_argument("--how", choices=("kill", "demote"), default="kill")
    parser.add_argument("--wait-for-replicas", type=int, default=0)
    args = parse(parser, argv, SMALL)
    logging.basicConfig(level=logging.CRITICAL)  # the failover's errors are expected
    binary = server_binary()
    header()
    collected = missing = duplicates = 0
    for number in range(1, args.runs + 1):
        run = one_run(binary, args)
        print(f"run {number}: {run.summary()}", flush=True)
        collected += len(run.collected)
        missing += len(run.missing)
        duplicates += run.duplicates
    print(
        f"total over {args.runs} runs: {collected} collected, {missing} missing "
        f"({100 * missing / max(collected, 1):.3f}%), {duplicates} duplicates"
    )
    footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
