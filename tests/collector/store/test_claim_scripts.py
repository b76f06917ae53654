"""The claim side of the batch life cycle (claim, ack) and ``Batches`` on real servers."""

from __future__ import annotations

import pytest
import redis

from collector.store import BackendRefused, KeySchema
from reporter._delivery.batches import Batches
from tests.support.entries import make_config, now_ms, numbered, store
from tests.support.scriptcalls import Scripts, store_on
from tests.support.scripting import (
    GAME,
    KEYS,
    LEASE_MS,
    SCHEMA,
    TOKEN,
    claim,
    meta,
    registered,
    snapshot,
)
from tests.support.stored import shard_stats

# -- claim ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "most", "sizes", "left"),
    [
        (0, 1, [], 0),
        (1, 1, [1], 0),
        (127, 1, [127], 0),
        (128, 1, [128], 0),
        (129, 1, [128], 1),
        (129, 8, [128, 1], 0),
        (300, 2, [128, 128], 44),
        (1025, 8, [128] * 8, 1),
    ],
)
def test_claim_takes_exact_batches(
    client: redis.Redis, scripts: Scripts, length: int, most: int, sizes: list[int], left: int
) -> None:
    entries = numbered(GAME, length)
    if entries:
        store(scripts, SCHEMA, GAME, entries)
    else:  # registered but empty is normal: the last claim or the TTL emptied it
        client.sadd(KEYS.active, GAME)
        client.zadd(KEYS.ring, {GAME: 0})

    claimed = claim(scripts, most=most)

    assert [len(batch) for _, batch in claimed.batches] == sizes
    assert [batch_id for batch_id, _ in claimed.batches] == [f"b1.{i}" for i in range(len(sizes))]
    assert claimed.remaining == left
    assert claimed.stale == 0
    queue = client.lrange(KEYS.queue(GAME), 0, -1)
    assert queue == entries[length - left :]
    # LRANGE 0..n-1 then LTRIM n..-1: every event exactly once, in order
    taken = [e for _, batch in claimed.batches for e in batch]
    assert taken + queue == entries
    assert registered(client) == ((True, [GAME.encode()]) if left else (False, []))
    assert client.zcard(KEYS.inflight) == len(sizes)
    for batch_id, batch in claimed.batches:
        assert client.hget(KEYS.payloads, batch_id) == b"\n".join(batch)
        assert meta(client, batch_id) | {"c": 0} == {
            "g": GAME,
            "t": TOKEN,
            "a": 0,
            "n": len(batch),
            "c": 0,
        }
    counters = shard_stats(client, KEYS)
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
    assert shard_stats(client, KEYS)["claimed"] == 256
    assert shard_stats(client, KEYS)["batches_claimed"] == 2

    other = claim(scripts, "other", most=2)
    assert [len(b) for _, b in other.batches] == [44]
    assert other.batches[0][1] == entries[256:]


def test_claim_waits_for_linger_unless_the_batch_is_full(
    client: redis.Redis, scripts: Scripts
) -> None:
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


def test_claim_drops_stale_entries_and_counts_them(client: redis.Redis, scripts: Scripts) -> None:
    old = numbered(GAME, 3, born_ms=now_ms() - 200_000)
    fresh = numbered(GAME, 4, start=3)
    store(scripts, SCHEMA, GAME, old + fresh)

    claimed = claim(scripts)

    assert claimed.stale == 3
    assert claimed.batches == [("b1.0", fresh)]
    assert meta(client, "b1.0")["n"] == 4
    counters = shard_stats(client, KEYS)
    assert counters["stale"] == 3
    assert counters["claimed"] == 4


def test_claim_of_only_stale_entries_makes_no_batch(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 10, born_ms=now_ms() - 200_000))
    claimed = claim(scripts)
    assert claimed.stale == 10
    assert claimed.batches == []
    assert claimed.remaining == 0
    assert registered(client) == (False, [])
    assert client.zcard(KEYS.inflight) == 0
    assert shard_stats(client, KEYS)["stale"] == 10
    assert "batches_claimed" not in shard_stats(client, KEYS)


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
    counters = shard_stats(client, KEYS)
    assert counters["delivered"] == 10
    assert counters["batches_delivered"] == 1
    # the same ack again (a resend after a lost reply): the same answer, nothing counted
    assert scripts.ack(KEYS, "b1.0", TOKEN) == 10
    assert shard_stats(client, KEYS) == counters
    assert scripts.ack(KEYS, "b1.0", "another-token") == -1


