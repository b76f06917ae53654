"""Reads of shards' buffers and state: the ring, game states, a shard's whole state, levels."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError

if TYPE_CHECKING:
    from collector.store._backends import RedisClient

from collector.counters import Counter
from collector.store._entries import head_time_ms
from collector.store._keys import ShardKeys
from collector.store._read_replies import (
    PIPELINE_GAMES,
    PIPELINE_SHARDS,
    as_count,
    as_text,
    batch_meta,
    execute,
    game_name,
    groups,
)
from collector.store._views import GameState, GameView, RingSlice, ShardLevels, ShardView
from collector.text import printable


def ring(
    client: RedisClient, keys: ShardKeys, after: str, count: int, known: Sequence[str] = ()
) -> RingSlice:
    """Up to ``count`` active games whose names sort after ``after`` ('' = from the first):
    O(log n + count) whatever the number of games in the shard.  The states of the ``known``
    games (those the last read of this page found) come in the same round trip."""
    with client.pipeline(transaction=False) as pipe:
        pipe.zrangebylex(keys.ring, f"({after}" if after else "-", "+", 0, count)
        pipe.zcard(keys.ring)
        pipe.zcard(keys.retry)
        pipe.get(keys.marker)
        pipe.hmget(keys.stats, [*_OUTSTANDING, Counter.QUARANTINED_RECORDS])
        pipe.type(keys.legacy_ring)
        _queue_heads(pipe, keys, known)
        replies = execute(pipe)
    replies, heads = replies[:6], replies[6:]
    wrong = any(isinstance(r, ResponseError) for r in replies)
    names, length, retries, marker, counts, legacy = (
        None if isinstance(r, ResponseError) else r for r in replies
    )
    games: list[str] = []
    junk: list[bytes] = []
    for name in names or ():
        game = game_name(name)
        if game is None:
            junk.append(bytes(name))
        else:
            games.append(game)
    stored, evicted, stale, delivered, dead, replayed, quarantined_events, quarantined = (
        as_count(c) for c in counts or [None] * (len(_OUTSTANDING) + 1)
    )
    kind = as_text(legacy or "none")
    return RingSlice(
        games,
        as_count(length),
        as_count(retries),
        None if marker is None else as_text(marker),
        stored - evicted - stale - delivered - dead + replayed - quarantined_events,
        kind == "list",
        junk,
        wrong or kind not in ("list", "none"),
        quarantined,
        _states(known, heads),
    )


# The counters an outstanding count is made of (see RingSlice).
_OUTSTANDING = (
    Counter.STORED,
    Counter.EVICTED,
    Counter.STALE,
    Counter.DELIVERED,
    Counter.DEAD_EVENTS,
    Counter.REPLAYED,
    Counter.QUARANTINED_EVENTS,
)


def game_states(client: RedisClient, keys: ShardKeys, games: list[str]) -> list[GameState]:
    """Length and oldest collect time of each game's buffer, in one round trip."""
    if not games:
        return []
    with client.pipeline(transaction=False) as pipe:
        _queue_heads(pipe, keys, games)
        replies = execute(pipe)
    return _states(games, replies)


def _queue_heads(pipe: Any, keys: ShardKeys, games: Sequence[str]) -> None:
    for game in games:
        pipe.llen(keys.queue(game))
        pipe.lindex(keys.queue(game), 0)


def _states(games: Sequence[str], replies: Sequence[Any]) -> list[GameState]:
    return [_game_state(game, replies[2 * i], replies[2 * i + 1]) for i, game in enumerate(games)]


def _game_state(game: str, length: Any, head: Any) -> GameState:
    """A buffer of another type than a list reads as empty: the sweeper then claims the game,
    and the claim sets the key aside and unregisters the game."""
    if isinstance(length, ResponseError) or isinstance(head, ResponseError):
        return GameState(game, 0, None)
    return GameState(game, int(length), head_time_ms(head) if head else None)


