"""Read-only views of a shard: what the sweeper, ``status`` and ``dead`` need to see.

Plain commands, no scripts: each read touches one shard's keys (one hash slot).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collector.store._backends import RedisClient

from collector.store._entries import head_time_ms, split_entries
from collector.store._keys import ShardKeys
from collector.store._results import text


@dataclass(frozen=True, slots=True)
class RingSlice:
    """Part of a shard's ring of active games, the ring's length, and how many batches
    wait for a retry (so an idle shard costs one round trip)."""

    games: list[str]
    ring_length: int
    retries: int


@dataclass(frozen=True, slots=True)
class GameState:
    game: str
    length: int
    oldest_ms: int | None


@dataclass(frozen=True, slots=True)
class GameView:
    game: str
    shard: int
    buffered: int
    oldest_ms: int | None


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class DeadBatch:
    batch_id: str
    shard: int
    game: str
    events: int
    attempts: int
    reason: str
    dead_at: float  # seconds since the epoch


@dataclass(frozen=True, slots=True)
class Alert:
    """Something an endpoint refused that only the operator can fix."""

    name: str
    message: str
    at: float  # seconds since the epoch, the latest time
    count: int


@dataclass(frozen=True, slots=True)
class BatchDetail:
    batch_id: str
    shard: int
    game: str
    attempts: int
    reason: str
    entries: list[bytes]
    item_reasons: list[str]  # one per entry for refused items set aside together, else empty


def ring(client: RedisClient, keys: ShardKeys, start: int, count: int) -> RingSlice:
    with client.pipeline(transaction=False) as pipe:
        pipe.lrange(keys.ring, start, start + count - 1)
        pipe.llen(keys.ring)
        pipe.zcard(keys.retry)
        names, length, retries = pipe.execute()
    return RingSlice([n.decode() for n in names], int(length), int(retries))


def game_states(client: RedisClient, keys: ShardKeys, games: list[str]) -> list[GameState]:
    """Length and oldest collect time of each game's buffer, in one round trip."""
    if not games:
        return []
    with client.pipeline(transaction=False) as pipe:
        for game in games:
            pipe.llen(keys.queue(game))
            pipe.lindex(keys.queue(game), 0)
        replies = pipe.execute()
    return [
        GameState(game, int(replies[2 * i]),
                  head_time_ms(replies[2 * i + 1]) if replies[2 * i + 1] else None)
        for i, game in enumerate(games)
    ]


def read_shard(client: RedisClient, keys: ShardKeys, tries: int = 5) -> ShardView:
    """One shard's state, read in one MULTI so that no batch is caught between two states.

    The games to read come from a first look at the ring; if the ring gained a game before
    the transaction ran, it is read again."""
    games = [text(g) for g in client.lrange(keys.ring, 0, -1)]
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
            ring_now, inflight, retry, dead, stats, owner, metas, *queues = pipe.execute()
        now_ring = [g.decode() for g in ring_now]
        if set(now_ring) <= set(games):
            break
        games = now_ring
    else:
        raise RuntimeError(f"shard {keys.shard}: its games kept changing; try again")
    lengths = dict(zip(games, queues[0::2], strict=True))
    heads = dict(zip(games, queues[1::2], strict=True))
    views = [GameView(g, keys.shard, int(lengths[g]),
                      head_time_ms(heads[g]) if heads[g] else None) for g in now_ring]
    pending = sum(int(json.loads(metas[i])["n"]) for i in (*inflight, *retry) if i in metas)
    return ShardView(
        shard=keys.shard, owner=(owner or b"").decode(), buffered=sum(v.buffered for v in views),
        games=views, inflight=len(inflight), retry=len(retry), dead=int(dead),
        pending_events=pending,
        counters={k.decode(): int(v) for k, v in stats.items()},
    )


def dead_batches(client: RedisClient, keys: ShardKeys, limit: int) -> list[DeadBatch]:
    """The shard's newest ``limit`` dead letters."""
    ids = client.lrange(keys.dead, 0, limit - 1)
    if not ids:
        return []
    out: list[DeadBatch] = []
    for batch_id, raw in zip(ids, client.hmget(keys.batches, ids), strict=True):
        if raw:
            meta = json.loads(raw)
            out.append(DeadBatch(text(batch_id), keys.shard, meta["g"], int(meta["n"]),
                                 int(meta["a"]), str(meta.get("r", "")),
                                 float(meta.get("d", 0)) / 1000))
    return out


def batch_detail(client: RedisClient, keys: ShardKeys, batch_id: str) -> BatchDetail | None:
    with client.pipeline(transaction=False) as pipe:
        pipe.hget(keys.batches, batch_id)
        pipe.hget(keys.payloads, batch_id)
        raw, payload = pipe.execute()
    if raw is None:
        return None
    meta = json.loads(raw)
    return BatchDetail(batch_id, keys.shard, meta["g"], int(meta["a"]), str(meta.get("r", "")),
                       split_entries(payload), [str(r) for r in meta.get("ir") or ()])


def alerts(client: RedisClient, key: str) -> list[Alert]:
    raw = {text(k): v for k, v in client.hgetall(key).items()}
    out: list[Alert] = []
    for name, value in raw.items():
        if name.endswith("#count"):
            continue
        record = json.loads(value)
        out.append(Alert(name, str(record.get("message", "")), float(record.get("at", 0)) / 1000,
                         int(raw.get(f"{name}#count", 0))))
    return sorted(out, key=lambda a: -a.at)
