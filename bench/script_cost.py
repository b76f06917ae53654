"""Benchmark the server-side time of single script calls on the hot paths: collect (1 event,
100 events; and 1 event, 1,000 events written once, as the SDK sends them: a writer id, a
sequence number and the lowest unanswered one), claim (4 batches of 128), ack (one batch) and
ack_many (the 4 batches of a claim in one call, as the reporter acks a lease).

Each call's time is read from the server itself (``INFO commandstats``, the ``evalsha`` usec
before and after the call), so the client's and the network's share is left out; the figures
are the median and the minimum over many calls (on a busy machine the minimum is the steadier
of the two).  A private server on a free loopback port, never the machine's Redis on 6379.

    .venv/bin/python -m bench.script_cost [--server redis|valkey] [--calls 300] [--small]

To compare two trees, run it from each checkout (alternating, a few times).
"""

from __future__ import annotations

import itertools
import statistics
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

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
from collector.store import (
    Ack,
    AckMany,
    Claim,
    Collect,
    KeySchema,
    ScriptCall,
    ShardKeys,
    SingleServer,
    Store,
    encode_entry,
)


def collect_calls(keys: ShardKeys, entry: bytes, calls: int) -> Iterator[tuple[str, Collect]]:
    """The collect calls, named: plain ones (of game "h" with 1 event, "g" with 100, which
    the claims take), then as the SDK's writer sends them, 1 event and 1,000 alternating,
    each answered before the next (so its own lowest unanswered number)."""
    for _ in range(calls):
        yield "collect, 1 event", Collect(keys, "h", [entry], 10**7, 3600)
    for _ in range(calls):
        yield "collect, 100 events", Collect(keys, "g", [entry] * 100, 10**7, 3600)
    writer = uuid.uuid4().hex[:16]
    for seq in range(1, 2 * calls + 1):
        size, name = (1, "SDK's collect, 1 event") if seq % 2 else (1000, "SDK's collect, 1,000")
        yield name, Collect(keys, "s", [entry] * size, 10**7, 3600, writer=writer, seq=seq, low=seq)


def measure(client: redis.Redis, calls: int) -> dict[str, list[int]]:
    store = Store(SingleServer(client), KeySchema("bench", 1))
    keys = store.schema.shard(0)
    entry = encode_entry(
        int(time.time() * 1000),
        orjson.dumps({"game": "g", "player": "p-123456", "type": "login", "n": 1}),
    )

    def usec() -> int:
        stats: dict[str, Any] = client.info("commandstats")
        return int(stats.get("cmdstat_evalsha", {}).get("usec", 0))

    def timed(request: ScriptCall[Any]) -> tuple[Any, int]:
        before = usec()
        result = store.call(request)
        return result, usec() - before

    out: dict[str, list[int]] = {
        "collect, 1 event": [],
        "collect, 100 events": [],
        "SDK's collect, 1 event": [],
        "SDK's collect, 1,000": [],
        "claim, 4 x 128": [],
        "ack": [],
        "ack_many, 4 batches": [],
    }
    for name, call in collect_calls(keys, entry, calls):
        out[name].append(timed(call)[1])
    for n in itertools.count():
        token = uuid.uuid4().hex
        claimed, spent = timed(
            Claim(keys, "g", uuid.uuid4().hex, token, 128, 4, 60_000, 600_000, 0, 100)
        )
        if not claimed.batches:
            break
        if len(claimed.batches) < 4:
            continue  # the buffer's tail: neither a whole claim nor a whole lease
        out["claim, 4 x 128"].append(spent)
        if n % 2:  # a lease in one call, or batch by batch: alternating
            acks = tuple((batch.batch_id, 0) for batch in claimed.batches)
            out["ack_many, 4 batches"].append(timed(AckMany(keys, token, acks))[1])
        else:
            for batch in claimed.batches:
                out["ack"].append(timed(Ack(keys, batch.batch_id, token))[1])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line(__doc__, server_option=True)
    parser.add_argument("--calls", type=int, default=300, help="calls of each collect (300)")
    args = parse(parser, argv, {"calls": 20})
    server = start_server(server_binary(args.server))
    try:
        client = server.client()
        header(f"server: {describe_server(server)}; server-side us per call")
        for name, spent in measure(client, args.calls).items():
            print(
                f"  {name:22s} median {statistics.median(spent):7.1f}  min {min(spent):5d}"
                f"  ({len(spent)} calls)"
            )
        footer()
    finally:
        server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