def read_shard(
    client: RedisClient,
    keys: ShardKeys,
    read_state: Callable[[list[str]], Sequence[Any]],
    tries: int = 5,
) -> ShardView:
    """One shard's state, read atomically by ``read_state`` (the ``read_shard`` script: a
    MULTI would be refused while Redis is at maxmemory) so that no batch is caught between
    two states.

    The games to read come from a first look at the ring; if the ring gained a game before
    the atomic read ran, it is read again."""
    first: list[Any] = _ring_names(client, keys)
    games = [g for g in (game_name(n) for n in first) if g is not None]
    for _ in range(tries):
        ring_now, inflight, retry, dead, flat_stats, owner, flat_metas, flat_problems, *queues = (
            read_state(games)
        )
        now_ring = [g for g in (game_name(n) for n in ring_now) if g is not None]
        if set(now_ring) <= set(games):
            break
        games = now_ring
    else:
        raise RuntimeError(f"shard {keys.shard}: its games kept changing; try again")
    problems = [
        f"{as_text(k)} is a {as_text(t)}"
        for k, t in zip(flat_problems[0::2], flat_problems[1::2], strict=True)
    ]
    problems += [
        f"{keys.ring} holds {as_text(n)!r}, not a game name"
        for n in ring_now
        if game_name(n) is None
    ]
    stats = dict(zip(flat_stats[0::2], flat_stats[1::2], strict=True))
    metas = dict(zip(flat_metas[0::2], flat_metas[1::2], strict=True))
    lengths = dict(zip(games, queues[0::2], strict=True))
    heads = dict(zip(games, queues[1::2], strict=True))
    views = [
        GameView(g, keys.shard, int(lengths[g]), head_time_ms(heads[g]) if heads[g] else None)
        for g in now_ring
    ]
    pending = 0
    for batch_id in (*inflight, *retry):
        if batch_id not in metas:
            continue
        meta = batch_meta(metas[batch_id])
        if meta is None:
            problems.append(f"{keys.batches} {as_text(batch_id)}: metadata that cannot be used")
        else:
            pending += meta["n"]
    return ShardView(
        shard=keys.shard,
        owner=printable(as_text(owner or b"")),
        buffered=sum(v.buffered for v in views),
        games=views,
        inflight=len(inflight),
        retry=len(retry),
        dead=int(dead),
        pending_events=pending,
        counters={as_text(k): as_count(v) for k, v in stats.items()},
        problems=[printable(p) for p in problems],
    )


def _ring_names(client: RedisClient, keys: ShardKeys) -> list[Any]:
    try:
        return list(client.zrange(keys.ring, 0, -1))
    except ResponseError:  # not a sorted set: read_shard names it
        return []


def shard_levels(
    client: RedisClient, shards: Sequence[ShardKeys], now_ms: int
) -> list[ShardLevels]:
    """Each shard's games with their buffer length and oldest entry, batches in flight,
    waiting for a retry (and due by ``now_ms``) and dead-listed; two pipelined rounds:
    five commands per shard, then two per game."""
    counts: list[tuple[list[str], int, int, int, int]] = []
    for group in groups(shards, PIPELINE_SHARDS):
        with client.pipeline(transaction=False) as pipe:
            for keys in group:
                pipe.zrange(keys.ring, 0, -1)
                pipe.zcard(keys.inflight)
                pipe.zcard(keys.retry)
                pipe.zcount(keys.retry, "-inf", now_ms)
                pipe.llen(keys.dead)
            replies = execute(pipe)
        for i in range(len(group)):
            ring, inflight, retry, due, dead = replies[5 * i : 5 * i + 5]
            names = [] if isinstance(ring, ResponseError) else ring
            games = list(dict.fromkeys(g for g in map(game_name, names) if g is not None))
            counts.append(
                (games, as_count(inflight), as_count(retry), as_count(due), as_count(dead))
            )
    queues = [
        (keys, game) for keys, (games, *_) in zip(shards, counts, strict=True) for game in games
    ]
    states: dict[tuple[int, str], GameState] = {}
    for group_of_games in groups(queues, PIPELINE_GAMES):
        with client.pipeline(transaction=False) as pipe:
            for keys, game in group_of_games:
                pipe.llen(keys.queue(game))
                pipe.lindex(keys.queue(game), 0)
            replies = execute(pipe)
        for i, (keys, game) in enumerate(group_of_games):
            states[keys.shard, game] = _game_state(game, replies[2 * i], replies[2 * i + 1])
    return [
        ShardLevels(keys.shard, [states[keys.shard, g] for g in games], inflight, retry, due, dead)
        for keys, (games, inflight, retry, due, dead) in zip(shards, counts, strict=True)
    ]
