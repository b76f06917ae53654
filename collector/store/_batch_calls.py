"""Calls on batches: claimed, retried, finished, leased longer, given back, noted late, reaped."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from collector.retry import RetryPolicy
from collector.store._entries import split_entries
from collector.store._keys import ShardKeys
from collector.store._results import (
    Claimed,
    ClaimedBatch,
    NackResult,
    Reaped,
    RetryBatch,
    RetryState,
    Settled,
    text,
)
from collector.store._script_call import ScriptCall, call_id


@dataclass(frozen=True, slots=True)
class Claim(ScriptCall[Claimed]):
    """Take up to ``max_batches`` batches of the game's oldest events and lease them.
    Idempotent on ``batch_id``: the batches are ``<batch_id>.0``, ``<batch_id>.1``, ...

    A batch also ends before its events' JSON, each counted with ``event_overhead`` more
    bytes, would pass ``max_bytes`` (0: no limit).  Malformed entries are dead-lettered one
    by one (``dead_max`` dead letters kept).  ``in_order``: the game's batches go first in,
    first out (``lua/_order.lua``): nothing is claimed while an earlier one is pending
    (``Claimed.waiting``)."""

    script: ClassVar[str] = "claim"
    confirmed: ClassVar[bool] = True
    receipt: ClassVar[bool] = True
    shard: ShardKeys
    game: str
    batch_id: str
    token: str
    batch_size: int
    max_batches: int
    lease_ms: int
    max_age_ms: int
    linger_ms: int
    dead_max: int
    max_bytes: int = 0
    event_overhead: int = 0
    in_order: bool = False

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (
            s.queue(self.game),
            s.active,
            s.ring,
            s.inflight,
            s.batches,
            s.payloads,
            s.stats,
            s.dead,
            s.quarantine,
            s.receipt(self.batch_id),
            s.retry,
            s.order,
        )

    def args(self) -> Sequence[Any]:
        return (
            self.game,
            self.batch_id,
            self.token,
            self.batch_size,
            self.max_batches,
            self.lease_ms,
            self.max_age_ms,
            self.linger_ms,
            self.max_bytes,
            self.event_overhead,
            self.dead_max,
            int(self.in_order),
        )

    def parse(self, reply: Any) -> Claimed:
        pairs = reply[4:]
        return Claimed(
            int(reply[0]),
            int(reply[1]),
            [
                ClaimedBatch(text(pairs[i]), split_entries(pairs[i + 1]))
                for i in range(0, len(pairs), 2)
            ],
            int(reply[2]),
            bool(reply[3]),
        )


@dataclass(frozen=True, slots=True)
class TakeRetries(ScriptCall[list[RetryBatch]]):
    """Lease up to ``limit`` batches whose retry time has come (of ``game`` only, if set); a
    batch claimed in order only as its game's head, with those right behind it."""

    script: ClassVar[str] = "take_retries"
    confirmed: ClassVar[bool] = True
    receipt: ClassVar[bool] = True
    shard: ShardKeys
    token: str
    lease_ms: int
    limit: int
    game: str = ""

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (
            s.retry,
            s.inflight,
            s.batches,
            s.payloads,
            s.stats,
            s.quarantine,
            s.receipt(self.token),
            s.order,
        )

    def args(self) -> Sequence[Any]:
        return (self.token, self.lease_ms, self.limit, self.game)

    def parse(self, reply: Any) -> list[RetryBatch]:
        return [
            RetryBatch(
                text(reply[i]), text(reply[i + 1]), int(reply[i + 2]), split_entries(reply[i + 3])
            )
            for i in range(0, len(reply), 4)
        ]


@dataclass(frozen=True, slots=True)
class Ack(ScriptCall[int]):
    """Finish a batch the endpoint took whole (``stale`` of its events were not sent); the
    result is the events counted as delivered, or -1 if the caller no longer holds the
    lease."""

    script: ClassVar[str] = "ack"
    confirmed: ClassVar[bool] = True
    receipt: ClassVar[bool] = True
    shard: ShardKeys
    batch_id: str
    token: str
    stale: int = 0

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (
            s.inflight,
            s.batches,
            s.payloads,
            s.stats,
            s.quarantine,
            s.receipt(self.batch_id),
            s.order,
        )

    def args(self) -> Sequence[Any]:
        return (self.batch_id, self.token, self.stale)

    def parse(self, reply: Any) -> int:
        return int(reply)


@dataclass(frozen=True, slots=True)
class AckMany(ScriptCall[list[int]]):
    """Finish several batches of one shard, leased under ``token``, that the endpoint took
    whole, in one script call (``acks``: each batch's id and the events of it not sent as
    stale, at most 64, each id once); per batch, in order, what ``Ack`` of it alone would
    answer."""

    script: ClassVar[str] = "ack_many"
    confirmed: ClassVar[bool] = True
    receipt: ClassVar[bool] = True
    shard: ShardKeys
    token: str
    acks: tuple[tuple[str, int], ...]

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (
            s.inflight,
            s.batches,
            s.payloads,
            s.stats,
            s.quarantine,
            s.order,
            *(s.receipt(batch_id) for batch_id, _ in self.acks),
        )

    def args(self) -> Sequence[Any]:
        acks = [value for batch_id, stale in self.acks for value in (batch_id, stale)]
        return (self.token, *acks)

    def parse(self, reply: Any) -> list[int]:
        return [int(answer) for answer in reply]


