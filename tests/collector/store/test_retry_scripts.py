"""The retry side of the batch life cycle (release, nack, take_retries, extend, reap,
replay, purge, shard_lease) through ``Scripts`` on real servers."""

from __future__ import annotations

from typing import Any

import redis

from collector.store import RetryState
from tests.support.entries import now_ms, numbered, store
from tests.support.polling import wait_until
from tests.support.scriptcalls import Scripts
from tests.support.scripting import (
    GAME,
    KEYS,
    LEASE_MS,
    MAX_AGE_MS,
    SCHEMA,
    TOKEN,
    claim,
    meta,
    snapshot,
)
from tests.support.stored import shard_stats

# -- release, nack, take_retries -----------------------------------------------------------


def test_release_returns_the_batch_without_charging_an_attempt(
    client: redis.Redis, scripts: Scripts
) -> None:
    entries = numbered(GAME, 7)
    store(scripts, SCHEMA, GAME, entries)
    claim(scripts)

    assert scripts.release(KEYS, "b1.0", TOKEN) is True

    assert client.zcard(KEYS.inflight) == 0
    assert client.zrange(KEYS.retry, 0, -1) == [b"b1.0"]
    assert meta(client, "b1.0")["a"] == 0
    assert meta(client, "b1.0")["t"] == ""
    # the same call again (a resend after a lost reply): the same answer, released once
    assert scripts.release(KEYS, "b1.0", TOKEN) is True
    assert shard_stats(client, KEYS)["batches_released"] == 1
    assert scripts.release(KEYS, "b1.0", "token-x") is False  # not held by anyone
    [batch] = scripts.take_retries(KEYS, "token-2", LEASE_MS, 10)
    assert (batch.batch_id, batch.game, batch.attempts, batch.entries) == ("b1.0", GAME, 0, entries)
    assert client.zrange(KEYS.retry, 0, -1) == []
    assert client.zrange(KEYS.inflight, 0, -1) == [b"b1.0"]
    assert meta(client, "b1.0")["t"] == "token-2"


def test_release_with_a_wrong_token_changes_nothing(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 7))
    claim(scripts)
    before = snapshot(client)
    assert scripts.release(KEYS, "b1.0", "someone-else") is False
    assert snapshot(client) == before


def nack(
    scripts: Scripts,
    token: str = TOKEN,
    *,
    permanent: bool = False,
    min_delay_ms: int = 0,
    max_attempts: int = 3,
    dead_max: int = 100,
) -> Any:
    return scripts.nack(
        KEYS,
        "b1.0",
        token,
        permanent=permanent,
        min_delay_ms=min_delay_ms,
        initial_ms=10_000,
        max_ms=60_000,
        max_attempts=max_attempts,
        jitter=0.5,
        dead_max=dead_max,
        reason="HTTP 503: busy",
    )


def test_nack_schedules_a_retry_with_backoff(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 5))
    claim(scripts)
    before = now_ms()

    result = nack(scripts)

    assert (result.state, result.delay_ms) == ("retry", 5_000)  # jitter 0.5 of 10 s
    assert type(result.state) is RetryState
    [(batch_id, due)] = client.zrange(KEYS.retry, 0, -1, withscores=True)
    assert batch_id == b"b1.0"
    assert due >= before + 5_000
    assert client.zcard(KEYS.inflight) == 0
    assert meta(client, "b1.0")["a"] == 1
    assert scripts.take_retries(KEYS, "token-2", LEASE_MS, 10) == []  # not due yet
    assert shard_stats(client, KEYS)["batches_retried"] == 1


def test_nack_honours_the_least_delay(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 5))
    claim(scripts)
    assert nack(scripts, min_delay_ms=7_000).delay_ms == 7_000


