"""Benchmark what a background round's write costs per event: the client's CPU and the
server's time, with nothing else running.

A round here is what the flusher writes after a take under load: ``--games`` games of
``--per-game`` events each (``bench.collect``'s events), one collect call per game, numbered
as the SDK's writer numbers them (a writer id; sequence numbers per shard, the lowest
unanswered one the round's first in that shard), all sent through the store's bulk path at
once (``Store.call_many``): the entries joined and checksummed, the calls packed and written,
the replies read.  Per event, the median over ``--rounds`` rounds (the queues are emptied
every ten rounds):

* ``client CPU ns/event``: the CPU time of the thread that writes (``time.thread_time``);
* ``wall ns/event``: the round's wall time, the server's work included;
* ``server ns/event``: the scripts' time as the server counts it (``INFO commandstats``).

``bench.collect`` measures the same writes beside a busy ``collect()`` loop, where the
interpreter is shared and the figures move with the machine's other load; here nothing shares
the thread, so two trees compare well (run it from each checkout, alternating).

    .venv/bin/python -m bench.write_cost [--games 50] [--per-game 400] [--rounds 40]
                                         [--server redis|valkey] [--small]
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid
from collections.abc import Sequence

import orjson
import redis

from bench._harness import (
    command_line,
    describe_server,
    footer,
    header,
    parse,
    server_binary,
    start_server,
)
from bench.collect import make_work
from collector.config import TelemetryConfig
from collector.store import Collect, KeySchema, SingleServer, Store, encode_entry

SMALL = {"games": 5, "per_game": 20, "rounds": 3}
EMPTIED_EVERY = 10  # rounds


def round_of(games: int, per_game: int) -> dict[str, list[bytes]]:
    """``per_game`` entries for each of ``games`` games, as a take finds them."""
    work = make_work(games * per_game * 4, games)
    entries: dict[str, list[bytes]] = {}
    for i, (game, event) in enumerate(work):
        queue = entries.setdefault(game, [])
        if len(queue) < per_game:
            queue.append(encode_entry(1_732_243_545_000 + i, orjson.dumps(event)))
    return entries


def numbered(
    schema: KeySchema, entries: dict[str, list[bytes]], writer: str, next_seq: dict[int, int]
) -> list[Collect]:
    """One call per game, numbered per shard as the writer numbers a round's calls."""
    first = dict(next_seq)
    calls = []
    for game, queue in entries.items():
        keys = schema.for_game(game)
        seq = next_seq.get(keys.shard, 1)
        next_seq[keys.shard] = seq + 1
        low = first.get(keys.shard, 1)
        calls.append(Collect(keys, game, queue, 10**9, 3600, writer=writer, seq=seq, low=low))
    return calls


def script_usec(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("usec", 0))


def measure(client: redis.Redis, games: int, per_game: int, rounds: int) -> dict[str, float]:
    settings = TelemetryConfig().redis
    schema = KeySchema(settings.key_prefix, settings.shards)
    store = Store(SingleServer(client), schema)
    entries = round_of(games, per_game)
    events = sum(map(len, entries.values()))
    writer, next_seq = uuid.uuid4().hex[:16], dict[int, int]()
    store.call_many(numbered(schema, entries, writer, next_seq))  # script loaded, keys made
    cpu, wall, server = [], [], []
    for n in range(rounds):
        calls = numbered(schema, entries, writer, next_seq)
        usec = script_usec(client)
        cpu0, wall0 = time.thread_time_ns(), time.perf_counter_ns()
        replies = store.call_many(calls)
        cpu.append(time.thread_time_ns() - cpu0)
        wall.append(time.perf_counter_ns() - wall0)
        server.append((script_usec(client) - usec) * 1000)
        if any(isinstance(reply, Exception) for reply in replies):
            raise SystemExit(f"round {n}: a call failed: {replies}")
        if n % EMPTIED_EVERY == EMPTIED_EVERY - 1:
            client.delete(*[schema.for_game(game).queue(game) for game in entries])
    return {
        "events per round": events,
        "client CPU ns/event": statistics.median(cpu) / events,
        "wall ns/event": statistics.median(wall) / events,
        "server ns/event": statistics.median(server) / events,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line(__doc__, server_option=True)
    parser.add_argument("--games", type=int, default=50, help="games per round (50)")
    parser.add_argument("--per-game", type=int, default=400, help="events per game (400)")
    parser.add_argument("--rounds", type=int, default=40, help="rounds measured (40)")
    args = parse(parser, argv, SMALL)
    server = start_server(server_binary(args.server))
    try:
        client = server.client()
        header(f"server: {describe_server(server)}")
        for name, value in measure(client, args.games, args.per_game, args.rounds).items():
            print(f"  {name:22s} {value:10,.0f}")
        footer()
    finally:
        server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
