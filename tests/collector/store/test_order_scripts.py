"""A game's batches first in, first out (``lua/_order.lua``), through the scripts on real
servers: a claim in order waits while an earlier batch of its game is pending, the retry set
gives a game's batches back head first, and every way a batch leaves takes it out of its
game's queue."""

from __future__ import annotations

import json

import redis

from collector.store import AckMany, RetryState
from tests.support.entries import now_ms, numbered, store
from tests.support.scriptcalls import Scripts
from tests.support.scripting import GAME, KEYS, LEASE_MS, SCHEMA, TOKEN, meta

OTHER = "game-3"  # another game of the same shard
assert SCHEMA.for_game(OTHER) == KEYS


def claim(
    scripts: Scripts, batch_id: str, most: int = 1, game: str = GAME
) -> tuple[list[str], bool]:
    claimed = scripts.claim(
        KEYS, game, batch_id, TOKEN, 128, most, LEASE_MS, 180_000, 0, in_order=True
    )
    return [b.batch_id for b in claimed.batches], claimed.waiting


def queue(client: redis.Redis, game: str = GAME) -> list[str]:
    """The batch ids of the game's queue, in order."""
    members = client.zrangebylex(KEYS.order, f"[{game}\n", f"({game}\v")
    return [m.decode().split("\n")[2] for m in members]


def due_at(client: redis.Redis, batch_id: str) -> float | None:
    return client.zscore(KEYS.retry, batch_id)


def make_due(client: redis.Redis, batch_id: str) -> None:
    client.zadd(KEYS.retry, {batch_id: now_ms() - 1})


def nack(scripts: Scripts, batch_id: str, delay_ms: int = 60_000, permanent: bool = False) -> str:
    return scripts.nack(
        KEYS,
        batch_id,
        TOKEN,
        permanent=permanent,
        min_delay_ms=delay_ms,
        initial_ms=1,
        max_ms=1,
        max_attempts=5,
        jitter=0.0,
        dead_max=100,
        reason="nppa 1001 system error",
    ).state


def taken(scripts: Scripts, token: str = "t2", limit: int = 16, game: str = "") -> list[str]:
    return [b.batch_id for b in scripts.take_retries(KEYS, token, LEASE_MS, limit, game)]


def test_no_claim_while_an_earlier_batch_of_the_game_is_pending(
    client: redis.Redis, scripts: Scripts
) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 384))
    assert claim(scripts, "b1") == (["b1.0"], False)
    assert queue(client) == ["b1.0"]
    assert meta(client, "b1.0")["o"].isdigit()
    # leased: the game waits (an empty claim, the events left where they are)
    assert claim(scripts, "b2") == ([], True)
    assert client.llen(KEYS.queue(GAME)) == 256
    # failed, waiting for its retry: the game still waits
    assert nack(scripts, "b1.0") == RetryState.RETRY
    assert claim(scripts, "b3") == ([], True)
    # another game of the shard is not held back
    store(scripts, SCHEMA, OTHER, numbered(OTHER, 128))
    assert claim(scripts, "o1", game=OTHER) == (["o1.0"], False)
    # delivered: the next claim goes, and the queue holds only it
    make_due(client, "b1.0")
    assert taken(scripts, TOKEN, game=GAME) == ["b1.0"]
    assert scripts.ack(KEYS, "b1.0", TOKEN) == 128
    assert queue(client) == []
    assert claim(scripts, "b4", most=2) == (["b4.0", "b4.1"], False)
    assert queue(client) == ["b4.0", "b4.1"]


def test_a_claim_out_of_order_keeps_no_queue(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 256))
    claimed = scripts.claim(KEYS, GAME, "b1", TOKEN, 128, 1, LEASE_MS, 180_000, 0)
    assert [b.batch_id for b in claimed.batches] == ["b1.0"]
    assert "o" not in meta(client, "b1.0")
    assert client.exists(KEYS.order) == 0
    claimed = scripts.claim(KEYS, GAME, "b2", TOKEN, 128, 1, LEASE_MS, 180_000, 0)
    assert [b.batch_id for b in claimed.batches] == ["b2.0"]  # nothing waits


def test_the_retry_set_gives_a_game_back_head_first(client: redis.Redis, scripts: Scripts) -> None:
    """The first batch failed (its retry a minute away), the two behind it were handed back
    due now: nothing of the game goes, and those two wait behind the head, due just after
    it; once it is due the three go together, in their order."""
    store(scripts, SCHEMA, GAME, numbered(GAME, 384))
    assert claim(scripts, "b1", most=3) == (["b1.0", "b1.1", "b1.2"], False)
    assert nack(scripts, "b1.0") == RetryState.RETRY
    head = due_at(client, "b1.0")
    assert head is not None and head > now_ms() + 50_000
    assert scripts.release(KEYS, "b1.2", TOKEN) and scripts.release(KEYS, "b1.1", TOKEN)
    # another game's due retry goes meanwhile
    store(scripts, SCHEMA, OTHER, numbered(OTHER, 128))
    assert claim(scripts, "o1", game=OTHER) == (["o1.0"], False)
    assert scripts.release(KEYS, "o1.0", TOKEN)
    assert taken(scripts) == ["o1.0"]
    assert (due_at(client, "b1.1"), due_at(client, "b1.2")) == (head + 1, head + 1)
    assert taken(scripts, "t3") == []  # nothing is due now
    make_due(client, "b1.0")
    assert taken(scripts, "t4") == ["b1.0", "b1.1", "b1.2"]
    assert queue(client) == ["b1.0", "b1.1", "b1.2"]