def test_backoff_doubles_up_to_the_longest_delay(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 1))
    claim(scripts)
    delays = []
    for _ in range(5):
        result = scripts.nack(
            KEYS,
            "b1.0",
            TOKEN,
            permanent=False,
            min_delay_ms=0,
            initial_ms=1_000,
            max_ms=5_000,
            max_attempts=10,
            jitter=0.999,
            dead_max=100,
            reason="busy",
        )
        delays.append(result.delay_ms)
        client.zadd(KEYS.retry, {"b1.0": 0})  # due now
        assert [b.batch_id for b in scripts.take_retries(KEYS, TOKEN, LEASE_MS, 10)] == ["b1.0"]
    assert delays == [999, 1998, 3996, 4995, 4995]  # full jitter of min(5 s, 1 s * 2^n)


def test_nack_dead_letters_a_permanent_rejection(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 5))
    claim(scripts)

    assert nack(scripts, permanent=True).state == "dead"

    assert client.lrange(KEYS.dead, 0, -1) == [b"b1.0"]
    assert client.zcard(KEYS.retry) == 0
    assert client.zcard(KEYS.inflight) == 0
    assert meta(client, "b1.0")["r"] == "HTTP 503: busy"
    assert shard_stats(client, KEYS)["dead_events"] == 5
    assert nack(scripts).state == "dead"  # the same call again: its answer, nothing more
    assert client.lrange(KEYS.dead, 0, -1) == [b"b1.0"]
    assert shard_stats(client, KEYS)["dead_events"] == 5
    assert nack(scripts, "token-x").state == "lost"


def test_nack_dead_letters_after_the_last_attempt(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 5))
    claim(scripts)
    states = []
    token = TOKEN
    for attempt in range(3):
        states.append(nack(scripts, token, max_attempts=3).state)
        if states[-1] == "retry":
            client.zadd(KEYS.retry, {"b1.0": 0})  # due now
            token = f"token-{attempt + 2}"
            [batch] = scripts.take_retries(KEYS, token, LEASE_MS, 10)
            assert batch.attempts == attempt + 1
    assert states == ["retry", "retry", "dead"]
    assert shard_stats(client, KEYS)["dead_batches"] == 1


def test_nack_with_a_wrong_token_is_lost(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 5))
    claim(scripts)
    before = snapshot(client)
    assert nack(scripts, "someone-else").state == "lost"
    assert snapshot(client) == before


def test_dead_letters_are_capped(client: redis.Redis, scripts: Scripts) -> None:
    for i in range(3):
        store(scripts, SCHEMA, GAME, numbered(GAME, 2, start=2 * i))
        scripts.claim(KEYS, GAME, f"d{i}", TOKEN, 128, 1, LEASE_MS, MAX_AGE_MS, 0)
        result = scripts.nack(
            KEYS,
            f"d{i}.0",
            TOKEN,
            permanent=True,
            min_delay_ms=0,
            initial_ms=1,
            max_ms=1,
            max_attempts=3,
            jitter=0.0,
            dead_max=2,
            reason="no",
        )
        assert result.state == "dead"
    assert client.lrange(KEYS.dead, 0, -1) == [b"d2.0", b"d1.0"]
    assert not client.hexists(KEYS.batches, "d0.0")
    assert not client.hexists(KEYS.payloads, "d0.0")
    assert shard_stats(client, KEYS)["dead_dropped"] == 2


def test_take_retries_filters_by_game(client: redis.Redis, scripts: Scripts) -> None:
    # a second game in the same shard, so one retry queue holds both
    other = next(g for g in (f"g-{i}" for i in range(100)) if SCHEMA.for_game(g) == KEYS)
    for n, game in enumerate((GAME, other)):
        store(scripts, SCHEMA, game, numbered(game, 3))
        scripts.claim(KEYS, game, f"r{n}", TOKEN, 128, 1, LEASE_MS, MAX_AGE_MS, 0)
        scripts.release(KEYS, f"r{n}.0", TOKEN)

    only = scripts.take_retries(KEYS, "token-2", LEASE_MS, 10, other)
    assert [(b.batch_id, b.game) for b in only] == [("r1.0", other)]
    rest = scripts.take_retries(KEYS, "token-3", LEASE_MS, 10)
    assert [(b.batch_id, b.game) for b in rest] == [("r0.0", GAME)]


# -- extend, reap --------------------------------------------------------------------------


