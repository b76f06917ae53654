"""Test support: every Lua script through the store's typed requests, with positional
arguments that read like the scripts' headers, so a test states only what it varies."""

from __future__ import annotations

from collections.abc import Sequence

import redis
from redis.cluster import RedisCluster

from collector.store import (
    Ack,
    Claim,
    Claimed,
    Cluster,
    Collect,
    Extend,
    KeySchema,
    Moved,
    Nack,
    NackResult,
    Purge,
    Reap,
    Reaped,
    Release,
    Replay,
    Replayed,
    RetryBatch,
    RetryPolicy,
    Settle,
    Settled,
    ShardKeys,
    ShardLease,
    SingleServer,
    Store,
    TakeRetries,
)
from reporter._config import ReporterConfig


def store_of(client: redis.Redis | RedisCluster, schema: KeySchema | None = None) -> Store:
    """A store over a test's own client (the schema matters only for reads)."""
    backend = Cluster(client) if isinstance(client, RedisCluster) else SingleServer(client)
    return Store(backend, schema or KeySchema("telemetry", 1))


def store_on(client: redis.Redis | RedisCluster, config: ReporterConfig) -> Store:
    """The store a service with ``config`` would open, but over the test's own client."""
    schema = KeySchema(config.redis.key_prefix, config.redis.shards)
    if isinstance(client, RedisCluster):
        return Store(Cluster(client).waiting_for(config.redis), schema)
    return Store(SingleServer(client).waiting_for(config.redis), schema)


class Scripts:
    """The scripts of one store, one method each."""

    def __init__(self, client: redis.Redis | Store) -> None:
        self.store = client if isinstance(client, Store) else store_of(client)

    def collect(
        self,
        keys: ShardKeys,
        game: str,
        cap: int,
        ttl: int,
        entries: Sequence[bytes],
        pre_evicted: int = 0,
        dropped_full: int = 0,
        dropped_large: int = 0,
    ) -> int:
        return self.store.call(
            Collect(keys, game, entries, cap, ttl, pre_evicted, dropped_full, dropped_large)
        ).evicted

    def claim(
        self,
        keys: ShardKeys,
        game: str,
        batch_id: str,
        token: str,
        batch_size: int,
        max_batches: int,
        lease_ms: int,
        max_age_ms: int,
        linger_ms: int,
        dead_max: int = 10_000,
        max_bytes: int = 0,
        event_overhead: int = 0,
        in_order: bool = False,
    ) -> Claimed:
        return self.store.call(
            Claim(
                keys,
                game,
                batch_id,
                token,
                batch_size,
                max_batches,
                lease_ms,
                max_age_ms,
                linger_ms,
                dead_max,
                max_bytes,
                event_overhead,
                in_order,
            )
        )

    def ack(self, keys: ShardKeys, batch_id: str, token: str, stale: int = 0) -> int:
        return self.store.call(Ack(keys, batch_id, token, stale))

    def nack(
        self,
        keys: ShardKeys,
        batch_id: str,
        token: str,
        *,
        permanent: bool,
        min_delay_ms: int,
        initial_ms: int,
        max_ms: int,
        max_attempts: int,
        jitter: float,
        dead_max: int,
        reason: str,
    ) -> NackResult:
        policy = RetryPolicy(initial_ms, max_ms, max_attempts, dead_max)
        return self.store.call(
            Nack(keys, batch_id, token, policy, jitter, permanent, min_delay_ms, reason)
        )

    def settle(
        self,
        keys: ShardKeys,
        batch_id: str,
        token: str,
        *,
        stale: int = 0,
        retry: Sequence[int] = (),
        refused: Sequence[tuple[int, str]] = (),
        min_delay_ms: int = 0,
        initial_ms: int = 100,
        max_ms: int = 1000,
        max_attempts: int = 5,
        jitter: float = 0.5,
        dead_max: int = 100,
        reason: str = "test",
    ) -> Settled:
        policy = RetryPolicy(initial_ms, max_ms, max_attempts, dead_max)
        return self.store.call(
            Settle(
                keys, batch_id, token, policy, jitter, stale, retry, refused, min_delay_ms, reason
            )
        )

    def extend(self, keys: ShardKeys, batch_id: str, token: str, lease_ms: int) -> bool:
        return self.store.call(Extend(keys, batch_id, token, lease_ms))

    def release(self, keys: ShardKeys, batch_id: str, token: str) -> bool:
        return self.store.call(Release(keys, batch_id, token))

    def reap(self, keys: ShardKeys, limit: int, max_attempts: int, dead_max: int) -> Reaped:
        policy = RetryPolicy(1, 1, max_attempts, dead_max)  # reap uses only the last two
        return self.store.call(Reap(keys, limit, policy))

    def take_retries(
        self, keys: ShardKeys, token: str, lease_ms: int, limit: int, game: str = ""
    ) -> list[RetryBatch]:
        return self.store.call(TakeRetries(keys, token, lease_ms, limit, game))

    def replay(
        self,
        keys: ShardKeys,
        batch_id: str = "",
        limit: int = 1000,
        max_bytes: int = 0,
        event_overhead: int = 0,
    ) -> Replayed:
        return self.store.call(Replay(keys, batch_id, limit, max_bytes, event_overhead))

    def purge(self, keys: ShardKeys, limit: int = 1000) -> Moved:
        return self.store.call(Purge(keys, limit))

    def shard_lease(self, keys: ShardKeys, owner: str, lease_ms: int) -> bool:
        return self.store.call(ShardLease(keys, owner, lease_ms)).held
