"""Read every shard's state and counters from Redis and check that they add up.

Every event stored by ``collect()`` is, at any moment, exactly one of: evicted by the cap,
stale, delivered, dead-lettered (``rejected - replayed``), buffered, or in a pending batch
(in flight or waiting for retry).  Whatever is missing was in a buffer that expired (TTL).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from collector._schema import KeySchema, ShardKeys, entry_time_ms

COUNTERS = (
    "stored", "evicted", "stale", "delivered", "rejected", "replayed", "dead_dropped", "purged",
    "sdk_dropped_buffer_full", "sdk_dropped_too_large", "claimed", "batches_claimed",
    "batches_delivered", "batches_retried", "batches_dead", "batches_reaped", "batches_released",
)


@dataclass
class GameView:
    game: str
    shard: int
    buffered: int
    oldest_ms: int | None


@dataclass
class ShardView:
    shard: int
    owner: str
    buffered: int
    games: list[GameView]
    inflight: int
    retry: int
    dead: int
    pending_events: int
    counters: dict[str, int]


@dataclass
class Totals:
    shards: list[ShardView] = field(default_factory=list)

    def counter(self, name: str) -> int:
        return sum(s.counters.get(name, 0) for s in self.shards)

    @property
    def buffered(self) -> int:
        return sum(s.buffered for s in self.shards)

    @property
    def pending_events(self) -> int:
        return sum(s.pending_events for s in self.shards)

    @property
    def dead_events(self) -> int:
        return self.counter("rejected") - self.counter("replayed")

    @property
    def unaccounted(self) -> int:
        """Stored events in none of the states: only an expired buffer explains these."""
        c = self.counter
        return (c("stored") - c("evicted") - c("stale") - c("delivered") - self.dead_events
                - self.buffered - self.pending_events)

    def summary(self) -> dict[str, int]:
        out = {name: self.counter(name) for name in COUNTERS}
        out.update(buffered=self.buffered, pending_events=self.pending_events,
                   dead_events=self.dead_events, unaccounted=self.unaccounted,
                   batches_in_flight=sum(s.inflight for s in self.shards),
                   batches_retry=sum(s.retry for s in self.shards),
                   batches_dead_listed=sum(s.dead for s in self.shards))
        return out


def read_shard(client: Any, keys: ShardKeys) -> ShardView:
    with client.pipeline(transaction=False) as pipe:
        pipe.lrange(keys.ring, 0, -1)
        pipe.zrange(keys.inflight, 0, -1)
        pipe.zrange(keys.retry, 0, -1)
        pipe.llen(keys.dead)
        pipe.hgetall(keys.stats)
        pipe.get(keys.owner)
        ring, inflight, retry, dead, stats, owner = pipe.execute()
    games = [g.decode() for g in ring]
    views: list[GameView] = []
    if games:
        with client.pipeline(transaction=False) as pipe:
            for game in games:
                pipe.llen(keys.queue(game))
                pipe.lindex(keys.queue(game), 0)
            replies = pipe.execute()
        views = [GameView(g, keys.shard, int(replies[2 * i]),
                          entry_time_ms(replies[2 * i + 1]) if replies[2 * i + 1] else None)
                 for i, g in enumerate(games)]
    pending = 0
    ids = [*inflight, *retry]
    if ids:
        for raw in client.hmget(keys.batches, ids):
            if raw:
                pending += int(json.loads(raw)["n"])
    return ShardView(
        shard=keys.shard, owner=(owner or b"").decode(), buffered=sum(v.buffered for v in views),
        games=views, inflight=len(inflight), retry=len(retry), dead=int(dead),
        pending_events=pending,
        counters={k.decode(): int(v) for k, v in stats.items()},
    )


def read_totals(client: Any, schema: KeySchema) -> Totals:
    return Totals([read_shard(client, keys) for keys in schema.all_shards()])
