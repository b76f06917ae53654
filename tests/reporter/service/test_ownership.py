"""Shard leases between reporter processes: fair shares, take-over, giving shards back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from collector.config import RedisSettings
from collector.store import Store, open_store
from reporter._service.ownership import ShardOwnership
from tests.support.polling import wait_until

SHARDS = 16


@pytest.fixture
def store(redis_url: str) -> Iterator[Store]:
    store = open_store(RedisSettings(url=redis_url, shards=SHARDS, key_prefix="own"))
    yield store
    store.close()


def test_two_processes_split_the_shards_and_one_takes_all_when_the_other_leaves(
    store: Store,
) -> None:
    a = ShardOwnership(store, 10.0, owner="a")
    b = ShardOwnership(store, 10.0, owner="b")
    a.loop()
    assert a.owned() == frozenset(range(SHARDS))

    b.loop()  # its share is half, but every shard is leased to a
    assert b.owned() == frozenset()
    a.loop()  # two live now: a keeps the lower half and hands back the rest
    assert a.owned() == frozenset(range(SHARDS // 2))
    b.loop()
    assert b.owned() == frozenset(range(SHARDS // 2, SHARDS))

    a.give_up()
    assert a.owned() == frozenset()
    b.loop()  # a left the registry: b's share is every shard again
    assert b.owned() == frozenset(range(SHARDS))


def test_shards_whose_lease_expired_go_to_another_process_and_the_first_lets_go(
    store: Store,
) -> None:
    a = ShardOwnership(store, 0.2, owner="a")
    a.loop()
    b = ShardOwnership(store, 10.0, owner="b")
    # a stops renewing (a long pause, say): once its leases and heartbeat expire, b takes all
    wait_until(
        lambda: b.loop() or b.owned() == frozenset(range(SHARDS)), what="a's leases to expire"
    )
    a.loop()  # its renewals are refused, and every shard is held: it keeps none
    assert a.owned() == frozenset()
    b.loop()
    a.loop()
    assert a.owned() | b.owned() == frozenset(range(SHARDS))
    assert not a.owned() & b.owned()
