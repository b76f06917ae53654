"""The batch life cycle with this reporter's settings applied: claim, retry, ack, nack, ...

Every call goes through the store (``collector.store``); this module only fills in what the
config decides (batch size, lease, freshness, retry policy) and draws the ids.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Sequence
from typing import NamedTuple

from collector.retry import RetryPolicy
from collector.store import (
    Ack,
    AckMany,
    BackendError,
    BackendUnreplicated,
    Claim,
    Claimed,
    Extend,
    GameState,
    Nack,
    NackResult,
    NoteLate,
    Reap,
    Reaped,
    Release,
    RetryBatch,
    RingSlice,
    Settle,
    Settled,
    ShardKeys,
    Store,
    TakeRetries,
)
from reporter._config import ReporterConfig
from reporter._constants import LATE_RECORDS_KEPT
from reporter._delivery.freshness import sink_freshness
from reporter._sinks.registry import make_sink


class Partial(NamedTuple):
    """What became of a batch answered item by item (positions in its entries, 0-based):
    how many of its events were stale, those to send again (not before ``min_delay_ms``, for
    ``reason``) and those refused for good, with their reasons."""

    stale: int
    retry: Sequence[int]
    refused: Sequence[tuple[int, str]]
    min_delay_ms: int
    reason: str


def new_id() -> str:
    return uuid.uuid4().hex


# Batches one ack_many call takes at most (lua/_ack.lua); a lease holds no more than a claim's.
ACKS_PER_CALL = 64


def _slices(items: list[Ack], size: int) -> list[list[Ack]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _one(reply: list[int] | BackendError, i: int) -> int | BackendError:
    """The ``i``-th batch's answer of an ack_many call: its own, or the call's error (an
    unreplicated one carries this batch's answer, as ``Ack``'s would)."""
    if not isinstance(reply, BackendError):
        return reply[i]
    if isinstance(reply, BackendUnreplicated) and isinstance(reply.result, list):
        one = BackendUnreplicated(str(reply), reply.result[i])
        one.__cause__ = reply.__cause__
        return one
    return reply


class Batches:
    """Typed batch operations on one store; every call touches one shard's keys only."""

    def __init__(self, store: Store, config: ReporterConfig) -> None:
        self.store = store
        self._reporter = config.reporter
        self.freshness = sink_freshness(config)
        # Each game's batches first in, first out (the sink asks for it: lua/_order.lua).
        self.in_order = make_sink(config).in_order()
        self._lease_ms = int(config.reporter.lease_seconds * 1000)
        self.policy = RetryPolicy.of(config.retry, config.dead.max_batches)

    def ring(self, keys: ShardKeys, after: str, count: int, known: Sequence[str] = ()) -> RingSlice:
        return self.store.ring(keys, after, count, known)

    def game_states(self, keys: ShardKeys, games: list[str]) -> list[GameState]:
        return self.store.game_states(keys, games)

    def claim(
        self,
        keys: ShardKeys,
        game: str,
        token: str,
        max_batches: int,
        max_bytes: int = 0,
        event_overhead: int = 0,
    ) -> Claimed:
        """Claim batches cut at ``batch_size`` events and ``max_bytes`` bytes of events
        (each counted with ``event_overhead``; 0: no byte limit)."""
        r, rule = self._reporter, self.freshness
        # With an event time field the event's own time decides, which the script cannot
        # read: it drops nothing then, and the deliverer drops (and counts) the stale events.
        max_age_ms = 0 if rule.field else rule.max_age_ms
        return self.store.call(
            Claim(
                keys,
                game,
                new_id(),
                token,
                r.batch_size,
                max_batches,
                self._lease_ms,
                max_age_ms,
                r.linger_ms,
                self.policy.dead_max,
                max_bytes,
                event_overhead,
                self.in_order,
            )
        )

    def take_retries(
        self, keys: ShardKeys, token: str, limit: int, game: str = ""
    ) -> list[RetryBatch]:
        return self.store.call(TakeRetries(keys, token, self._lease_ms, limit, game))

    def ack(self, keys: ShardKeys, batch_id: str, token: str, stale: int) -> int:
        return self.store.call(Ack(keys, batch_id, token, stale))

    def ack_many(self, acks: Sequence[Ack]) -> list[int | BackendError]:
        """Ack several batches in one round trip (one per node on a cluster), those of one
        lease in one script call; a result or the error it met, each."""
        leases: dict[tuple[ShardKeys, str], list[Ack]] = {}
        for ack in acks:
            leases.setdefault((ack.shard, ack.token), []).append(ack)
        calls = [
            AckMany(shard, token, tuple((a.batch_id, a.stale) for a in part))
            for (shard, token), lease in leases.items()
            for part in _slices(lease, ACKS_PER_CALL)
        ]
        answers: dict[str, int | BackendError] = {}
        for call, reply in zip(calls, self.store.call_many(calls), strict=True):
            for i, (batch_id, _) in enumerate(call.acks):
                answers[batch_id] = _one(reply, i)
        return [answers[ack.batch_id] for ack in acks]

    def nack(
        self,
        keys: ShardKeys,
        batch_id: str,
        token: str,
        *,
        permanent: bool,
        min_delay_ms: int,
        reason: str,
    ) -> NackResult:
        return self.store.call(
            Nack(
                keys, batch_id, token, self.policy, random.random(), permanent, min_delay_ms, reason
            )
        )

    def settle(self, keys: ShardKeys, batch_id: str, token: str, part: Partial) -> Settled:
        """Finish a batch with a partial outcome."""
        return self.store.call(
            Settle(
                keys,
                batch_id,
                token,
                self.policy,
                random.random(),
                part.stale,
                part.retry,
                part.refused,
                part.min_delay_ms,
                part.reason,
            )
        )

    def release(self, keys: ShardKeys, batch_id: str, token: str, delay_ms: int = 0) -> bool:
        return self.store.call(Release(keys, batch_id, token, delay_ms))

    def release_many(
        self, batches: Sequence[tuple[str, ShardKeys, str]]
    ) -> list[bool | BackendError]:
        """Release (batch id, shard, token) each, in few round trips; per batch, whether it
        was released (False: its lease was no longer ours) or the error met."""
        return self.store.call_many(
            [Release(keys, batch_id, token) for batch_id, keys, token in batches]
        )

    def extend(self, keys: ShardKeys, batch_id: str, token: str) -> bool:
        return self.store.call(Extend(keys, batch_id, token, self._lease_ms))

    def note_alert(self, name: str, message: str) -> None:
        self.store.note_alert(name, message, time.time_ns() // 1_000_000)

    def note_late(
        self, keys: ShardKeys, moved: int, record: str, logins: int = 0, logouts: int = 0
    ) -> int:
        """Count ``moved`` items delivered with their time moved, ``logins`` and
        ``logouts`` dropped as stale, and keep ``record``."""
        return self.store.call(NoteLate(keys, moved, record, LATE_RECORDS_KEPT, logins, logouts))

    def reap(self, keys: ShardKeys, limit: int) -> Reaped:
        return self.store.call(Reap(keys, limit, self.policy))
