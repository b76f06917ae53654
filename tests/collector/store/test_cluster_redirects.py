"""A cluster's redirects on the store's script calls, on a real 3-primary cluster with a
replica each, with and without ``wait_for_replicas`` (confirmed calls are sent again by the
store itself, so that their WAIT goes to the node that ran them):

- MOVED after a failover is followed to the node it names, even when no slot map can be
  read (the node the client asks for the map hangs, as one paused through a failover does);
- a redirect that does not end (a slot whose owners disagree) or a slot being migrated
  (ASK, then TRYAGAIN for a multi-key script) is a ``BackendUnavailable``, retried later,
  never a ``BackendRefused`` (which the reporter logs as a failed job)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from redis.cluster import RedisCluster

from collector.store import (
    BackendRefused,
    BackendUnavailable,
    KeySchema,
    ShardKeys,
    Store,
    TakeRetries,
)
from collector.store import Cluster as ClusterBackend
from tests.support.entries import make_config
from tests.support.servers import Cluster, Server, wait_until_true

MODES = {"plain": {}, "confirmed": {"wait_for_replicas": 1, "wait_timeout_ms": 500}}


def command(node: Server, *args: object) -> Any:
    client: Any = node.client()
    with client:
        return client.execute_command(*args)


def node_id(node: Server) -> str:
    return str(command(node, "CLUSTER", "MYID").decode())


class Setup:
    """A shard whose slot the first primary (``a``) serves, and a store per mode whose
    client reads its slot map only from the third primary (``c``)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.a, self.b, self.c = cluster.primaries
        schema = KeySchema("redirect", 64)
        self.keys: ShardKeys = next(
            k for k in schema.all_shards() if cluster.primary_of(k.ring) is self.a
        )
        self.slot = int(command(self.c, "CLUSTER", "KEYSLOT", self.keys.ring))
        self.stores: dict[str, Store] = {}
        for mode, waits in MODES.items():
            client = RedisCluster(
                host="127.0.0.1",
                port=self.c.port,
                dynamic_startup_nodes=False,  # the map is read from c alone
                socket_timeout=1.0,
                socket_connect_timeout=1.0,
            )
            config = make_config(cluster.url, redis={"cluster": True, **waits})
            self.stores[mode] = Store(ClusterBackend(client).waiting_for(config.redis), schema)

    def call(self, mode: str) -> object:
        return self.stores[mode].call(TakeRetries(self.keys, "token", 10_000, 1, ""))

    def close(self) -> None:
        for store in self.stores.values():
            store.close()


@pytest.fixture
def setup(own_replicated_cluster: Cluster) -> Iterator[Setup]:
    made = Setup(own_replicated_cluster)
    for mode in MODES:
        assert made.call(mode) == []  # both clients have read the map: a serves the slot
    yield made
    made.close()


def test_moved_after_a_failover_is_followed_without_a_readable_map(setup: Setup) -> None:
    replica = next(
        r
        for r in setup.cluster.replicas
        if command(r, "INFO", "replication")["master_port"] == setup.a.port
    )
    command(replica, "CLUSTER", "FAILOVER", "TAKEOVER")
    wait_until_true(lambda: setup.cluster.primary_of(setup.keys.ring) is replica, "takeover")
    wait_until_true(
        lambda: command(setup.a, "INFO", "replication")["role"] == "slave",
        "the old primary to know it is a replica",
    )
    setup.c.pause()  # the node the clients read their map from hangs
    try:
        for mode in MODES:
            assert setup.call(mode) == [], mode  # sent where MOVED said, WAIT there too
    finally:
        setup.c.resume()


def test_a_redirect_that_does_not_end_is_unavailable_not_refused(setup: Setup) -> None:
    # a gives the slot to b, which was not told: each sends the call to the other.
    command(setup.a, "CLUSTER", "SETSLOT", setup.slot, "NODE", node_id(setup.b))
    for mode in MODES:
        with pytest.raises(BackendUnavailable) as raised:
            setup.call(mode)
        assert not isinstance(raised.value, BackendRefused), mode


def test_a_slot_being_migrated_is_unavailable_not_refused(setup: Setup) -> None:
    # The shard's keys do not exist yet: a answers ASK b; b, importing, answers TRYAGAIN to
    # a script over several keys it does not all hold.
    command(setup.b, "CLUSTER", "SETSLOT", setup.slot, "IMPORTING", node_id(setup.a))
    command(setup.a, "CLUSTER", "SETSLOT", setup.slot, "MIGRATING", node_id(setup.b))
    for mode in MODES:
        with pytest.raises(BackendUnavailable, match=r"TryAgainError|TTL exhausted"):
            setup.call(mode)
