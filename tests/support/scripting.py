"""One shard of the life cycle scripts' tests (claim, ack, nack, retries, order): its schema,
a game, a claim, and what the scripts leave (registration, metadata, a snapshot of every key)."""

from __future__ import annotations

import json
from typing import Any

import redis

from collector.store import KeySchema, ShardKeys
from tests.support.scriptcalls import Scripts

SCHEMA = KeySchema("telemetry", 4)
GAME = "game-1"
KEYS = SCHEMA.for_game(GAME)
LEASE_MS = 30_000
MAX_AGE_MS = 180_000
TOKEN = "token-1"


def claim(
    scripts: Scripts,
    batch_id: str = "b1",
    *,
    size: int = 128,
    most: int = 1,
    lease_ms: int = LEASE_MS,
    max_age_ms: int = MAX_AGE_MS,
    linger_ms: int = 0,
    token: str = TOKEN,
) -> Any:
    return scripts.claim(KEYS, GAME, batch_id, token, size, most, lease_ms, max_age_ms, linger_ms)


def registered(client: redis.Redis) -> tuple[bool, list[bytes]]:
    return bool(client.sismember(KEYS.active, GAME)), client.zrange(KEYS.ring, 0, -1)


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
