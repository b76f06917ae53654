"""Small helpers shared by the collector tests: polling with a deadline and reading Redis
(``tests/support/stored.py``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from collector.store import KeySchema
from tests.support.polling import wait_until  # noqa: F401 - re-exported for the tests
from tests.support.stored import (  # noqa: F401 - re-exported for the tests
    queue_entries,
    queue_events,
    shard_stats,
    stats_total,
)


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