@dataclass(frozen=True, slots=True)
class Nack(ScriptCall[NackResult]):
    """A delivery attempt failed: schedule a retry (not before ``min_delay_ms``) or, when
    ``permanent`` or out of attempts, dead-letter the batch with ``reason``."""

    script: ClassVar[str] = "nack"
    receipt: ClassVar[bool] = True
    shard: ShardKeys
    batch_id: str
    token: str
    policy: RetryPolicy
    jitter: float
    permanent: bool = False
    min_delay_ms: int = 0
    reason: str = ""

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (
            s.inflight,
            s.batches,
            s.payloads,
            s.retry,
            s.dead,
            s.stats,
            s.quarantine,
            s.receipt(self.batch_id),
            s.order,
        )

    def args(self) -> Sequence[Any]:
        p = self.policy
        return (
            self.batch_id,
            self.token,
            int(self.permanent),
            self.min_delay_ms,
            p.initial_ms,
            p.max_ms,
            p.max_attempts,
            repr(self.jitter),
            p.dead_max,
            self.reason[:500],
        )

    def parse(self, reply: Any) -> NackResult:
        return NackResult(RetryState(text(reply[0])), int(reply[1]))


@dataclass(frozen=True, slots=True)
class Settle(ScriptCall[Settled]):
    """Finish a batch with a partial outcome: ``retry`` and ``refused`` hold positions in the
    batch's entries (0-based, as claimed; each at most once, none of the ``stale`` ones), a
    reason for each refused one; the rest are delivered."""

    script: ClassVar[str] = "settle"
    confirmed: ClassVar[bool] = True
    receipt: ClassVar[bool] = True
    shard: ShardKeys
    batch_id: str
    token: str
    policy: RetryPolicy
    jitter: float
    stale: int = 0
    retry: Sequence[int] = ()
    refused: Sequence[tuple[int, str]] = ()
    min_delay_ms: int = 0
    reason: str = ""

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (
            s.inflight,
            s.batches,
            s.payloads,
            s.retry,
            s.dead,
            s.stats,
            s.quarantine,
            s.receipt(self.batch_id),
            s.order,
        )

    def args(self) -> Sequence[Any]:
        p = self.policy
        refused: list[Any] = []
        for position, reason in self.refused:
            refused += (position + 1, reason[:200])
        return (
            self.batch_id,
            self.token,
            self.stale,
            self.min_delay_ms,
            p.initial_ms,
            p.max_ms,
            p.max_attempts,
            repr(self.jitter),
            p.dead_max,
            self.reason[:500],
            ",".join(str(position + 1) for position in self.retry),
            len(self.refused),
            *refused,
        )

    def parse(self, reply: Any) -> Settled:
        return Settled(
            int(reply[0]), text(reply[1]), RetryState(text(reply[2])), int(reply[3]), text(reply[4])
        )


@dataclass(frozen=True, slots=True)
class Extend(ScriptCall[bool]):
    """Renew a held lease to ``lease_ms`` from now; False if it is no longer held."""

    script: ClassVar[str] = "extend"
    shard: ShardKeys
    batch_id: str
    token: str
    lease_ms: int

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.inflight, s.batches, s.payloads, s.stats, s.quarantine)

    def args(self) -> Sequence[Any]:
        return (self.batch_id, self.token, self.lease_ms)

    def parse(self, reply: Any) -> bool:
        return bool(reply)


@dataclass(frozen=True, slots=True)
class Release(ScriptCall[bool]):
    """Hand a held batch back for retry without charging an attempt, due again in
    ``delay_ms``."""

    script: ClassVar[str] = "release"
    receipt: ClassVar[bool] = True
    shard: ShardKeys
    batch_id: str
    token: str
    delay_ms: int = 0

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (
            s.inflight,
            s.batches,
            s.retry,
            s.stats,
            s.payloads,
            s.quarantine,
            s.receipt(self.batch_id),
        )

    def args(self) -> Sequence[Any]:
        return (self.batch_id, self.token, self.delay_ms)

    def parse(self, reply: Any) -> bool:
        return bool(reply)


@dataclass(frozen=True, slots=True)
class NoteLate(ScriptCall[int]):
    """Items that missed the anti-addiction interface's window: count ``moved`` items
    delivered with their behaviour time moved into it, and ``logins`` and ``logouts`` dropped
    as stale, and keep ``record`` (JSON: their sessions and original times) in the shard's
    audit list, at most ``keep`` records (those trimmed beyond it are counted); the result
    is the records kept."""

    script: ClassVar[str] = "note_late"
    receipt: ClassVar[bool] = True
    shard: ShardKeys
    moved: int
    record: str
    keep: int
    logins: int = 0
    logouts: int = 0
    call: str = field(default_factory=call_id)  # the receipt's id: a resend does nothing more

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.stats, s.late, s.quarantine, s.receipt(self.call))

    def args(self) -> Sequence[Any]:
        return (self.moved, self.record, self.keep, self.logins, self.logouts)

    def parse(self, reply: Any) -> int:
        return int(reply)


@dataclass(frozen=True, slots=True)
class Reap(ScriptCall[Reaped]):
    """Return up to ``limit`` batches whose lease expired to retry (or dead-letter them)."""

    script: ClassVar[str] = "reap"
    shard: ShardKeys
    limit: int
    policy: RetryPolicy

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (
            s.inflight,
            s.batches,
            s.payloads,
            s.retry,
            s.dead,
            s.stats,
            s.quarantine,
            s.order,
        )

    def args(self) -> Sequence[Any]:
        return (self.limit, self.policy.max_attempts, self.policy.dead_max)

    def parse(self, reply: Any) -> Reaped:
        return Reaped(int(reply[0]), int(reply[1]))
