"""The reporter's view of Redis: which games are ready, and the batch life cycle scripts."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from collector._config import TelemetryConfig
from collector._pipeline import runner
from collector._schema import ShardKeys, entry_time_ms
from collector._scripts import Claimed, NackResult, RetryBatch, Scripts, ack_call


@dataclass(frozen=True, slots=True)
class GameState:
    game: str
    length: int
    oldest_ms: int | None


def new_id() -> str:
    return uuid.uuid4().hex


class BatchStore:
    """Thin, typed calls over one client; every call touches one shard's keys only."""

    def __init__(self, client: Any, config: TelemetryConfig) -> None:
        self.client = client
        self.scripts = Scripts(client)
        self._reporter = config.reporter
        self._retry = config.retry
        self._dead_max = config.dead.max_batches
        self._lease_ms = int(config.reporter.lease_seconds * 1000)
        self._run = runner(config.redis.cluster)

    def ring(self, keys: ShardKeys, start: int, count: int) -> tuple[list[str], int, int]:
        """Up to ``count`` games of the shard's ring from ``start``, the ring's length, and
        how many batches wait for a retry (so an idle shard costs one round trip)."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.lrange(keys.ring, start, start + count - 1)
            pipe.llen(keys.ring)
            pipe.zcard(keys.retry)
            names, length, retries = pipe.execute()
        return [n.decode() for n in names], int(length), int(retries)

    def game_states(self, keys: ShardKeys, games: list[str]) -> list[GameState]:
        """Length and oldest collect time of each game's buffer, in one round trip."""
        if not games:
            return []
        with self.client.pipeline(transaction=False) as pipe:
            for game in games:
                pipe.llen(keys.queue(game))
                pipe.lindex(keys.queue(game), 0)
            replies = pipe.execute()
        return [
            GameState(game, int(replies[2 * i]),
                      entry_time_ms(replies[2 * i + 1]) if replies[2 * i + 1] else None)
            for i, game in enumerate(games)
        ]

    def claim(self, keys: ShardKeys, game: str, token: str, max_batches: int) -> Claimed:
        r = self._reporter
        # With event_time_field the event's own time decides, which the script cannot read:
        # it drops nothing then, and the deliverer drops (and counts) the stale events.
        max_age_ms = 0 if r.event_time_field else int(r.max_age_seconds * 1000)
        return self.scripts.claim(
            keys, game, new_id(), token, r.batch_size, max_batches, self._lease_ms,
            max_age_ms, r.linger_ms,
        )

    def take_retries(self, keys: ShardKeys, token: str, limit: int, game: str = ""
                     ) -> list[RetryBatch]:
        return self.scripts.take_retries(keys, token, self._lease_ms, limit, game)

    def ack(self, keys: ShardKeys, batch_id: str, token: str, stale: int, rejected: int) -> int:
        return self.scripts.ack(keys, batch_id, token, stale, rejected)

    def ack_many(self, keys: ShardKeys, acks: Sequence[tuple[str, str, int, int]]) -> list[Any]:
        """Ack several batches of one shard, (batch id, token, stale, rejected) each, in one
        round trip; a reply per batch as ``ack`` returns it, or the error it met."""
        return self._run(self.client, self.scripts.script("ack"),
                         [ack_call(keys, *ack) for ack in acks])

    def nack(self, keys: ShardKeys, batch_id: str, token: str, *, permanent: bool,
             min_delay_ms: int, reason: str) -> NackResult:
        return self.scripts.nack(
            keys, batch_id, token, permanent=permanent, min_delay_ms=min_delay_ms,
            initial_ms=self._retry.initial_delay_ms, max_ms=self._retry.max_delay_ms,
            max_attempts=self._retry.max_attempts, jitter=random.random(),
            dead_max=self._dead_max, reason=reason,
        )

    def release(self, keys: ShardKeys, batch_id: str, token: str) -> bool:
        return self.scripts.release(keys, batch_id, token)

    def extend(self, keys: ShardKeys, batch_id: str, token: str) -> bool:
        return self.scripts.extend(keys, batch_id, token, self._lease_ms)

    def reap(self, keys: ShardKeys, limit: int) -> tuple[int, int]:
        return self.scripts.reap(keys, limit, self._retry.max_attempts, self._dead_max)
