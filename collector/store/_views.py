"""Read-only views of a shard: what the sweeper, ``status`` and ``dead`` need to see.

Plain commands, never in a MULTI (Redis refuses to queue any command in a transaction
while it is at maxmemory); each read touches one shard's keys (one hash slot).  The one
atomic read, a shard's whole state, is the ``read_shard`` script (``no-writes``).

No bad record makes a reader fail: a key of another type than the shard needs reads as
empty (and is named, so the sweeper can have the scripts set it aside), metadata that does
not decode and counters that are not integers are shown for what they are, names that are
not text are shown escaped, and text that is shown (ids, game names and reasons in batch
metadata, alerts) has its control characters escaped (``collector.text``).  Only Redis not
answering raises.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

if TYPE_CHECKING:
    from collector.store._backends import RedisClient

from collector.counters import Counter
from collector.store._entries import head_time_ms, split_entries
from collector.store._keys import ShardKeys, validate_game
from collector.text import printable

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
    # What the scripts must set aside (collector.store.SetAside): ring members that are not
    # game names, and whether a key read here was of another type than the shard needs.
    junk: list[bytes] = field(default_factory=list)
    wrong_type: bool = False
    quarantined: int = 0  # records the shard's scripts have set aside so far (its counter)


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
    # Records the shard holds that the scripts will set aside when they meet them: keys of
    # another type, batch metadata that does not decode ("<key> is a <type>", ...).
    problems: list[str] = field(default_factory=list)


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
class QuarantineRecord:
    """A record the scripts moved to a shard's quarantine (``lua/_guard.lua``)."""

    shard: int
    key: str
    field: str  # the batch id, hash field or ring member; '' for a whole key
    found: str  # the type found where another belongs; '' for a record of the right type
    reason: str
    sample: str  # the record's first bytes
    events: int  # events in it
    script: str
    at: float  # seconds since the epoch


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
        pipe.hmget(keys.stats, [*_OUTSTANDING, Counter.QUARANTINED_RECORDS])
        pipe.type(keys.legacy_ring)
        replies = _execute(pipe)
    wrong = any(isinstance(r, ResponseError) for r in replies)
    names, length, retries, marker, counts, legacy = (
        None if isinstance(r, ResponseError) else r for r in replies)
    games: list[str] = []
    junk: list[bytes] = []
    for name in names or ():
        game = _game_name(name)
        if game is None:
            junk.append(bytes(name))
        else:
            games.append(game)
    stored, evicted, stale, delivered, dead, replayed, quarantined_events, quarantined = (
        _count(c) for c in counts or [None] * (len(_OUTSTANDING) + 1))
    kind = _text(legacy or "none")
    return RingSlice(games, _count(length), _count(retries),
                     None if marker is None else _text(marker),
                     stored - evicted - stale - delivered - dead + replayed - quarantined_events,
                     kind == "list", junk, wrong or kind not in ("list", "none"), quarantined)


# The counters an outstanding count is made of (see RingSlice).
_OUTSTANDING = (Counter.STORED, Counter.EVICTED, Counter.STALE, Counter.DELIVERED,
                Counter.DEAD_EVENTS, Counter.REPLAYED, Counter.QUARANTINED_EVENTS)


def _execute(pipe: Any) -> list[Any]:
    """A pipeline's replies, a command refused (a key of another type) as its error in place;
    Redis not answering still raises."""
    replies: list[Any] = pipe.execute(raise_on_error=False)
    for reply in replies:
        if isinstance(reply, Exception) and not isinstance(reply, ResponseError):
            raise reply
    return replies


def _text(value: bytes | str) -> str:
    """A reply as text, bytes that are not UTF-8 escaped rather than refused."""
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else value