def test_ack_counts_stale_events(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 10))
    claim(scripts)
    assert scripts.ack(KEYS, "b1.0", TOKEN, stale=3) == 7
    counters = shard_stats(client, KEYS)
    assert (counters["delivered"], counters["stale"]) == (7, 3)


def test_ack_refuses_counts_beyond_the_batch(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 3))
    claim(scripts)
    before = snapshot(client)
    with pytest.raises(BackendRefused, match="exceed"):
        scripts.ack(KEYS, "b1.0", TOKEN, stale=4)
    assert snapshot(client) == before


def test_ack_with_a_wrong_token_changes_nothing(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 10))
    claim(scripts)
    before = snapshot(client)

    assert scripts.ack(KEYS, "b1.0", "someone-else") == -1
    assert scripts.ack(KEYS, "no-such-batch", TOKEN) == -1

    assert snapshot(client) == before


def test_a_late_worker_cannot_ack_a_batch_taken_again(
    client: redis.Redis, scripts: Scripts
) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 4))
    claim(scripts)
    assert scripts.release(KEYS, "b1.0", TOKEN)
    [again] = scripts.take_retries(KEYS, "token-2", LEASE_MS, 10)
    assert again.batch_id == "b1.0"

    assert scripts.ack(KEYS, "b1.0", TOKEN) == -1
    assert scripts.ack(KEYS, "b1.0", "token-2") == 4


# -- Batches -------------------------------------------------------------------------------


def test_batch_store_uses_the_configured_batch_size_and_linger(
    client: redis.Redis, redis_url: str
) -> None:
    config = make_config(redis_url, reporter={"batch_size": 50, "linger_ms": 60_000})
    store_ = Batches(store_on(client, config), config)
    schema = KeySchema(config.redis.key_prefix, config.redis.shards)
    keys = store(Scripts(store_.store), schema, GAME, numbered(GAME, 120))

    claimed = store_.claim(keys, GAME, TOKEN, 8)
    assert [len(b) for _, b in claimed.batches] == [50, 50, 20]

    store(Scripts(store_.store), schema, GAME, numbered(GAME, 49))
    assert store_.claim(keys, GAME, TOKEN, 8).batches == []  # lingering
    assert store_.game_states(keys, [GAME])[0].length == 49
    ring = store_.ring(keys, "", 10)
    assert (ring.games, ring.ring_length, ring.retries) == ([GAME], 1, 0)
    for batch_id, _ in claimed.batches:
        assert store_.ack(keys, batch_id, TOKEN, 0) > 0
    assert shard_stats(client, keys)["delivered"] == 120


def test_batch_store_drops_stale_entries_at_claim_by_collect_time(
    client: redis.Redis, redis_url: str
) -> None:
    config = make_config(redis_url, reporter={"linger_ms": 0})
    store_ = Batches(store_on(client, config), config)
    keys = store(
        Scripts(store_.store),
        KeySchema("telemetry", 4),
        GAME,
        numbered(GAME, 6, born_ms=now_ms() - 200_000),
    )
    claimed = store_.claim(keys, GAME, TOKEN, 8)
    assert (claimed.stale, claimed.batches) == (6, [])


def test_batch_store_leaves_age_to_the_event_time_field(
    client: redis.Redis, redis_url: str
) -> None:
    # the script cannot read the event's own time: the deliverer decides, after the claim
    config = make_config(redis_url, reporter={"linger_ms": 0, "event_time_field": "ot"})
    store_ = Batches(store_on(client, config), config)
    old = numbered(GAME, 6, born_ms=now_ms() - 200_000)
    keys = store(Scripts(store_.store), KeySchema("telemetry", 4), GAME, old)
    claimed = store_.claim(keys, GAME, TOKEN, 8)
    assert claimed.stale == 0
    assert [entries for _, entries in claimed.batches] == [old]