def test_a_batch_due_behind_a_leased_head_waits_for_its_lease(
    client: redis.Redis, scripts: Scripts
) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 256))
    assert claim(scripts, "b1", most=2) == (["b1.0", "b1.1"], False)
    assert scripts.release(KEYS, "b1.1", TOKEN)  # due now, but its head is still leased
    lease = client.zscore(KEYS.inflight, "b1.0")
    assert taken(scripts) == []
    assert due_at(client, "b1.1") == lease + 1
    # a take for the game alone (a hot game's thread) says the same
    make_due(client, "b1.1")
    assert taken(scripts, game=GAME) == []


def test_a_retry_part_takes_its_batch_place(client: redis.Redis, scripts: Scripts) -> None:
    """Answered item by item, two items to send again: they are their game's head now, and
    the batch claimed after it waits behind them."""
    store(scripts, SCHEMA, GAME, numbered(GAME, 256))
    assert claim(scripts, "b1", most=2) == (["b1.0", "b1.1"], False)
    settled = scripts.settle(KEYS, "b1.0", TOKEN, retry=[3, 7], min_delay_ms=60_000)
    assert (settled.retry_id, settled.retry_state) == ("b1.0.r1", RetryState.RETRY)
    assert queue(client) == ["b1.0.r1", "b1.1"]
    assert meta(client, "b1.0.r1")["o"] == meta(client, "b1.1")["o"][:-2] + "00"
    assert scripts.release(KEYS, "b1.1", TOKEN)
    assert taken(scripts) == []
    make_due(client, "b1.0.r1")
    assert taken(scripts) == ["b1.0.r1", "b1.1"]
    # settled with nothing left to retry: it leaves the queue
    settled = scripts.settle(KEYS, "b1.0.r1", "t2", refused=[(0, "nppa 3010 invalid pi")])
    assert settled.retry_id == ""
    assert queue(client) == ["b1.1"]


def test_every_way_out_leaves_the_queue(client: redis.Redis, scripts: Scripts) -> None:
    """Acked, dead-lettered by a nack or by the reaper: out of the queue.  Set aside (its
    metadata spoilt) or lost by hand: dropped by the next look at the queue."""
    store(scripts, SCHEMA, GAME, numbered(GAME, 768))
    assert claim(scripts, "b1", most=5)[0] == [f"b1.{k}" for k in range(5)]
    assert scripts.ack(KEYS, "b1.0", TOKEN) == 128
    assert nack(scripts, "b1.1", permanent=True) == RetryState.DEAD
    client.zadd(KEYS.inflight, {"b1.2": now_ms() - 1})  # its lease ran out
    assert scripts.reap(KEYS, 10, max_attempts=1, dead_max=100).dead == 1
    assert queue(client) == ["b1.3", "b1.4"]
    client.hset(KEYS.batches, "b1.3", "not json")
    assert scripts.release(KEYS, "b1.3", TOKEN) is False  # set aside
    client.zrem(KEYS.inflight, "b1.4")  # vanished
    assert queue(client) == ["b1.3", "b1.4"]
    assert claim(scripts, "b2") == (["b2.0"], False)
    assert queue(client) == ["b2.0"]


def test_a_queue_place_of_another_form_sets_the_batch_aside(
    client: redis.Redis, scripts: Scripts
) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 128))
    assert claim(scripts, "b1") == (["b1.0"], False)
    spoilt = dict(meta(client, "b1.0"), o="12")
    client.hset(KEYS.batches, "b1.0", json.dumps(spoilt))
    assert scripts.ack(KEYS, "b1.0", TOKEN) == -1
    record = json.loads(client.lindex(KEYS.quarantine, 0) or b"{}")
    assert record["r"] == "metadata with a queue place of the wrong form"


def test_a_lease_acked_in_one_call_leaves_the_queue(client: redis.Redis, scripts: Scripts) -> None:
    store(scripts, SCHEMA, GAME, numbered(GAME, 3 * 128))
    assert claim(scripts, "b1", most=3)[0] == ["b1.0", "b1.1", "b1.2"]
    acks = (("b1.0", 0), ("b1.1", 0))
    assert scripts.store.call(AckMany(KEYS, TOKEN, acks)) == [128, 128]
    assert queue(client) == ["b1.2"]