def _count(value: Any) -> int:
    """A counter's value; one that is not an integer (junk, or a refused read) reads as 0."""
    if isinstance(value, Exception):
        return 0
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _game_name(name: bytes | str) -> str | None:
    """A ring member as a game name, or None if it is not one (junk to set aside)."""
    try:
        return validate_game(name.decode() if isinstance(name, bytes) else name)
    except (UnicodeDecodeError, TypeError, ValueError):
        return None


def _meta(raw: bytes | str | None) -> dict[str, Any] | None:
    """Batch metadata, or None if it does not decode or lacks its fields (the next script
    that meets it sets it aside)."""
    try:
        meta = json.loads(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None
    if (not isinstance(meta, dict) or not isinstance(meta.get("g"), str)
            or not isinstance(meta.get("n"), int) or not isinstance(meta.get("a"), int)):
        return None
    return meta


def game_states(client: RedisClient, keys: ShardKeys, games: list[str]) -> list[GameState]:
    """Length and oldest collect time of each game's buffer, in one round trip."""
    if not games:
        return []
    with client.pipeline(transaction=False) as pipe:
        for game in games:
            pipe.llen(keys.queue(game))
            pipe.lindex(keys.queue(game), 0)
        replies = _execute(pipe)
    return [_game_state(game, replies[2 * i], replies[2 * i + 1])
            for i, game in enumerate(games)]


def _game_state(game: str, length: Any, head: Any) -> GameState:
    """A buffer of another type than a list reads as empty: the sweeper then claims the game,
    and the claim sets the key aside and unregisters the game."""
    if isinstance(length, ResponseError) or isinstance(head, ResponseError):
        return GameState(game, 0, None)
    return GameState(game, int(length), head_time_ms(head) if head else None)


def read_shard(client: RedisClient, keys: ShardKeys,
               read_state: Callable[[list[str]], Sequence[Any]], tries: int = 5) -> ShardView:
    """One shard's state, read atomically by ``read_state`` (the ``read_shard`` script: a
    MULTI would be refused while Redis is at maxmemory) so that no batch is caught between
    two states.

    The games to read come from a first look at the ring; if the ring gained a game before
    the atomic read ran, it is read again."""
    first: list[Any] = _ring_names(client, keys)
    games = [g for g in (_game_name(n) for n in first) if g is not None]
    for _ in range(tries):
        ring_now, inflight, retry, dead, flat_stats, owner, flat_metas, flat_problems, *queues = (
            read_state(games))
        now_ring = [g for g in (_game_name(n) for n in ring_now) if g is not None]
        if set(now_ring) <= set(games):
            break
        games = now_ring
    else:
        raise RuntimeError(f"shard {keys.shard}: its games kept changing; try again")
    problems = [f"{_text(k)} is a {_text(t)}"
                for k, t in zip(flat_problems[0::2], flat_problems[1::2], strict=True)]
    problems += [f"{keys.ring} holds {_text(n)!r}, not a game name"
                 for n in ring_now if _game_name(n) is None]
    stats = dict(zip(flat_stats[0::2], flat_stats[1::2], strict=True))
    metas = dict(zip(flat_metas[0::2], flat_metas[1::2], strict=True))
    lengths = dict(zip(games, queues[0::2], strict=True))
    heads = dict(zip(games, queues[1::2], strict=True))
    views = [GameView(g, keys.shard, int(lengths[g]),
                      head_time_ms(heads[g]) if heads[g] else None) for g in now_ring]
    pending = 0
    for batch_id in (*inflight, *retry):
        if batch_id not in metas:
            continue
        meta = _meta(metas[batch_id])
        if meta is None:
            problems.append(f"{keys.batches} {_text(batch_id)}: metadata that cannot be used")
        else:
            pending += meta["n"]
    return ShardView(
        shard=keys.shard, owner=printable(_text(owner or b"")),
        buffered=sum(v.buffered for v in views),
        games=views, inflight=len(inflight), retry=len(retry), dead=int(dead),
        pending_events=pending,
        counters={_text(k): _count(v) for k, v in stats.items()},
        problems=[printable(p) for p in problems],
    )


def _ring_names(client: RedisClient, keys: ShardKeys) -> list[Any]:
    try:
        return list(client.zrange(keys.ring, 0, -1))
    except ResponseError:  # not a sorted set: read_shard names it
        return []


def dead_batches(client: RedisClient, keys: ShardKeys, limit: int | None, game: str = "",
                 before: float | None = None, page: int = 1000) -> list[DeadBatch]:
    """The shard's newest dead letters, newest first: up to ``limit`` (None: all) of those of
    ``game`` (if set) that died before ``before`` (seconds since the epoch, if set)."""
    out: list[DeadBatch] = []
    seen: set[str] = set()  # a dead letter pushed meanwhile moves the rest down a place
    start = 0
    while limit is None or len(out) < limit:
        try:
            ids = client.lrange(keys.dead, start, start + page - 1)
        except ResponseError:  # not a list: the next script that writes it sets it aside
            break
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
    try:
        metas = client.hmget(keys.batches, ids)
    except ResponseError:  # not a hash: the next script that writes it sets it aside
        return out
    for batch_id, raw in zip(ids, metas, strict=True):
        if raw:
            meta = _meta(raw)
            if meta is None:  # shown for what it is; replay or purge set it aside
                out.append(DeadBatch(_text(batch_id), keys.shard, "?", 0, 0,
                                     "metadata that cannot be used", 0.0))
                continue
            out.append(DeadBatch(_text(batch_id), keys.shard, printable(meta["g"]), meta["n"],
                                 meta["a"], printable(str(meta.get("r", ""))),
                                 _seconds(meta.get("d"))))
    return out


def _seconds(ms: Any) -> float:
    return float(ms) / 1000 if isinstance(ms, int | float) else 0.0


def dead_listed(client: RedisClient, shards: Sequence[ShardKeys], chunk: int = 1000) -> int:
    """Batches on the dead lists of ``shards``, pipelined ``chunk`` shards at a time."""
    total = 0
    for i in range(0, len(shards), chunk):
        with client.pipeline(transaction=False) as pipe:
            for keys in shards[i:i + chunk]:
                pipe.llen(keys.dead)
            total += sum(_count(n) for n in _execute(pipe))
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
            _add_counters(totals, _execute(pipe))
    return totals


def _add_counters(totals: dict[str, int], replies: list[Any]) -> None:
    for stats in replies:
        if isinstance(stats, ResponseError):  # not a hash: set aside by the next script
            continue
        for name, value in stats.items():
            key = _text(name)
            totals[key] = totals.get(key, 0) + _count(value)


def reporters(client: RedisClient, key: str) -> list[Reporter]:
    """Every reporter process in the registry, expired or not, the newest heartbeat first."""
    try:
        entries: list[Any] = client.zrange(key, 0, -1, desc=True, withscores=True)
    except ResponseError:  # not a sorted set: the next heartbeat sets it aside
        return []
    return [Reporter(printable(_text(owner)), int(deadline)) for owner, deadline in entries]


def batch_detail(client: RedisClient, keys: ShardKeys, batch_id: str) -> BatchDetail | None:
    with client.pipeline(transaction=False) as pipe:
        pipe.hget(keys.batches, batch_id)
        pipe.hget(keys.payloads, batch_id)
        raw, payload = (None if isinstance(r, ResponseError) else r for r in _execute(pipe))
    if raw is None:
        return None
    meta = _meta(raw)
    if meta is None:
        return BatchDetail(batch_id, keys.shard, "?", 0, "metadata that cannot be used: "
                           + printable(_text(raw)[:200]), split_entries(payload), [])
    reasons = meta.get("ir")
    return BatchDetail(batch_id, keys.shard, printable(meta["g"]), meta["a"],
                       printable(str(meta.get("r", ""))), split_entries(payload),
                       [printable(str(r)) for r in reasons] if isinstance(reasons, list) else [])


def alerts(client: RedisClient, key: str) -> list[Alert]:
    try:
        raw = {_text(k): v for k, v in client.hgetall(key).items()}
    except ResponseError:  # not a hash: no alerts to show
        return []
    out: list[Alert] = []
    for name, value in raw.items():
        if name.endswith("#count"):
            continue
        try:
            record = json.loads(value)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            record = {"message": f"(unreadable: {_text(value)[:100]!r})"}
        out.append(Alert(printable(name), printable(str(record.get("message", ""))),
                         _seconds(record.get("at")), _count(raw.get(f"{name}#count"))))
    return sorted(out, key=lambda a: -a.at)


def quarantine(client: RedisClient, shards: Sequence[ShardKeys], limit: int
               ) -> list[QuarantineRecord]:
    """The newest ``limit`` records of each shard's quarantine (one LRANGE per shard,
    pipelined), newest first."""
    out: list[QuarantineRecord] = []
    for group in _groups(shards, PIPELINE_SHARDS):
        with client.pipeline(transaction=False) as pipe:
            for keys in group:
                pipe.lrange(keys.quarantine, 0, limit - 1)
            replies = _execute(pipe)
        for keys, records in zip(group, replies, strict=True):
            if not isinstance(records, ResponseError):
                out += [_quarantined(keys, raw) for raw in records]
    return sorted(out, key=lambda q: -q.at)


def _quarantined(keys: ShardKeys, raw: bytes) -> QuarantineRecord:
    try:
        r = json.loads(raw.decode(errors="replace"))
    except ValueError:
        r = None
    if not isinstance(r, dict):
        r = {"k": keys.quarantine, "r": "a record that does not decode", "v": _text(raw)}

    def field(name: str) -> str:
        value = r.get(name)
        return printable(value) if isinstance(value, str) else ""

    return QuarantineRecord(keys.shard, field("k"), field("f"), field("y"), field("r"),
                            field("v"), _count(r.get("n")), field("s"), _seconds(r.get("at")))


def counter_totals(client: RedisClient, shards: Sequence[ShardKeys]) -> dict[str, int]:
    """The shards' ``stats`` hashes added up: one HGETALL per shard, pipelined."""
    totals: dict[str, int] = {}
    for group in _groups(shards, PIPELINE_SHARDS):
        with client.pipeline(transaction=False) as pipe:
            for keys in group:
                pipe.hgetall(keys.stats)
            _add_counters(totals, _execute(pipe))
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
            replies = _execute(pipe)
        for i in range(len(group)):
            ring, inflight, retry, due, dead = replies[5 * i:5 * i + 5]
            names = [] if isinstance(ring, ResponseError) else ring
            games = list(dict.fromkeys(g for g in map(_game_name, names) if g is not None))
            counts.append((games, _count(inflight), _count(retry), _count(due), _count(dead)))
    queues = [(keys, game) for keys, (games, *_) in zip(shards, counts, strict=True)
              for game in games]
    states: dict[tuple[int, str], GameState] = {}
    for group_of_games in _groups(queues, PIPELINE_GAMES):
        with client.pipeline(transaction=False) as pipe:
            for keys, game in group_of_games:
                pipe.llen(keys.queue(game))
                pipe.lindex(keys.queue(game), 0)
            replies = _execute(pipe)
        for i, (keys, game) in enumerate(group_of_games):
            states[keys.shard, game] = _game_state(game, replies[2 * i], replies[2 * i + 1])
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
            owners.extend("" if o is None or isinstance(o, ResponseError)
                          else printable(_text(o)) for o in _execute(pipe))
    return owners


def live_reporters(client: RedisClient, key: str, now_ms: int) -> int:
    """Reporter processes whose heartbeat deadline is after ``now_ms``."""
    try:
        return int(client.zcount(key, f"({now_ms}", "+inf"))
    except ResponseError:  # not a sorted set: the next heartbeat sets it aside
        return 0


def _groups(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]
