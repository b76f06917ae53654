"""Read-only views of a shard: what the sweeper, ``status`` and ``dead`` need to see.

Plain commands, never in a MULTI (Redis refuses to queue any command in a transaction
while it is at maxmemory); each read touches one shard's keys (one hash slot).  The one
atomic read, a shard's whole state, is the ``read_shard`` script (``no-writes``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from redis.cluster import RedisCluster

if TYPE_CHECKING:
    from collector.store._backends import RedisClient

from collector.counters import Counter
from collector.store._entries import head_time_ms, split_entries
from collector.store._keys import ShardKeys
from collector.store._results import text

T = TypeVar("T")
# Shards (or games) whose reads go out in one pipeline at most: a read of every shard of a
# 16,384-shard deployment is 16 pipelines, and no reply grows without bound.
PIPELINE_SHARDS = 1024
PIPELINE_GAMES = 8192


@dataclass(frozen=True, slots=True)
class RingSlice:
    """Part of a shard's ring of active games (the next names after a cursor), the ring's
    length, and how many batches wait for a retry (so an idle shard costs one round trip);
    and, in the same round trip, the shard's identity marker (None if absent), its
    outstanding events by its counters (stored and not yet evicted, stale, delivered or dead:
    what a reset would lose) and whether a ring of an older version (a list) is still there."""

    games: list[str]
    ring_length: int
    retries: int
    marker: str | None = None
    outstanding: int = 0
    legacy_ring: bool = False


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
class ShardLevels:
    """A shard's levels now, read cheaply for the metrics: no batch metadata, no payloads."""

    shard: int
    games: list[GameState]
    inflight: int
    retry: int
    retry_due: int
    dead: int

    @property
    def buffered(self) -> int:
        return sum(g.length for g in self.games)

    @property
    def oldest_ms(self) -> int | None:
        """Collect time of the oldest buffered event, or None if nothing is buffered."""
        times = [g.oldest_ms for g in self.games if g.oldest_ms is not None and g.length]
        return min(times) if times else None


# Within this share of maxmemory a node counts as full: Redis checks the limit before a write
# runs, with the write's own arguments already read, so writes are refused before the last
# bytes are taken (an SDK write carries up to 512 KiB).
FULL_RATIO = 0.98


@dataclass(frozen=True, slots=True)
class MemoryUse:
    """One Redis node's memory against its ``maxmemory`` (INFO memory), and the writes it has
    refused for lack of memory since it started (INFO errorstats, ``errorstat_OOM``)."""

    node: str  # host:port
    used: int  # bytes Redis counts against maxmemory
    maximum: int  # maxmemory in bytes; 0 = no limit
    policy: str  # maxmemory-policy
    oom_refusals: int

    @property
    def full(self) -> bool:
        return self.maximum > 0 and self.used >= self.maximum * FULL_RATIO

    @property
    def refusing_writes(self) -> bool:
        """Full with ``noeviction``: Redis answers OOM to writes that need memory (any other
        policy evicts keys instead, which can delete buffered events and batches)."""
        return self.full and self.policy == "noeviction"


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
class Reporter:
    """A reporter process in the registry, and when its heartbeat runs out (ms, its clock)."""

    owner: str
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class BatchDetail:
    batch_id: str
    shard: int
    game: str
    attempts: int
    reason: str
    entries: list[bytes]
    item_reasons: list[str]  # one per entry for refused items set aside together, else empty


def ring(client: RedisClient, keys: ShardKeys, after: str, count: int) -> RingSlice:
    """Up to ``count`` active games whose names sort after ``after`` ('' = from the first):
    O(log n + count) whatever the number of games in the shard."""
    with client.pipeline(transaction=False) as pipe:
        pipe.zrangebylex(keys.ring, f"({after}" if after else "-", "+", 0, count)
        pipe.zcard(keys.ring)
        pipe.zcard(keys.retry)
        pipe.get(keys.marker)
        pipe.hmget(keys.stats, _OUTSTANDING)
        pipe.exists(keys.legacy_ring)
        names, length, retries, marker, counts, legacy = pipe.execute()
    stored, evicted, stale, delivered, dead, replayed = (int(c or 0) for c in counts)
    return RingSlice([n.decode() for n in names], int(length), int(retries),
                     text(marker) if marker is not None else None,
                     stored - evicted - stale - delivered - dead + replayed, bool(legacy))


