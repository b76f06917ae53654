"""Small helpers shared by the collector tests: polling with a deadline and reading Redis."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from collector.store import ENTRY_TIME_DIGITS, KeySchema
from tests.polling import wait_until  # noqa: F401 - re-exported for the tests


def queue_entries(client: Any, schema: KeySchema, game: str) -> list[bytes]:
    return list(client.lrange(schema.for_game(game).queue(game), 0, -1))


def queue_events(client: Any, schema: KeySchema, game: str) -> list[dict[str, Any]]:
    return [orjson.loads(e[ENTRY_TIME_DIGITS:]) for e in queue_entries(client, schema, game)]


def stats_total(client: Any, schema: KeySchema, field: str) -> int:
    """A counter of the ``stats`` hash summed over every shard."""
    return sum(int(client.hget(s.stats, field) or 0) for s in schema.all_shards())


def stats_of(client: Any, schema: KeySchema, game: str) -> dict[str, int]:
    raw = client.hgetall(schema.for_game(game).stats)
    return {k.decode(): int(v) for k, v in raw.items()}


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
