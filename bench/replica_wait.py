"""The cost of ``[redis] wait_for_replicas`` in collect-to-store throughput.

Starts a primary and one replica on free loopback ports (never the machine's Redis on 6379),
then stores the same events with ``wait_for_replicas`` 0 and 1, alternating, ``--rounds``
times each:

* ``background`` (the default mode): N ``collect()`` calls as fast as one thread makes them,
  timed from the first call until ``flush()`` returned (every event confirmed stored);
  a WAIT follows each flush round's writes.
* ``sync``: ``--sync-events`` calls in ``mode="sync"``, each its own write (and WAIT).

It prints the median events/s of each and the ratio wait 1 / wait 0.

    .venv/bin/python -m bench.replica_wait [--events 200000] [--sync-events 5000]
                                           [--games 50] [--rounds 3] [--small]

``--small`` stores a few thousand events each way, one round, in seconds: a check that the
script works (``tests/test_benches.py`` runs it), not a measurement.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Sequence

from bench._harness import command_line, footer, header, parse, server_binary, start_server
from collector import Collector
from collector.counters import Counter
from tests.support.polling import wait_until

# --small: both modes, with and without the WAIT, once each, in seconds.
SMALL = {"events": 5000, "sync_events": 300, "games": 10, "rounds": 1}


def store_rate(url: str, wait: int, mode: str, events: int, games: int) -> float:
    """Events/s from the first collect() until flush() says every event is stored."""
    with Collector(
        url=url,
        wait_for_replicas=wait,
        wait_timeout_ms=1000,
        mode=mode,
        max_events_per_game=events,
        max_buffer_events=events,
    ) as c:
        names = [f"game-{i}" for i in range(games)]
        for name in names:  # warm: connection, scripts, names
            c.collect(name, {"warm": 1})
        assert c.flush(30)
        payload = {"kind": "level_up", "level": 7, "player": "p-123456", "score": 123456}
        started = time.perf_counter()
        for i in range(events):
            c.collect(names[i % games], payload)
        assert c.flush(120), c.stats()
        seconds = time.perf_counter() - started
        stats = c.stats()
        assert stats[Counter.UNREPLICATED_WRITES] == 0, stats
    return events / seconds


def main(argv: Sequence[str] | None = None) -> int:
    ap = command_line(__doc__)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--sync-events", type=int, default=5_000)
    ap.add_argument("--games", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    args = parse(ap, argv, SMALL)
    binary = server_binary()
    header()
    primary = start_server(binary)
    replica = start_server(
        binary, ["--replicaof", "127.0.0.1", str(primary.port), "--repl-diskless-sync-delay", "0"]
    )
    try:
        wait_until(
            lambda: replica.client().info("replication")["master_link_status"] == "up",
            what="the replica to sync",
        )
        rates: dict[tuple[str, int], list[float]] = {}
        for _ in range(args.rounds):
            for mode, events in (("background", args.events), ("sync", args.sync_events)):
                for wait in (0, 1):
                    primary.client().flushall()
                    rate = store_rate(primary.url, wait, mode, events, args.games)
                    rates.setdefault((mode, wait), []).append(rate)
        print(
            f"collect-to-store, primary + 1 replica on loopback, {args.games} games, "
            f"median of {args.rounds} rounds"
        )
        for mode, events in (("background", args.events), ("sync", args.sync_events)):
            off = statistics.median(rates[(mode, 0)])
            on = statistics.median(rates[(mode, 1)])
            print(
                f"  {mode:<10} {events:>7} events  wait_for_replicas=0: {off:>9,.0f}/s  "
                f"=1: {on:>9,.0f}/s  ratio {on / off:.2f}"
            )
        footer()
    finally:
        replica.cleanup()
        primary.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