# The counters an outstanding count is made of (see RingSlice).
_OUTSTANDING = (Counter.STORED, Counter.EVICTED, Counter.STALE, Counter.DELIVERED,
                Counter.DEAD_EVENTS, Counter.REPLAYED)


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


def read_shard(client: RedisClient, keys: ShardKeys,
               read_state: Callable[[list[str]], Sequence[Any]], tries: int = 5) -> ShardView:
    """One shard's state, read atomically by ``read_state`` (the ``read_shard`` script: a
    MULTI would be refused while Redis is at maxmemory) so that no batch is caught between
    two states.

    The games to read come from a first look at the ring; if the ring gained a game before
    the atomic read ran, it is read again."""
    first: list[Any] = client.zrange(keys.ring, 0, -1)
    games = [text(g) for g in first]
    for _ in range(tries):
        ring_now, inflight, retry, dead, flat_stats, owner, flat_metas, *queues = (
            read_state(games))
        now_ring = [text(g) for g in ring_now]
        if set(now_ring) <= set(games):
            break
        games = now_ring
    else:
        raise RuntimeError(f"shard {keys.shard}: its games kept changing; try again")
    stats = dict(zip(flat_stats[0::2], flat_stats[1::2], strict=True))
    metas = dict(zip(flat_metas[0::2], flat_metas[1::2], strict=True))
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


def dead_batches(client: RedisClient, keys: ShardKeys, limit: int | None, game: str = "",
                 before: float | None = None, page: int = 1000) -> list[DeadBatch]:
    """The shard's newest dead letters, newest first: up to ``limit`` (None: all) of those of
    ``game`` (if set) that died before ``before`` (seconds since the epoch, if set)."""
    out: list[DeadBatch] = []
    seen: set[str] = set()  # a dead letter pushed meanwhile moves the rest down a place
    start = 0
    while limit is None or len(out) < limit:
        ids = client.lrange(keys.dead, start, start + page - 1)
        if not ids:
            break
        for batch in _dead_page(client, keys, ids):
            if (batch.batch_id in seen or (game and batch.game != game)
                    or (before is not None and batch.dead_at >= before)):
                continue
            seen.add(batch.batch_id)
            out.append(batch)
            if limit is not None and len(out) == limit:
                break
        start += page
    return out


def _dead_page(client: RedisClient, keys: ShardKeys, ids: list[Any]) -> list[DeadBatch]:
    out: list[DeadBatch] = []
    for batch_id, raw in zip(ids, client.hmget(keys.batches, ids), strict=True):
        if raw:
            meta = json.loads(raw)
            out.append(DeadBatch(text(batch_id), keys.shard, meta["g"], int(meta["n"]),
                                 int(meta["a"]), str(meta.get("r", "")),
                                 float(meta.get("d", 0)) / 1000))
    return out


def dead_listed(client: RedisClient, shards: Sequence[ShardKeys], chunk: int = 1000) -> int:
    """Batches on the dead lists of ``shards``, pipelined ``chunk`` shards at a time."""
    total = 0
    for i in range(0, len(shards), chunk):
        with client.pipeline(transaction=False) as pipe:
            for keys in shards[i:i + chunk]:
                pipe.llen(keys.dead)
            total += sum(int(n) for n in pipe.execute())
    return total


def counters(client: RedisClient, shards: Sequence[ShardKeys], chunk: int = 1000
             ) -> dict[str, int]:
    """The counters of ``shards`` added up: one HGETALL each, pipelined ``chunk`` shards at a
    time (no ring, no batch or game reads: cheap whatever the number of games)."""
    totals: dict[str, int] = {}
    for i in range(0, len(shards), chunk):
        with client.pipeline(transaction=False) as pipe:
            for keys in shards[i:i + chunk]:
                pipe.hgetall(keys.stats)
            for stats in pipe.execute():
                for name, value in stats.items():
                    totals[text(name)] = totals.get(text(name), 0) + int(value)
    return totals


def reporters(client: RedisClient, key: str) -> list[Reporter]:
    """Every reporter process in the registry, expired or not, the newest heartbeat first."""
    entries: list[Any] = client.zrange(key, 0, -1, desc=True, withscores=True)
    return [Reporter(text(owner), int(deadline)) for owner, deadline in entries]


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


