"""Read every shard's state and counters from Redis and check that they add up.

Every event stored by ``collect()`` is, at any moment, exactly one of: evicted by the cap,
stale, delivered, dead-lettered (``rejected - replayed``), buffered, or in a pending batch
(in flight or waiting for retry).  Whatever is missing was in a buffer that expired (TTL).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from collector._schema import COUNTERS, KeySchema, ShardKeys, entry_time_ms


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


def read_shard(client: Any, keys: ShardKeys, tries: int = 5) -> ShardView:
    """One shard's state, read in one MULTI so that no batch is caught between two states.

    The games to read come from a first look at the ring; if the ring gained a game before
    the transaction ran, it is read again."""
    games = [g.decode() for g in client.lrange(keys.ring, 0, -1)]
    for _ in range(tries):
        with client.pipeline(transaction=True) as pipe:
            pipe.lrange(keys.ring, 0, -1)
            pipe.zrange(keys.inflight, 0, -1)
            pipe.zrange(keys.retry, 0, -1)
            pipe.llen(keys.dead)
            pipe.hgetall(keys.stats)
            pipe.get(keys.owner)
            pipe.hgetall(keys.batches)
            for game in games:
                pipe.llen(keys.queue(game))
                pipe.lindex(keys.queue(game), 0)
            ring, inflight, retry, dead, stats, owner, metas, *queues = pipe.execute()
        now_ring = [g.decode() for g in ring]
        if set(now_ring) <= set(games):
            break
        games = now_ring
    else:
        raise RuntimeError(f"shard {keys.shard}: its games kept changing; try again")
    lengths = dict(zip(games, queues[0::2], strict=True))
    heads = dict(zip(games, queues[1::2], strict=True))
    views = [GameView(g, keys.shard, int(lengths[g]),
                      entry_time_ms(heads[g]) if heads[g] else None) for g in now_ring]
    pending = sum(int(json.loads(metas[i])["n"]) for i in (*inflight, *retry) if i in metas)
    return ShardView(
        shard=keys.shard, owner=(owner or b"").decode(), buffered=sum(v.buffered for v in views),
        games=views, inflight=len(inflight), retry=len(retry), dead=int(dead),
        pending_events=pending,
        counters={k.decode(): int(v) for k, v in stats.items()},
    )


def read_totals(client: Any, schema: KeySchema) -> Totals:
    return Totals([read_shard(client, keys) for keys in schema.all_shards()])
