"""``telemetry-reporter dead list | show ID | replay [ID | --all] | purge``."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from typing import Any

from collector._config import TelemetryConfig
from collector._redis import make_client
from collector._schema import KeySchema, ShardKeys, entry_event
from collector._scripts import Scripts, split_entries
from reporter._status import table

LIST_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class DeadBatch:
    batch_id: str
    shard: int
    game: str
    events: int
    attempts: int
    reason: str
    dead_at: float


def list_dead(client: Any, schema: KeySchema, limit: int = LIST_LIMIT) -> list[DeadBatch]:
    out: list[DeadBatch] = []
    for keys in schema.all_shards():
        ids = client.lrange(keys.dead, 0, limit - 1)
        if not ids:
            continue
        for batch_id, raw in zip(ids, client.hmget(keys.batches, ids), strict=True):
            if raw:
                meta = json.loads(raw)
                out.append(DeadBatch(batch_id.decode(), keys.shard, meta["g"], int(meta["n"]),
                                     int(meta["a"]), str(meta.get("r", "")),
                                     float(meta.get("d", 0)) / 1000))
    return sorted(out, key=lambda b: b.dead_at)


def find(client: Any, schema: KeySchema, batch_id: str) -> ShardKeys | None:
    for keys in schema.all_shards():
        if client.hexists(keys.batches, batch_id):
            return keys
    return None


def run_dead(config: TelemetryConfig, args: argparse.Namespace) -> int:
    client = make_client(config.redis)
    schema = KeySchema(config.redis.key_prefix, config.redis.shards)
    scripts = Scripts(client)
    if args.action == "list":
        batches = list_dead(client, schema)
        rows = [(b.batch_id, b.game, b.shard, b.events, b.attempts,
                 time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(b.dead_at)), b.reason[:60])
                for b in batches]
        print(table(("batch", "game", "shard", "events", "attempts", "dead since", "reason"),
                    rows) if rows else "no dead-lettered batches")
        return 0
    if args.action == "show":
        keys = find(client, schema, args.batch_id)
        if keys is None:
            print(f"no batch {args.batch_id!r}")
            return 1
        meta = json.loads(client.hget(keys.batches, args.batch_id))
        entries = split_entries(client.hget(keys.payloads, args.batch_id) or b"")
        print(json.dumps({"batch_id": args.batch_id, "shard": keys.shard, "game": meta["g"],
                          "attempts": meta["a"], "reason": meta.get("r", ""),
                          "events": [json.loads(entry_event(e)) for e in entries]}, indent=2))
        return 0
    if args.action == "replay":
        return _replay(client, schema, scripts, args)
    total = [0, 0]
    for keys in schema.all_shards():
        while (done := scripts.purge(keys))[0]:
            total[0] += done[0]
            total[1] += done[1]
    print(f"purged {total[0]} batches ({total[1]} events)")
    return 0


def _replay(client: Any, schema: KeySchema, scripts: Scripts, args: argparse.Namespace) -> int:
    if args.batch_id:
        keys = find(client, schema, args.batch_id)
        batches, events = scripts.replay(keys, args.batch_id) if keys else (0, 0)
        if not batches:
            print(f"no dead-lettered batch {args.batch_id!r}")
            return 1
    elif args.all:
        batches = events = 0
        for keys in schema.all_shards():
            while (done := scripts.replay(keys))[0]:
                batches += done[0]
                events += done[1]
    else:
        print("replay needs a batch id or --all")
        return 2
    print(f"replayed {batches} batches ({events} events); stale events are dropped when sent")
    return 0
