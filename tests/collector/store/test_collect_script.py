"""collect.lua through ``Scripts.collect`` and ``KeySchema`` on real servers."""

from __future__ import annotations

import orjson
import pytest
import redis

from collector.store import KeySchema, encode_entry
from tests.support.scriptcalls import Scripts
from tests.support.stored import stats_of

SCHEMA = KeySchema("t", 16)
GAME = "game-1"
CAP = 10
TTL = 3600


def entry(i: int) -> bytes:
    return encode_entry(1_700_000_000_000 + i, orjson.dumps({"i": i}))


@pytest.fixture
def scripts(r: redis.Redis) -> Scripts:
    return Scripts(r)


def push(
    scripts: Scripts,
    entries: list[bytes],
    *,
    game: str = GAME,
    cap: int = CAP,
    ttl: int = TTL,
    pre_evicted: int = 0,
    dropped_full: int = 0,
    dropped_large: int = 0,
) -> int:
    reply = scripts.collect(
        SCHEMA.for_game(game), game, cap, ttl, entries, pre_evicted, dropped_full, dropped_large
    )
    assert isinstance(reply, int)
    return reply


@pytest.mark.parametrize("before", [0, 1, CAP - 1, CAP, CAP + 1])
@pytest.mark.parametrize("pushed", [1, 3])
def test_cap_evicts_the_oldest(r: redis.Redis, scripts: Scripts, before: int, pushed: int) -> None:
    queue = SCHEMA.for_game(GAME).queue(GAME)
    old = [entry(-1000 + i) for i in range(before)]
    if old:  # set up directly: CAP + 1 stands for a list written under a larger cap
        r.rpush(queue, *old)
    new = [entry(i) for i in range(pushed)]

    evicted = push(scripts, new)

    expected = (old + new)[-CAP:]
    assert evicted == max(0, before + pushed - CAP)
    assert r.lrange(queue, 0, -1) == expected
    stats = stats_of(r, SCHEMA, GAME)
    assert stats["stored"] == pushed
    assert stats.get("evicted", 0) == evicted


@pytest.mark.parametrize(
    ("count", "cap", "before"),
    [
        (2500, 5000, 0),  # more than one 1000-entry RPUSH slice, nothing evicted
        (2500, 1000, 0),  # the cap trims within one call
        (2500, 3000, 700),  # slices on top of an existing list, partly evicted
        (9000, 20000, 0),  # more than Lua's 8000-value unpack limit in one call
    ],
)
def test_many_events_in_one_call(
    r: redis.Redis, scripts: Scripts, count: int, cap: int, before: int
) -> None:
    queue = SCHEMA.for_game(GAME).queue(GAME)
    old = [entry(-10_000 + i) for i in range(before)]
    if old:
        push(scripts, old, cap=cap)
    new = [entry(i) for i in range(count)]

    evicted = push(scripts, new, cap=cap)

    assert evicted == max(0, before + count - cap)
    assert r.llen(queue) == min(cap, before + count)
    assert r.lrange(queue, 0, -1) == (old + new)[-cap:]
    stats = stats_of(r, SCHEMA, GAME)
    assert stats["stored"] == before + count
    assert stats.get("evicted", 0) == evicted


def test_entries_are_stored_byte_for_byte(r: redis.Redis, scripts: Scripts) -> None:
    entries = [
        encode_entry(1_234_567_890_123, b'{"a":"\\u00e9\\n","b":[1,2]}'),
        encode_entry(0, b"{}"),
    ]
    push(scripts, entries)
    assert r.lrange(SCHEMA.for_game(GAME).queue(GAME), 0, -1) == entries


def test_ttl_is_set_and_refreshed_on_every_push(r: redis.Redis, scripts: Scripts) -> None:
    keys = SCHEMA.for_game(GAME)
    push(scripts, [entry(1)], ttl=1000)
    assert 990 <= r.ttl(keys.queue(GAME)) <= 1000

    r.pexpire(keys.queue(GAME), 1500)  # as if most of the TTL had passed
    push(scripts, [entry(2)], ttl=1000)
    assert r.ttl(keys.queue(GAME)) > 900

    push(scripts, [entry(3)], ttl=5)  # a shorter TTL applies too: it is set, not only extended
    assert 0 < r.pttl(keys.queue(GAME)) <= 5000

    # shared state carries no TTL
    assert r.ttl(keys.active) == -1
    assert r.ttl(keys.ring) == -1
    assert r.ttl(keys.stats) == -1


def test_ttl_applies_after_a_trim_that_keeps_events(r: redis.Redis, scripts: Scripts) -> None:
    keys = SCHEMA.for_game(GAME)
    push(scripts, [entry(i) for i in range(CAP * 3)], ttl=77)
    assert r.llen(keys.queue(GAME)) == CAP
    assert 0 < r.ttl(keys.queue(GAME)) <= 77


def test_registration_is_idempotent(r: redis.Redis, scripts: Scripts) -> None:
    games = ["alpha", "beta", "gamma"]
    schema_one = KeySchema("t", 1)  # one shard, so every game shares the ring
    keys = schema_one.shard(0)
    for i in range(40):
        for game in games:
            scripts.collect(keys, game, CAP, TTL, [entry(i)])
    assert sorted(r.smembers(keys.active)) == [g.encode() for g in games]
    assert r.zrange(keys.ring, 0, -1) == [g.encode() for g in games]


def test_reported_drop_counts_land_in_stats(r: redis.Redis, scripts: Scripts) -> None:
    evicted = push(scripts, [entry(1), entry(2)], pre_evicted=3, dropped_full=4, dropped_large=5)
    assert evicted == 3
    assert stats_of(r, SCHEMA, GAME) == {
        "stored": 5,
        "evicted": 3,
        "dropped_buffer_full": 4,
        "dropped_too_large": 5,
    }
    push(scripts, [], dropped_full=2, dropped_large=1)
    stats = stats_of(r, SCHEMA, GAME)
    assert stats["dropped_buffer_full"] == 6
    assert stats["dropped_too_large"] == 6
    assert stats["stored"] == 5


def test_counts_alone_do_not_register_an_empty_game(r: redis.Redis, scripts: Scripts) -> None:
    keys = SCHEMA.for_game(GAME)
    assert push(scripts, [], dropped_full=7) == 0
    assert not r.exists(keys.queue(GAME))
    assert r.sismember(keys.active, GAME) == 0
    assert r.zcard(keys.ring) == 0
    assert stats_of(r, SCHEMA, GAME) == {"dropped_buffer_full": 7}


def test_pre_evicted_events_count_as_stored_and_evicted(r: redis.Redis, scripts: Scripts) -> None:
    push(scripts, [entry(i) for i in range(CAP)])
    evicted = push(scripts, [entry(100 + i) for i in range(4)], pre_evicted=6)
    assert evicted == 6 + 4
    stats = stats_of(r, SCHEMA, GAME)
    assert stats["stored"] == CAP + 4 + 6
    assert stats["evicted"] == 10
    assert r.llen(SCHEMA.for_game(GAME).queue(GAME)) == CAP


def test_games_in_one_shard_keep_separate_lists(r: redis.Redis, scripts: Scripts) -> None:
    schema = KeySchema("t", 1)
    keys = schema.shard(0)
    scripts.collect(keys, "a", CAP, TTL, [entry(1)])
    scripts.collect(keys, "b", CAP, TTL, [entry(2), entry(3)])
    assert r.lrange(keys.queue("a"), 0, -1) == [entry(1)]
    assert r.lrange(keys.queue("b"), 0, -1) == [entry(2), entry(3)]
    assert r.hget(keys.stats, "stored") == b"3"