def test_extend_renews_only_a_held_lease(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 3))
    claim(scripts, lease_ms=1_000)
    first = client.zscore(KEYS.inflight, "b1.0")
    assert first is not None

    assert scripts.extend(KEYS, "b1.0", TOKEN, 60_000) is True
    renewed = client.zscore(KEYS.inflight, "b1.0")
    assert renewed is not None and renewed >= first + 59_000
    assert scripts.extend(KEYS, "b1.0", "someone-else", 120_000) is False
    assert client.zscore(KEYS.inflight, "b1.0") == renewed
    scripts.ack(KEYS, "b1.0", TOKEN)
    assert scripts.extend(KEYS, "b1.0", TOKEN, 60_000) is False


def test_reap_returns_expired_leases_to_retry(client: redis.Redis, scripts: Scripts) -> None:
    entries = numbered(GAME, 3)
    store(scripts, SCHEMA, GAME, entries)
    claim(scripts, lease_ms=1)

    assert wait_until(lambda: scripts.reap(KEYS, 10, 3, 100) == (1, 0), what="the reap")

    assert client.zcard(KEYS.inflight) == 0
    assert client.zrange(KEYS.retry, 0, -1) == [b"b1.0"]
    assert meta(client, "b1.0")["a"] == 1
    assert shard_stats(client, KEYS)["batches_reaped"] == 1
    assert scripts.ack(KEYS, "b1.0", TOKEN) == -1  # the crashed worker's token is void
    [batch] = scripts.take_retries(KEYS, "token-2", LEASE_MS, 10)
    assert batch.entries == entries


def test_reap_leaves_live_leases_alone(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 3))
    claim(scripts)
    before = snapshot(client)
    assert scripts.reap(KEYS, 10, 3, 100) == (0, 0)
    assert snapshot(client) == before


def test_reap_dead_letters_out_of_attempts(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 3))
    claim(scripts, lease_ms=1)
    assert wait_until(lambda: scripts.reap(KEYS, 10, 1, 100) == (0, 1), what="the reap")
    assert client.lrange(KEYS.dead, 0, -1) == [b"b1.0"]
    assert shard_stats(client, KEYS)["dead_events"] == 3


# -- replay, purge -------------------------------------------------------------------------


def test_replay_and_purge_dead_letters(client: redis.Redis, scripts: Scripts) -> None:
    for i in range(2):
        store(scripts, SCHEMA, GAME, numbered(GAME, 4, start=4 * i))
        scripts.claim(KEYS, GAME, f"d{i}", TOKEN, 128, 1, LEASE_MS, MAX_AGE_MS, 0)
        scripts.nack(
            KEYS,
            f"d{i}.0",
            TOKEN,
            permanent=True,
            min_delay_ms=0,
            initial_ms=1,
            max_ms=1,
            max_attempts=3,
            jitter=0.0,
            dead_max=100,
            reason="no",
        )

    assert scripts.replay(KEYS, "d0.0") == (1, 4, 0)
    assert scripts.replay(KEYS, "d0.0") == (0, 0, 0)
    assert client.zrange(KEYS.retry, 0, -1) == [b"d0.0"]
    assert meta(client, "d0.0")["a"] == 0
    assert scripts.purge(KEYS) == (1, 4)
    assert client.llen(KEYS.dead) == 0
    assert not client.hexists(KEYS.payloads, "d1.0")
    counters = shard_stats(client, KEYS)
    assert (counters["replayed"], counters["purged"], counters["dead_events"]) == (4, 4, 8)


# -- shard leases --------------------------------------------------------------------------


def test_shard_lease_has_one_holder(client: redis.Redis, scripts: Scripts) -> None:
    assert scripts.shard_lease(KEYS, "p1", 10_000) is True
    assert scripts.shard_lease(KEYS, "p2", 10_000) is False
    assert scripts.shard_lease(KEYS, "p1", 10_000) is True  # renew
    assert scripts.shard_lease(KEYS, "p2", 0) is False  # cannot give up what it lacks
    assert client.get(KEYS.owner) == b"p1"
    assert scripts.shard_lease(KEYS, "p1", 0) is False
    assert client.get(KEYS.owner) is None
    assert scripts.shard_lease(KEYS, "p2", 10_000) is True