def counter_totals(client: RedisClient, shards: Sequence[ShardKeys]) -> dict[str, int]:
    """The shards' ``stats`` hashes added up: one HGETALL per shard, pipelined."""
    totals: dict[str, int] = {}
    for group in _groups(shards, PIPELINE_SHARDS):
        with client.pipeline(transaction=False) as pipe:
            for keys in group:
                pipe.hgetall(keys.stats)
            replies = pipe.execute()
        for stats in replies:
            for name, value in stats.items():
                key = text(name)
                totals[key] = totals.get(key, 0) + int(value)
    return totals


def shard_levels(client: RedisClient, shards: Sequence[ShardKeys], now_ms: int
                 ) -> list[ShardLevels]:
    """Each shard's games with their buffer length and oldest entry, batches in flight,
    waiting for a retry (and due by ``now_ms``) and dead-listed; two pipelined rounds:
    five commands per shard, then two per game."""
    counts: list[tuple[list[str], int, int, int, int]] = []
    for group in _groups(shards, PIPELINE_SHARDS):
        with client.pipeline(transaction=False) as pipe:
            for keys in group:
                pipe.zrange(keys.ring, 0, -1)
                pipe.zcard(keys.inflight)
                pipe.zcard(keys.retry)
                pipe.zcount(keys.retry, "-inf", now_ms)
                pipe.llen(keys.dead)
            replies = pipe.execute()
        for i in range(len(group)):
            ring, inflight, retry, due, dead = replies[5 * i:5 * i + 5]
            games = list(dict.fromkeys(text(g) for g in ring))
            counts.append((games, int(inflight), int(retry), int(due), int(dead)))
    queues = [(keys, game) for keys, (games, *_) in zip(shards, counts, strict=True)
              for game in games]
    states: dict[tuple[int, str], GameState] = {}
    for group_of_games in _groups(queues, PIPELINE_GAMES):
        with client.pipeline(transaction=False) as pipe:
            for keys, game in group_of_games:
                pipe.llen(keys.queue(game))
                pipe.lindex(keys.queue(game), 0)
            replies = pipe.execute()
        for i, (keys, game) in enumerate(group_of_games):
            length, head = replies[2 * i], replies[2 * i + 1]
            states[keys.shard, game] = GameState(game, int(length),
                                                 head_time_ms(head) if head else None)
    return [ShardLevels(keys.shard, [states[keys.shard, g] for g in games], inflight, retry,
                        due, dead)
            for keys, (games, inflight, retry, due, dead) in zip(shards, counts, strict=True)]


def memory(client: RedisClient) -> list[MemoryUse]:
    """Each node's memory use: the server, or every primary of a cluster."""
    if isinstance(client, RedisCluster):
        cluster: Any = client  # redis-py leaves the node lookups untyped
        nodes = [(str(n.name), cluster.get_redis_connection(n)) for n in cluster.get_primaries()]
    else:
        nodes = [("", client)]  # named once connected (Sentinel finds the address then)
    out = []
    for known, node in nodes:
        info: dict[str, Any] = node.info("memory", "errorstats")
        name = known or _server_name(node)
        oom = info.get("errorstat_OOM") or {}
        out.append(MemoryUse(
            name, int(info.get("used_memory", 0)) - int(info.get("mem_not_counted_for_evict", 0)),
            int(info.get("maxmemory", 0)), str(info.get("maxmemory_policy", "")),
            int(oom.get("count", 0)) if isinstance(oom, dict) else 0))
    return out


def _server_name(client: Any) -> str:
    """``host:port`` (or the socket path) of a single server, or of the primary a Sentinel
    client found last."""
    pool: Any = client.connection_pool
    kwargs = pool.connection_kwargs
    if kwargs.get("path"):
        return str(kwargs["path"])
    host, port = kwargs.get("host"), kwargs.get("port")
    if host is None:
        host, port = getattr(pool, "master_address", None) or ("?", "?")
    return f"{host}:{port}"


def shard_owners(client: RedisClient, shards: Sequence[ShardKeys]) -> list[str]:
    """The lease holder of each shard ('' for none): one GET per shard, pipelined."""
    owners: list[str] = []
    for group in _groups(shards, PIPELINE_SHARDS):
        with client.pipeline(transaction=False) as pipe:
            for keys in group:
                pipe.get(keys.owner)
            owners.extend(text(o) if o is not None else "" for o in pipe.execute())
    return owners


def live_reporters(client: RedisClient, key: str, now_ms: int) -> int:
    """Reporter processes whose heartbeat deadline is after ``now_ms``."""
    return int(client.zcount(key, f"({now_ms}", "+inf"))


def _groups(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]
