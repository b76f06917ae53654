"""The batch life cycle scripts (claim, ack, nack, release, extend, reap, take_retries,
replay, purge, shard_lease) through ``Scripts`` and ``BatchStore`` on real servers."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from collector._schema import KeySchema, ShardKeys
from collector._scripts import Scripts
from reporter._store import BatchStore
from tests.reporter.helpers import make_config, now_ms, numbered, stats, store, wait_until

SCHEMA = KeySchema("telemetry", 4)
GAME = "game-1"
KEYS = SCHEMA.for_game(GAME)
LEASE_MS = 30_000
MAX_AGE_MS = 180_000
TOKEN = "token-1"


@pytest.fixture
def scripts(client: redis.Redis) -> Scripts:
    return Scripts(client)


def claim(scripts: Scripts, batch_id: str = "b1", *, size: int = 128, most: int = 1,
          lease_ms: int = LEASE_MS, max_age_ms: int = MAX_AGE_MS, linger_ms: int = 0,
          token: str = TOKEN) -> Any:
    return scripts.claim(KEYS, GAME, batch_id, token, size, most, lease_ms, max_age_ms,
                         linger_ms)


def registered(client: redis.Redis) -> tuple[bool, list[bytes]]:
    return bool(client.sismember(KEYS.active, GAME)), client.lrange(KEYS.ring, 0, -1)


def meta(client: redis.Redis, batch_id: str) -> dict[str, Any]:
    raw = client.hget(KEYS.batches, batch_id)
    assert raw is not None, f"no batch {batch_id}"
    return dict(json.loads(raw))


def snapshot(client: redis.Redis, keys: ShardKeys = KEYS) -> dict[str, Any]:
    """Everything a batch script may touch in the shard."""
    return {
        "inflight": client.zrange(keys.inflight, 0, -1, withscores=True),
        "retry": client.zrange(keys.retry, 0, -1, withscores=True),
        "batches": client.hgetall(keys.batches),
        "payloads": client.hgetall(keys.payloads),
        "dead": client.lrange(keys.dead, 0, -1),
        "stats": client.hgetall(keys.stats),
        "queue": client.lrange(keys.queue(GAME), 0, -1),
    }


# -- claim ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("length", "most", "sizes", "left"), [
    (0, 1, [], 0),
    (1, 1, [1], 0),
    (127, 1, [127], 0),
    (128, 1, [128], 0),
    (129, 1, [128], 1),
    (129, 8, [128, 1], 0),
    (300, 2, [128, 128], 44),
    (1025, 8, [128] * 8, 1),
])
def test_claim_takes_exact_batches(client: redis.Redis, scripts: Scripts, length: int,
                                   most: int, sizes: list[int], left: int) -> None:
    entries = numbered(GAME, length)
    if entries:
        store(scripts, SCHEMA, GAME, entries)
    else:  # registered but empty is normal: the last claim or the TTL emptied it
        client.sadd(KEYS.active, GAME)
        client.rpush(KEYS.ring, GAME)

    claimed = claim(scripts, most=most)

    assert [len(batch) for _, batch in claimed.batches] == sizes
    assert [batch_id for batch_id, _ in claimed.batches] == [f"b1.{i}" for i in range(len(sizes))]
    assert claimed.remaining == left
    assert claimed.stale == 0
    queue = client.lrange(KEYS.queue(GAME), 0, -1)
    assert queue == entries[length - left:]
    # LRANGE 0..n-1 then LTRIM n..-1: every event exactly once, in order
    taken = [e for _, batch in claimed.batches for e in batch]
    assert taken + queue == entries
    assert registered(client) == ((True, [GAME.encode()]) if left else (False, []))
    assert client.zcard(KEYS.inflight) == len(sizes)
    for batch_id, batch in claimed.batches:
        assert client.hget(KEYS.payloads, batch_id) == b"\n".join(batch)
        assert meta(client, batch_id) | {"c": 0} == {"g": GAME, "t": TOKEN, "a": 0,
                                                     "n": len(batch), "c": 0}
    counters = stats(client, KEYS)
    assert counters.get("claimed", 0) == length - left
    assert counters.get("batches_claimed", 0) == len(sizes)


def test_claim_keeps_a_game_registered_once(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 200))
    claim(scripts, "b1")
    store(scripts, SCHEMA, GAME, numbered(GAME, 5, start=200))
    assert registered(client) == (True, [GAME.encode()])
    claim(scripts, "b2", most=8)
    assert registered(client) == (False, [])
    store(scripts, SCHEMA, GAME, numbered(GAME, 1, start=205))
    assert registered(client) == (True, [GAME.encode()])


def test_claim_is_idempotent_on_the_batch_id(client: redis.Redis, scripts: Scripts) -> None:
    entries = numbered(GAME, 300)
    store(scripts, SCHEMA, GAME, entries)

    first = claim(scripts, "same", most=2)
    again = claim(scripts, "same", most=2)

    assert again.batches == first.batches
    assert [len(b) for _, b in first.batches] == [128, 128]
    assert again.remaining == first.remaining == 44
    assert client.zcard(KEYS.inflight) == 2
    assert client.hlen(KEYS.batches) == 2
    assert client.lrange(KEYS.queue(GAME), 0, -1) == entries[256:]
    assert stats(client, KEYS)["claimed"] == 256
    assert stats(client, KEYS)["batches_claimed"] == 2

    other = claim(scripts, "other", most=2)
    assert [len(b) for _, b in other.batches] == [44]
    assert other.batches[0][1] == entries[256:]


def test_claim_waits_for_linger_unless_the_batch_is_full(client: redis.Redis,
                                                         scripts: Scripts) -> None:
    fresh = numbered(GAME, 5)
    store(scripts, SCHEMA, GAME, fresh)

    waiting = claim(scripts, "b1", linger_ms=60_000)
    assert waiting.batches == []
    assert waiting.remaining == 5
    assert client.lrange(KEYS.queue(GAME), 0, -1) == fresh
    assert registered(client) == (True, [GAME.encode()])
    assert client.zcard(KEYS.inflight) == 0

    now = claim(scripts, "b2", linger_ms=0)
    assert now.batches == [("b2.0", fresh)]


def test_claim_takes_a_partial_batch_once_it_lingered(scripts: Scripts) -> None:
    old = numbered(GAME, 5, born_ms=now_ms() - 2_000)
    store(scripts, SCHEMA, GAME, old)
    assert claim(scripts, "b1", linger_ms=1_000).batches == [("b1.0", old)]


def test_claim_does_not_wait_for_a_full_batch(scripts: Scripts) -> None:
    full = numbered(GAME, 130)
    store(scripts, SCHEMA, GAME, full)
    claimed = claim(scripts, "b1", linger_ms=60_000)
    assert claimed.batches == [("b1.0", full[:128])]
    assert claimed.remaining == 2


def test_claim_drops_stale_entries_and_counts_them(client: redis.Redis,
                                                   scripts: Scripts) -> None:
    old = numbered(GAME, 3, born_ms=now_ms() - 200_000)
    fresh = numbered(GAME, 4, start=3)
    store(scripts, SCHEMA, GAME, old + fresh)

    claimed = claim(scripts)

    assert claimed.stale == 3
    assert claimed.batches == [("b1.0", fresh)]
    assert meta(client, "b1.0")["n"] == 4
    counters = stats(client, KEYS)
    assert counters["stale"] == 3
    assert counters["claimed"] == 4


def test_claim_of_only_stale_entries_makes_no_batch(client: redis.Redis,
                                                    scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 10, born_ms=now_ms() - 200_000))
    claimed = claim(scripts)
    assert claimed.stale == 10
    assert claimed.batches == []
    assert claimed.remaining == 0
    assert registered(client) == (False, [])
    assert client.zcard(KEYS.inflight) == 0
    assert stats(client, KEYS)["stale"] == 10
    assert "batches_claimed" not in stats(client, KEYS)


def test_claim_with_max_age_zero_keeps_everything(scripts: Scripts) -> None:
    old = numbered(GAME, 3, born_ms=now_ms() - 200_000)
    store(scripts, SCHEMA, GAME, old)
    claimed = claim(scripts, max_age_ms=0)
    assert claimed.stale == 0
    assert claimed.batches == [("b1.0", old)]


# -- ack -----------------------------------------------------------------------------------


def test_ack_finishes_the_batch(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 10))
    claim(scripts)

    assert scripts.ack(KEYS, "b1.0", TOKEN) == 10

    assert client.zcard(KEYS.inflight) == 0
    assert client.hlen(KEYS.batches) == 0
    assert client.hlen(KEYS.payloads) == 0
    counters = stats(client, KEYS)
    assert counters["delivered"] == 10
    assert counters["batches_delivered"] == 1
    assert scripts.ack(KEYS, "b1.0", TOKEN) == -1  # a second ack finds nothing
    assert stats(client, KEYS) == counters


def test_ack_counts_stale_and_rejected_items(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 10))
    claim(scripts)
    assert scripts.ack(KEYS, "b1.0", TOKEN, stale=3, rejected=2) == 5
    counters = stats(client, KEYS)
    assert (counters["delivered"], counters["stale"], counters["rejected"]) == (5, 3, 2)


def test_ack_refuses_counts_beyond_the_batch(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 3))
    claim(scripts)
    before = snapshot(client)
    with pytest.raises(redis.exceptions.ResponseError, match="exceed"):
        scripts.ack(KEYS, "b1.0", TOKEN, stale=2, rejected=2)
    assert snapshot(client) == before


def test_ack_with_a_wrong_token_changes_nothing(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 10))
    claim(scripts)
    before = snapshot(client)

    assert scripts.ack(KEYS, "b1.0", "someone-else") == -1
    assert scripts.ack(KEYS, "no-such-batch", TOKEN) == -1

    assert snapshot(client) == before


def test_a_late_worker_cannot_ack_a_batch_taken_again(client: redis.Redis,
                                                      scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 4))
    claim(scripts)
    assert scripts.release(KEYS, "b1.0", TOKEN)
    [again] = scripts.take_retries(KEYS, "token-2", LEASE_MS, 10)
    assert again.batch_id == "b1.0"

    assert scripts.ack(KEYS, "b1.0", TOKEN) == -1
    assert scripts.ack(KEYS, "b1.0", "token-2") == 4


# -- release, nack, take_retries -----------------------------------------------------------


def test_release_returns_the_batch_without_charging_an_attempt(client: redis.Redis,
                                                               scripts: Scripts) -> None:
    entries = numbered(GAME, 7)
    store(scripts, SCHEMA, GAME, entries)
    claim(scripts)

    assert scripts.release(KEYS, "b1.0", TOKEN) is True

    assert client.zcard(KEYS.inflight) == 0
    assert client.zrange(KEYS.retry, 0, -1) == [b"b1.0"]
    assert meta(client, "b1.0")["a"] == 0
    assert meta(client, "b1.0")["t"] == ""
    assert scripts.release(KEYS, "b1.0", TOKEN) is False  # no longer held
    [batch] = scripts.take_retries(KEYS, "token-2", LEASE_MS, 10)
    assert (batch.batch_id, batch.game, batch.attempts, batch.entries) == (
        "b1.0", GAME, 0, entries)
    assert client.zrange(KEYS.retry, 0, -1) == []
    assert client.zrange(KEYS.inflight, 0, -1) == [b"b1.0"]
    assert meta(client, "b1.0")["t"] == "token-2"


def test_release_with_a_wrong_token_changes_nothing(client: redis.Redis,
                                                    scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 7))
    claim(scripts)
    before = snapshot(client)
    assert scripts.release(KEYS, "b1.0", "someone-else") is False
    assert snapshot(client) == before


def nack(scripts: Scripts, token: str = TOKEN, *, permanent: bool = False,
         min_delay_ms: int = 0, max_attempts: int = 3, dead_max: int = 100) -> Any:
    return scripts.nack(KEYS, "b1.0", token, permanent=permanent, min_delay_ms=min_delay_ms,
                        initial_ms=10_000, max_ms=60_000, max_attempts=max_attempts,
                        jitter=0.5, dead_max=dead_max, reason="HTTP 503: busy")


def test_nack_schedules_a_retry_with_backoff(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 5))
    claim(scripts)
    before = now_ms()

    result = nack(scripts)

    assert (result.state, result.delay_ms) == ("retry", 5_000)  # jitter 0.5 of 10 s
    [(batch_id, due)] = client.zrange(KEYS.retry, 0, -1, withscores=True)
    assert batch_id == b"b1.0"
    assert due >= before + 5_000
    assert client.zcard(KEYS.inflight) == 0
    assert meta(client, "b1.0")["a"] == 1
    assert scripts.take_retries(KEYS, "token-2", LEASE_MS, 10) == []  # not due yet
    assert stats(client, KEYS)["batches_retried"] == 1


def test_nack_honours_the_least_delay(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 5))
    claim(scripts)
    assert nack(scripts, min_delay_ms=7_000).delay_ms == 7_000


def test_backoff_doubles_up_to_the_longest_delay(client: redis.Redis,
                                                 scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 1))
    claim(scripts)
    delays = []
    for _ in range(5):
        result = scripts.nack(KEYS, "b1.0", TOKEN, permanent=False, min_delay_ms=0,
                              initial_ms=1_000, max_ms=5_000, max_attempts=10,
                              jitter=0.999, dead_max=100, reason="busy")
        delays.append(result.delay_ms)
        client.zadd(KEYS.retry, {"b1.0": 0})  # due now
        assert [b.batch_id for b in scripts.take_retries(KEYS, TOKEN, LEASE_MS, 10)] == [
            "b1.0"]
    assert delays == [999, 1998, 3996, 4995, 4995]  # full jitter of min(5 s, 1 s * 2^n)


def test_nack_dead_letters_a_permanent_rejection(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 5))
    claim(scripts)

    assert nack(scripts, permanent=True).state == "dead"

    assert client.lrange(KEYS.dead, 0, -1) == [b"b1.0"]
    assert client.zcard(KEYS.retry) == 0
    assert client.zcard(KEYS.inflight) == 0
    assert meta(client, "b1.0")["r"] == "HTTP 503: busy"
    assert stats(client, KEYS)["rejected"] == 5
    assert nack(scripts).state == "lost"


def test_nack_dead_letters_after_the_last_attempt(client: redis.Redis,
                                                  scripts: Scripts) -> None:
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
    assert stats(client, KEYS)["batches_dead"] == 1


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
        result = scripts.nack(KEYS, f"d{i}.0", TOKEN, permanent=True, min_delay_ms=0,
                              initial_ms=1, max_ms=1, max_attempts=3, jitter=0.0,
                              dead_max=2, reason="no")
        assert result.state == "dead"
    assert client.lrange(KEYS.dead, 0, -1) == [b"d2.0", b"d1.0"]
    assert not client.hexists(KEYS.batches, "d0.0")
    assert not client.hexists(KEYS.payloads, "d0.0")
    assert stats(client, KEYS)["dead_dropped"] == 2


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
    assert stats(client, KEYS)["batches_reaped"] == 1
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
    assert stats(client, KEYS)["rejected"] == 3


# -- replay, purge -------------------------------------------------------------------------


def test_replay_and_purge_dead_letters(client: redis.Redis, scripts: Scripts) -> None:
    for i in range(2):
        store(scripts, SCHEMA, GAME, numbered(GAME, 4, start=4 * i))
        scripts.claim(KEYS, GAME, f"d{i}", TOKEN, 128, 1, LEASE_MS, MAX_AGE_MS, 0)
        scripts.nack(KEYS, f"d{i}.0", TOKEN, permanent=True, min_delay_ms=0, initial_ms=1,
                     max_ms=1, max_attempts=3, jitter=0.0, dead_max=100, reason="no")

    assert scripts.replay(KEYS, "d0.0") == (1, 4)
    assert scripts.replay(KEYS, "d0.0") == (0, 0)
    assert client.zrange(KEYS.retry, 0, -1) == [b"d0.0"]
    assert meta(client, "d0.0")["a"] == 0
    assert scripts.purge(KEYS) == (1, 4)
    assert client.llen(KEYS.dead) == 0
    assert not client.hexists(KEYS.payloads, "d1.0")
    counters = stats(client, KEYS)
    assert (counters["replayed"], counters["purged"], counters["rejected"]) == (4, 4, 8)


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


# -- BatchStore ----------------------------------------------------------------------------


def test_batch_store_uses_the_configured_batch_size_and_linger(client: redis.Redis,
                                                               redis_url: str) -> None:
    config = make_config(redis_url, reporter={"batch_size": 50, "linger_ms": 60_000})
    store_ = BatchStore(client, config)
    schema = KeySchema(config.redis.key_prefix, config.redis.shards)
    keys = store(store_.scripts, schema, GAME, numbered(GAME, 120))

    claimed = store_.claim(keys, GAME, TOKEN, 8)
    assert [len(b) for _, b in claimed.batches] == [50, 50, 20]

    store(store_.scripts, schema, GAME, numbered(GAME, 49))
    assert store_.claim(keys, GAME, TOKEN, 8).batches == []  # lingering
    assert store_.game_states(keys, [GAME])[0].length == 49
    games, length, retries = store_.ring(keys, 0, 10)
    assert (games, length, retries) == ([GAME], 1, 0)
    for batch_id, _ in claimed.batches:
        assert store_.ack(keys, batch_id, TOKEN, 0, 0) > 0
    assert stats(client, keys)["delivered"] == 120


def test_batch_store_drops_stale_entries_at_claim_by_collect_time(client: redis.Redis,
                                                                  redis_url: str) -> None:
    config = make_config(redis_url, reporter={"linger_ms": 0})
    store_ = BatchStore(client, config)
    keys = store(store_.scripts, KeySchema("telemetry", 4), GAME,
                 numbered(GAME, 6, born_ms=now_ms() - 200_000))
    claimed = store_.claim(keys, GAME, TOKEN, 8)
    assert (claimed.stale, claimed.batches) == (6, [])


def test_batch_store_leaves_age_to_the_event_time_field(client: redis.Redis,
                                                        redis_url: str) -> None:
    # the script cannot read the event's own time: the deliverer decides, after the claim
    config = make_config(redis_url, reporter={"linger_ms": 0, "event_time_field": "ot"})
    store_ = BatchStore(client, config)
    old = numbered(GAME, 6, born_ms=now_ms() - 200_000)
    keys = store(store_.scripts, KeySchema("telemetry", 4), GAME, old)
    claimed = store_.claim(keys, GAME, TOKEN, 8)
    assert claimed.stale == 0
    assert [entries for _, entries in claimed.batches] == [old]
