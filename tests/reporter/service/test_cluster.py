"""The reporter on a 3-node Redis Cluster: every script call stays in one shard's slot.

It runs on 3 primaries alone, and on 3 primaries with a replica each and
``wait_for_replicas = 1`` (every claim and ack confirmed by WAIT on its node)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from collector.store import Cluster as ClusterBackend
from reporter._demo.endpoint import LocalEndpoint
from reporter._monitoring.accounting import read_totals
from tests.support.entries import ids_of, make_config, now_ms, numbered, store
from tests.support.fixtures import MakeService
from tests.support.polling import wait_until
from tests.support.scriptcalls import Scripts
from tests.support.servers import Cluster

# [redis] settings per cluster kind: with replicas, every claim and ack waits for one.
KINDS = {"cluster": {}, "replicated_cluster": {"wait_for_replicas": 1, "wait_timeout_ms": 1000}}


@pytest.fixture(params=sorted(KINDS))
def any_cluster(request: pytest.FixtureRequest) -> tuple[Cluster, dict[str, Any]]:
    return request.getfixturevalue(request.param), KINDS[request.param]


@pytest.fixture
def cluster_client(any_cluster: tuple[Cluster, dict[str, Any]]) -> Iterator[Any]:
    config = make_config(any_cluster[0].url, redis={"cluster": True})
    backend = ClusterBackend.from_settings(config.redis)
    yield backend.client
    backend.close()


def test_reporter_drains_every_shard_of_a_cluster(
    any_cluster: tuple[Cluster, dict[str, Any]],
    cluster_client: Any,
    endpoint: LocalEndpoint,
    make_service: MakeService,
) -> None:
    cluster, waits = any_cluster
    prefix = f"rc{uuid.uuid4().hex[:8]}"  # the cluster is shared by the session
    config = make_config(
        cluster.url,
        sink_url=endpoint.url,
        shards=16,
        redis={"cluster": True, "key_prefix": prefix, **waits},
        reporter={"linger_ms": 100, "poll_interval_ms": 50, "hot_games": {"hot": 1}},
    )
    service = make_service(config, client=cluster_client)
    games = ["hot", *(f"game-{i}" for i in range(40))]
    assert len({service.schema.shard_of(g) for g in games}) == 16
    for game in games:
        store(Scripts(service.store), service.schema, game, numbered(game, 150))
    store(
        Scripts(service.store),
        service.schema,
        "game-0",
        numbered("game-0", 5, born_ms=now_ms() - 200_000, start=1000),
    )

    service.start()
    wait_until(lambda: len(endpoint.events()) >= 150 * len(games), what="every event")
    wait_until(lambda: read_totals(service.store).pending_events == 0, what="every batch acked")
    counts = service.stop().counts

    assert Counter(ids_of(endpoint.events())) == Counter(
        f"{g}#{i}" for g in games for i in range(150)
    )
    assert all(len(r.events) <= 128 for r in endpoint.received)
    totals = read_totals(service.store)
    assert (totals.counter("delivered"), totals.counter("stale")) == (150 * len(games), 5)
    assert totals.unaccounted == 0
    assert counts["delivered"] == 150 * len(games)
    assert counts.get("batches_unreplicated", 0) == counts.get("acks_unreplicated", 0) == 0
    waits = sum(
        int(n.client().info("commandstats").get("cmdstat_wait", {}).get("calls", 0))
        for n in cluster.primaries
    )
    assert (waits > 0) == bool(config.redis.wait_for_replicas)
