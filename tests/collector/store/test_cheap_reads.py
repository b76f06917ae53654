"""The store's cheap reads for the metrics endpoint (``Store.counter_totals``,
``shard_levels``, ``live_reporters``, ``ping``) agree with the full reads ``status`` makes, on
a single server and on a cluster."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from collector.counters import STORE
from collector.store import BackendUnavailable, KeySchema, Store, open_store
from collector.store import Cluster as ClusterBackend
from collector.store._read_replies import PIPELINE_SHARDS
from reporter._monitoring.accounting import read_totals
from tests.support.entries import make_config, now_ms, numbered, store
from tests.support.scriptcalls import Scripts, store_of
from tests.support.servers import Cluster, Server

LEASE_MS = 30_000


def states_of_every_kind(scripts: Scripts, schema: KeySchema) -> None:
    """Buffered events, batches in flight, retries due and not yet due, and a dead letter,
    spread over the shards."""
    for i in range(12):
        store(
            scripts, schema, f"game-{i}", numbered(f"game-{i}", 10 + i, born_ms=now_ms() - 1000 * i)
        )
    keys = schema.for_game("game-11")
    claimed = scripts.claim(keys, "game-11", "b", "t", 3, 4, LEASE_MS, 0, 0)
    ids = [b.batch_id for b in claimed.batches]
    assert len(ids) == 4
    policy: dict[str, Any] = dict(
        initial_ms=1, max_ms=1, max_attempts=10, jitter=0.0, dead_max=100, reason="test"
    )
    scripts.nack(keys, ids[0], "t", permanent=True, min_delay_ms=0, **policy)
    scripts.nack(keys, ids[1], "t", permanent=False, min_delay_ms=600_000, **policy)
    scripts.nack(keys, ids[2], "t", permanent=False, min_delay_ms=0, **policy)


def test_counter_totals_are_the_counters_status_adds_up(client: redis.Redis) -> None:
    schema = KeySchema("telemetry", 8)
    s = store_of(client, schema)
    states_of_every_kind(Scripts(s), schema)
    totals = s.counter_totals()
    full = read_totals(s)
    assert totals == {name: full.counter(name) for name in STORE if full.counter(name)}
    assert totals["stored"] == sum(10 + i for i in range(12))
    one = schema.for_game("game-11")
    assert s.counter_totals([one])["batches_claimed"] == 4


def test_shard_levels_agree_with_the_full_read_of_each_shard(client: redis.Redis) -> None:
    schema = KeySchema("telemetry", 8)
    s = store_of(client, schema)
    states_of_every_kind(Scripts(s), schema)
    levels = s.shard_levels(schema.all_shards(), now_ms())
    views = s.read_shards()
    assert [lv.shard for lv in levels] == list(range(8))
    for level, view in zip(levels, views, strict=True):
        assert level.buffered == view.buffered
        assert (level.inflight, level.retry, level.dead) == (view.inflight, view.retry, view.dead)
        assert {g.game: g.length for g in level.games} == {g.game: g.buffered for g in view.games}
        oldest = [g.oldest_ms for g in view.games if g.oldest_ms is not None and g.buffered]
        assert level.oldest_ms == (min(oldest) if oldest else None)
    assert sum(lv.retry for lv in levels) == 2
    assert sum(lv.retry_due for lv in levels) == 1  # the other waits ten minutes
    assert sum(lv.dead for lv in levels) == 1
    assert sum(lv.inflight for lv in levels) == 1
    assert s.shard_levels([], now_ms()) == []


def test_shard_levels_of_many_shards_go_out_in_groups(client: redis.Redis) -> None:
    schema = KeySchema("telemetry", 2 * PIPELINE_SHARDS)
    s = store_of(client, schema)
    games = {f"g{i}" for i in range(40)}
    for game in games:
        store(Scripts(s), schema, game, numbered(game, 2))
    levels = s.shard_levels(schema.all_shards(), now_ms())
    assert len(levels) == 2 * PIPELINE_SHARDS
    assert {g.game for lv in levels for g in lv.games} == games
    assert sum(lv.buffered for lv in levels) == 80
    assert s.counter_totals()["stored"] == 80


def test_live_reporters_counts_unexpired_heartbeats(client: redis.Redis) -> None:
    s = store_of(client)
    s.heartbeat("a", 10_000)
    s.heartbeat("b", 10_000)
    client.zadd(s.schema.reporters, {"gone": s.server_ms() - 1})
    assert s.live_reporters() == 2
    client.zadd(s.schema.reporters, {"a": 1, "b": 1})  # as if their heartbeats had run out
    assert s.live_reporters() == 0


def test_ping_raises_when_redis_is_gone(own_server: Server) -> None:
    s = open_store(
        make_config(
            own_server.url, redis={"socket_timeout_seconds": 0.2, "connect_timeout_seconds": 0.2}
        ).redis
    )
    try:
        s.ping()
        own_server.stop()
        with pytest.raises(BackendUnavailable):
            s.ping()
        with pytest.raises(BackendUnavailable):
            s.counter_totals()
    finally:
        s.close()


@pytest.fixture
def cluster_store(cluster: Cluster) -> Iterator[Store]:
    prefix = f"mr{uuid.uuid4().hex[:8]}"  # the cluster is shared by the session
    config = make_config(cluster.url, shards=16, redis={"cluster": True, "key_prefix": prefix})
    backend = ClusterBackend.from_settings(config.redis)
    yield Store(backend, KeySchema(prefix, 16))
    backend.close()


def test_the_reads_span_the_nodes_of_a_cluster(cluster_store: Store) -> None:
    schema = cluster_store.schema
    states_of_every_kind(Scripts(cluster_store), schema)
    assert cluster_store.counter_totals()["stored"] == sum(10 + i for i in range(12))
    levels = cluster_store.shard_levels(schema.all_shards(), now_ms())
    assert sum(lv.buffered for lv in levels) == read_totals(cluster_store).buffered
    assert sum(lv.dead for lv in levels) == 1
    cluster_store.ping()
