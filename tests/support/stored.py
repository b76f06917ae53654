"""Reading what Redis holds for the tests: a game's queue, a shard's counters, a counter over
every shard, and the SDK's accounting at a quiet moment."""

from __future__ import annotations

from collections.abc import Iterable
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


def stats_of(client: Any, schema: KeySchema, game: str) -> dict[str, int]:
    """The ``stats`` hash of the game's shard."""
    return shard_stats(client, schema.for_game(game))


def balanced(stats: dict[str, int]) -> bool:
    """The collector's accounting invariant at a quiet moment."""
    return stats["accepted"] == (
        stats["stored"]
        + stats["dropped_buffer_full"]
        + stats["dropped_at_close"]
        + stats["dropped_disabled"]
        + stats["buffered"]
    )


def seqs(events: Iterable[dict[str, Any]], field: str = "seq") -> list[int]:
    return [int(e[field]) for e in events]


def keyspace(client: Any) -> dict[bytes, bytes | None]:
    """Every key and its DUMP: two of these are equal when nothing was written between."""
    return {key: client.dump(key) for key in sorted(client.keys("*"))}
