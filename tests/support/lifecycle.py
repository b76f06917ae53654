"""Drive the life cycle scripts of one shard directly, and read back what they left."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import orjson
import redis

from collector.store import Claimed, KeySchema, NackResult, ShardKeys, encode_entry
from tests.support.scriptcalls import Scripts

LEASE_MS = 60_000
MAX_AGE_MS = 600_000


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


class Shard:
    """One shard's keys and the scripts, with the arguments a test rarely varies filled in."""

    def __init__(self, client: redis.Redis, prefix: str = "life") -> None:
        self.r = client
        self.schema = KeySchema(prefix, 1)
        self.keys: ShardKeys = self.schema.shard(0)
        self.scripts = Scripts(client)
        self._seq = 0

    def entries(self, game: str, count: int, collected_ms: int | None = None) -> list[bytes]:
        born = int(time.time() * 1000) if collected_ms is None else collected_ms
        out = []
        for _ in range(count):
            out.append(encode_entry(born, orjson.dumps({"game": game, "seq": self._seq})))
            self._seq += 1
        return out

    def push(
        self, game: str, count: int, cap: int = 100_000, collected_ms: int | None = None
    ) -> list[bytes]:
        entries = self.entries(game, count, collected_ms)
        self.scripts.collect(self.keys, game, cap, 3600, entries)
        return entries

    def claim(
        self,
        game: str,
        token: str,
        *,
        batch_id: str | None = None,
        size: int = 128,
        most: int = 1,
        lease_ms: int = LEASE_MS,
        max_age_ms: int = MAX_AGE_MS,
        linger_ms: int = 0,
    ) -> Claimed:
        return self.scripts.claim(
            self.keys,
            game,
            batch_id or new_token(),
            token,
            size,
            most,
            lease_ms,
            max_age_ms,
            linger_ms,
        )

    def leased(self, game: str, count: int, token: str) -> str:
        """Push ``count`` events and claim them as one batch; its id."""
        self.push(game, count)
        claimed = self.claim(game, token)
        assert len(claimed.batches) == 1
        return claimed.batches[0][0]

    def nack(
        self,
        batch_id: str,
        token: str,
        *,
        permanent: bool = False,
        min_delay_ms: int = 0,
        initial_ms: int = 100,
        max_ms: int = 1000,
        max_attempts: int = 5,
        jitter: float = 0.5,
        dead_max: int = 100,
        reason: str = "test",
    ) -> NackResult:
        return self.scripts.nack(
            self.keys,
            batch_id,
            token,
            permanent=permanent,
            min_delay_ms=min_delay_ms,
            initial_ms=initial_ms,
            max_ms=max_ms,
            max_attempts=max_attempts,
            jitter=jitter,
            dead_max=dead_max,
            reason=reason,
        )

    def make_due(self, *batch_ids: str) -> None:
        """Move retry times into the past, so take_retries takes the batches now."""
        self.r.zadd(self.keys.retry, dict.fromkeys(batch_ids, 0))

    def expire(self, *batch_ids: str, when: int = 1) -> None:
        """Move lease deadlines into the past (a crashed or hung holder)."""
        self.r.zadd(self.keys.inflight, dict.fromkeys(batch_ids, when), xx=True)

    def meta(self, batch_id: str) -> dict[str, Any] | None:
        raw = self.r.hget(self.keys.batches, batch_id)
        return None if raw is None else dict(json.loads(raw))

    def stats(self) -> dict[str, int]:
        return {k.decode(): int(v) for k, v in self.r.hgetall(self.keys.stats).items()}

    def inflight(self) -> dict[str, float]:
        return {k.decode(): s for k, s in self.r.zrange(self.keys.inflight, 0, -1, withscores=True)}

    def retry(self) -> dict[str, float]:
        return {k.decode(): s for k, s in self.r.zrange(self.keys.retry, 0, -1, withscores=True)}

    def dead(self) -> list[str]:
        return [b.decode() for b in self.r.lrange(self.keys.dead, 0, -1)]

    def clear(self) -> None:
        """Delete every key of the shard (between hypothesis examples)."""
        keys = self.r.keys(f"{self.keys.tag}*")
        if keys:
            self.r.delete(*keys)

    def snapshot(self) -> dict[Any, Any]:
        """Every key of the shard with its content, to show that a call changed nothing."""
        keys = sorted(self.r.keys(f"{self.keys.tag}*"))
        with self.r.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.type(key)
            kinds = pipe.execute()
        with self.r.pipeline(transaction=False) as pipe:
            for key, kind in zip(keys, kinds, strict=True):
                if kind == b"list":
                    pipe.lrange(key, 0, -1)
                elif kind == b"zset":
                    pipe.zrange(key, 0, -1, withscores=True)
                elif kind == b"hash":
                    pipe.hgetall(key)
                elif kind == b"set":
                    pipe.smembers(key)
                else:
                    pipe.get(key)
            return dict(zip(keys, pipe.execute(), strict=True))


def new_token() -> str:
    return uuid.uuid4().hex
