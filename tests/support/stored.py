"""Reading what Redis holds for the tests: a game's queue, a shard's counters, a counter over
every shard."""

from __future__ import annotations

from typing import Any

import orjson

from collector.store import ENTRY_TIME_DIGITS, KeySchema, ShardKeys


def queue_entries(client: Any, schema: KeySchema, game: str) -> list[bytes]:
    return list(client.lrange(schema.for_game(game).queue(game), 0, -1))


def queue_events(client: Any, schema: KeySchema, game: str) -> list[dict[str, Any]]:
    return [orjson.loads(e[ENTRY_TIME_DIGITS:]) for e in queue_entries(client, schema, game)]


def shard_stats(client: Any, keys: ShardKeys) -> dict[str, int]:
    """A shard's ``stats`` hash."""
    return {k.decode(): int(v) for k, v in client.hgetall(keys.stats).items()}


def stats_total(client: Any, schema: KeySchema, name: str) -> int:
    """A counter of the ``stats`` hash summed over every shard."""
    return sum(int(client.hget(s.stats, name) or 0) for s in schema.all_shards())
