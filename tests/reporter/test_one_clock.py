"""One clock: every coordination time (the reporter registry, shard owners, the shared rate's
slots and tokens, the hold) is the Redis server's, read with TIME inside the scripts, and a
stored time further ahead than any script sets is junk, never obeyed.

Each fault here was met for real: a reporter whose clock ran ten minutes fast died and left
half the shards without an owner for ten minutes; an owner key without expiry halted its
shard for good; far-future values in the rate and hold keys stopped all sending, and a later
pause kept the value and set a 228-year expiry."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from collector.config import RedisSettings
from collector.store import Store, open_store
from reporter._commands.cli import main
from reporter._pacing.limiter import SharedTokenBucket
from reporter._pacing.send_hold import SendHold
from reporter._pacing.slots import SharedSlots
from reporter._senders.outcome import Refusal
from reporter._service.ownership import ShardOwnership
from reporter._sinks.base import HoldScope
from tests.support.lifecycle import server_ms
from tests.support.polling import wait_until

SHARDS = 4
PREFIX = "clock"
TEN_MINUTES_MS = 600_000
FAR_US = 7_200_000_000_000_000  # year 2198, in microseconds (the 228 years of the fault)


@pytest.fixture
def store(redis_url: str) -> Iterator[Store]:
    store = open_store(RedisSettings(url=redis_url, shards=SHARDS, key_prefix=PREFIX))
    yield store
    store.close()


def deadlines(r: redis.Redis, store: Store) -> dict[str, float]:
    return {k.decode(): s for k, s in r.zrange(store.schema.reporters, 0, -1, withscores=True)}


# -- the reporter registry ---------------------------------------------------------------------


def test_a_registry_deadline_is_the_servers_time_whatever_the_reporters_clock(
    store: Store, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = time.time() + TEN_MINUTES_MS / 1000
    monkeypatch.setattr(time, "time", lambda: fast)  # this process's clock runs ten minutes fast
    before = server_ms(r)
    ShardOwnership(store, 1.0, owner="fast").loop()
    monkeypatch.undo()
    assert before + 1000 <= deadlines(r, store)["fast"] <= server_ms(r) + 1000


def test_a_fast_clock_ghost_in_the_registry_is_cut_to_one_lease(
    store: Store, r: redis.Redis
) -> None:
    """A dead reporter whose clock ran ten minutes fast left its heartbeat ten minutes ahead:
    the live one counted it, took half the shards, and left the rest without an owner."""
    r.zadd(store.schema.reporters, {"ghost": server_ms(r) + TEN_MINUTES_MS})
    live = ShardOwnership(store, 1.0, owner="live")
    live.loop()
    assert deadlines(r, store)["ghost"] <= server_ms(r) + 1000  # clamped to one lease
    wait_until(
        lambda: live.loop() or live.owned() == frozenset(range(SHARDS)),
        timeout=10,
        what="the ghost's heartbeat to run out after one lease",
    )
    assert "ghost" not in deadlines(r, store)


# -- shard owners ------------------------------------------------------------------------------


def test_an_owner_key_without_expiry_is_taken_over_and_counted(
    store: Store, r: redis.Redis
) -> None:
    owner_key = store.schema.shard(2).owner
    r.set(owner_key, "ghost:1:dead")  # no expiry: nothing would ever free the shard
    live = ShardOwnership(store, 10.0, owner="live")
    live.loop()
    assert live.owned() == frozenset(range(SHARDS))
    assert r.get(owner_key) == b"live" and 0 < r.pttl(owner_key) <= 10_000
    stats = store.counter_totals([store.schema.shard(2)])
    assert stats["owners_taken_over"] == 1
    [record] = store.quarantined(store.schema.shard(2), 10)
    assert (record.key, record.sample) == (owner_key, "ghost:1:dead")


def test_an_owner_missing_from_the_live_registry_is_taken_over_at_the_next_round(
    store: Store, r: redis.Redis
) -> None:
    owner_key = store.schema.shard(1).owner
    r.set(owner_key, "gone:2:dead", px=120_000)  # a holder that left no heartbeat
    live = ShardOwnership(store, 10.0, owner="live")
    live.loop()  # seen once: it may be a process that registered a moment ago
    assert 1 not in live.owned()
    live.loop()  # still holding, still not registered: taken over
    assert live.owned() == frozenset(range(SHARDS))
    assert store.counter_totals([store.schema.shard(1)])["owners_taken_over"] == 1


def test_a_holder_that_registers_after_it_was_missed_keeps_its_shard(
    store: Store, r: redis.Redis
) -> None:
    """A process that took a shard a moment after another's heartbeat read the registry is
    missing from that read; by the next round it is registered, and keeps the shard."""
    for shard in (1, 2, 3):
        r.set(store.schema.shard(shard).owner, "late", px=60_000)  # not registered yet
    live = ShardOwnership(store, 10.0, owner="live")
    live.loop()
    assert live.owned() == {0}
    store.heartbeat("late", 10_000)  # its own first heartbeat
    live.loop()  # below its share of two: it tries shard 1 again, whose holder is live now
    assert live.owned() == {0}
    assert all(r.get(store.schema.shard(n).owner) == b"late" for n in (1, 2, 3))
    assert "owners_taken_over" not in store.counter_totals()


def test_status_names_the_shards_whose_owner_is_not_live(
    store: Store, r: redis.Redis, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    live = ShardOwnership(store, 10.0, owner="live")
    live.loop()
    r.set(store.schema.shard(3).owner, "ghost:9:dead")  # no expiry, not registered
    config = tmp_path / "c.toml"
    config.write_text(
        f'[redis]\nurl = "{redis_url}"\nkey_prefix = "{PREFIX}"\nshards = {SHARDS}\n',
        encoding="utf-8",
    )
    for form in ([], ["--no-shards"]):
        assert main(["status", "--json", *form, "--config", str(config)]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert printed["shards_owned_by_no_live_reporter"] == [3]
    assert main(["status", "--config", str(config)]) == 0
    text = capsys.readouterr().out
    assert "shards held by a process missing from the live registry: 3" in text
    assert "ghost:9:dead (not live)" in text


def test_a_live_owner_keeps_its_shards(store: Store) -> None:
    a = ShardOwnership(store, 10.0, owner="a")
    b = ShardOwnership(store, 10.0, owner="b")
    a.loop()
    for _ in range(3):
        b.loop()
        a.loop()
    assert a.owned() | b.owned() == frozenset(range(SHARDS))
    assert len(a.owned()) == len(b.owned()) == SHARDS // 2
    assert "owners_taken_over" not in store.counter_totals()


# -- the shared rate and the hold --------------------------------------------------------------


def test_a_far_future_slot_is_refused_and_the_slot_reserved_now(
    store: Store, r: redis.Redis
) -> None:
    slots = SharedSlots(store, "nppa:app", 10.0)
    r.hset(store.schema.limiter("nppa:app"), "t:", str(FAR_US))
    assert slots.reserve().reserved


def test_a_pause_after_a_far_future_pause_keeps_neither(store: Store, r: redis.Redis) -> None:
    key = store.schema.limiter("nppa:app")
    slots = SharedSlots(store, "nppa:app", 10.0)
    assert slots.reserve().reserved  # a slot of its own in the hash
    r.hset(key, "paused_until", str(FAR_US))
    r.pexpire(key, FAR_US // 1000)  # what a pause over that value set, before
    slots.pause(10.0)
    assert 0 < r.pttl(key) <= 3_600_000  # kept an hour past its last use, not 228 years
    assert not slots.reserve().reserved  # the pause holds: its end is past the horizon
    assert 9.0 < slots.acquire(1).wait <= 10.0


def test_a_far_future_token_bucket_is_refused_and_tokens_granted(
    store: Store, r: redis.Redis
) -> None:
    key = store.schema.limiter("json")
    bucket = SharedTokenBucket(store, "json", 10.0, 1)
    r.hset(key, mapping={"tokens": "1", "refused_at": str(FAR_US)})
    assert bucket.acquire(1, spare=True).granted == 1  # not scarce for ever
    r.hset(key, mapping={"tokens": "0", "at": str(FAR_US)})
    wait_until(lambda: bucket.acquire(1).granted, timeout=5, what="the bucket to refill")
    assert len(r.lrange(store.schema.limiter("json").replace(":bucket", ":quarantine"), 0, -1)) == 2


def test_a_far_future_probe_time_is_refused_and_the_probe_due_now(
    store: Store, r: redis.Redis
) -> None:
    hold = SendHold(store, "app", HoldScope("", "app", "app app"), 30.0)
    hold.begin(Refusal("nppa 1011", "the key"), "g")
    r.hset(store.schema.hold("app"), "probe_at", str(FAR_US // 1000))
    assert hold.take_turn().mine
