"""One typed request per Lua script: its KEYS and ARGV (as the script's header lists them) and
how its reply reads.

``Store.call(request)`` runs one and returns the typed result; ``Store.call_many(requests)``
runs many in few socket writes and returns a result or a ``BackendError`` per request.
Callers never see raw replies.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from collector._constants import (
    DEDUP_KEYS_PER_GAME,
    WRITERS_PER_SHARD,
    WRITES_PER_WRITER,
    WRITES_REMEMBERED_MS,
)
from collector.store._entries import join_entries, split_entries
from collector.store._keys import ShardKeys, receipt_key, sibling
from collector.store._results import (
    Claimed,
    ClaimedBatch,
    HoldState,
    Moved,
    NackResult,
    Reaped,
    Replayed,
    RetryBatch,
    RetryPolicy,
    Settled,
    Slot,
    Stored,
    Tokens,
    text,
)

R_co = TypeVar("R_co", covariant=True)


def call_id() -> str:
    """A new id for one script call that keeps a receipt under its own id."""
    return uuid.uuid4().hex


class ScriptCall(Generic[R_co]):
    """A call of the script named ``script``; subclasses are frozen dataclasses."""

    __slots__ = ()
    script: ClassVar[str]
    # A write that a failover must not undo unnoticed: with [redis] wait_for_replicas, WAIT
    # follows it, and too few replicas make it ``BackendUnreplicated``.
    confirmed: ClassVar[bool] = False
    # A script that keeps a receipt for a resend (lua/_guard.lua): the store passes the
    # receipt lifetime in ms as its last ARGV.
    receipt: ClassVar[bool] = False

    def keys(self) -> Sequence[str]:
        raise NotImplementedError

    def args(self) -> Sequence[Any]:
        raise NotImplementedError

    def parse(self, reply: Any) -> R_co:
        raise NotImplementedError


# -- requests ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Collect(ScriptCall[Stored]):
    """Store one game's entries; the result is how many events the cap evicted (including
    ``pre_evicted``, events the client left out because the cap would trim them at once),
    the shard's identity marker (``identity`` becomes it if the shard has none), and how
    many entries were merged.

    Written once: with a ``writer`` id, ``seq`` (counted from 1 per writer and shard) and
    ``low`` (the writer's lowest ``seq`` for this shard still without an answer), the shard
    remembers the write and answers a repeat with the first answer, storing nothing
    (``Stored.repeat``).  An entry made by ``keyed_entry`` carries a dedup key: it is merged
    (counted, not stored) if an entry of the game with the same key was stored within
    ``dedup_window_ms``."""

    script: ClassVar[str] = "collect"
    confirmed: ClassVar[bool] = True
    shard: ShardKeys
    game: str
    entries: Sequence[bytes]
    cap: int
    ttl_seconds: int
    pre_evicted: int = 0
    dropped_buffer_full: int = 0
    dropped_too_large: int = 0
    identity: str = ""
    writer: str = ""
    seq: int = 0
    low: int = 0
    dedup_window_ms: int = 0

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.queue(self.game), s.active, s.ring, s.stats, s.marker, s.quarantine,
                s.writes, s.writers, s.seen(self.game))

    def args(self) -> Sequence[Any]:
        return (self.game, self.cap, self.ttl_seconds, self.pre_evicted,
                self.dropped_buffer_full, self.dropped_too_large, join_entries(self.entries),
                self.identity, self.writer, self.seq, self.low, WRITES_REMEMBERED_MS,
                WRITERS_PER_SHARD, WRITES_PER_WRITER, self.dedup_window_ms,
                DEDUP_KEYS_PER_GAME)

    def parse(self, reply: Any) -> Stored:
        return Stored(int(reply[0]), text(reply[1]), int(reply[2]), bool(reply[3]))


@dataclass(frozen=True, slots=True)
class Claim(ScriptCall[Claimed]):
    """Take up to ``max_batches`` batches of the game's oldest events and lease them.
    Idempotent on ``batch_id``: the batches are ``<batch_id>.0``, ``<batch_id>.1``, ...

    A batch also ends before its events' JSON, each counted with ``event_overhead`` more
    bytes, would pass ``max_bytes`` (0: no limit).  Malformed entries are dead-lettered one
    by one (``dead_max`` dead letters kept)."""

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

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.queue(self.game), s.active, s.ring, s.inflight, s.batches, s.payloads,
                s.stats, s.dead, s.quarantine, s.receipt(self.batch_id))

    def args(self) -> Sequence[Any]:
        return (self.game, self.batch_id, self.token, self.batch_size, self.max_batches,
                self.lease_ms, self.max_age_ms, self.linger_ms, self.max_bytes,
                self.event_overhead, self.dead_max)

    def parse(self, reply: Any) -> Claimed:
        pairs = reply[3:]
        return Claimed(int(reply[0]), int(reply[1]), [
            ClaimedBatch(text(pairs[i]), split_entries(pairs[i + 1]))
            for i in range(0, len(pairs), 2)
        ], int(reply[2]))


@dataclass(frozen=True, slots=True)
class TakeRetries(ScriptCall[list[RetryBatch]]):
    """Lease up to ``limit`` batches whose retry time has come (of ``game`` only, if set)."""

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
        return (s.retry, s.inflight, s.batches, s.payloads, s.stats, s.quarantine,
                s.receipt(self.token))

    def args(self) -> Sequence[Any]:
        return (self.token, self.lease_ms, self.limit, self.game)

    def parse(self, reply: Any) -> list[RetryBatch]:
        return [
            RetryBatch(text(reply[i]), text(reply[i + 1]), int(reply[i + 2]),
                       split_entries(reply[i + 3]))
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
        return (s.inflight, s.batches, s.payloads, s.stats, s.quarantine,
                s.receipt(self.batch_id))

    def args(self) -> Sequence[Any]:
        return (self.batch_id, self.token, self.stale)

    def parse(self, reply: Any) -> int:
        return int(reply)


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
        return (s.inflight, s.batches, s.payloads, s.retry, s.dead, s.stats, s.quarantine,
                s.receipt(self.batch_id))

    def args(self) -> Sequence[Any]:
        p = self.policy
        return (self.batch_id, self.token, int(self.permanent), self.min_delay_ms,
                p.initial_ms, p.max_ms, p.max_attempts, repr(self.jitter), p.dead_max,
                self.reason[:500])

    def parse(self, reply: Any) -> NackResult:
        return NackResult(text(reply[0]), int(reply[1]))


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
        return (s.inflight, s.batches, s.payloads, s.retry, s.dead, s.stats, s.quarantine,
                s.receipt(self.batch_id))

    def args(self) -> Sequence[Any]:
        p = self.policy
        refused: list[Any] = []
        for position, reason in self.refused:
            refused += (position + 1, reason[:200])
        return (self.batch_id, self.token, self.stale, self.min_delay_ms, p.initial_ms,
                p.max_ms, p.max_attempts, repr(self.jitter), p.dead_max, self.reason[:500],
                ",".join(str(position + 1) for position in self.retry), len(self.refused),
                *refused)

    def parse(self, reply: Any) -> Settled:
        return Settled(int(reply[0]), text(reply[1]), text(reply[2]), int(reply[3]),
                       text(reply[4]))


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
    """Hand a held batch back for retry without charging an attempt."""

    script: ClassVar[str] = "release"
    receipt: ClassVar[bool] = True
    shard: ShardKeys
    batch_id: str
    token: str

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.inflight, s.batches, s.retry, s.stats, s.payloads, s.quarantine,
                s.receipt(self.batch_id))

    def args(self) -> Sequence[Any]:
        return (self.batch_id, self.token)

    def parse(self, reply: Any) -> bool:
        return bool(reply)


@dataclass(frozen=True, slots=True)
class Reap(ScriptCall[Reaped]):
    """Return up to ``limit`` batches whose lease expired to retry (or dead-letter them)."""

    script: ClassVar[str] = "reap"
    shard: ShardKeys
    limit: int
    policy: RetryPolicy

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.inflight, s.batches, s.payloads, s.retry, s.dead, s.stats, s.quarantine)

    def args(self) -> Sequence[Any]:
        return (self.limit, self.policy.max_attempts, self.policy.dead_max)

    def parse(self, reply: Any) -> Reaped:
        return Reaped(int(reply[0]), int(reply[1]))


@dataclass(frozen=True, slots=True)
class Replay(ScriptCall[Replayed]):
    """Move one dead letter (``batch_id``), or the oldest ``limit``, back to retry, cutting
    a batch again when it holds more than ``max_bytes`` (as ``Claim`` counts them)."""

    script: ClassVar[str] = "replay"
    receipt: ClassVar[bool] = True
    shard: ShardKeys
    batch_id: str = ""
    limit: int = 1000
    max_bytes: int = 0
    event_overhead: int = 0
    call: str = field(default_factory=call_id)  # the receipt's id: a resend replays nothing

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.dead, s.batches, s.retry, s.stats, s.payloads, s.quarantine,
                s.receipt(self.call))

    def args(self) -> Sequence[Any]:
        return (self.batch_id, self.limit, self.max_bytes, self.event_overhead)

    def parse(self, reply: Any) -> Replayed:
        return Replayed(int(reply[0]), int(reply[1]), int(reply[2]))


@dataclass(frozen=True, slots=True)
class Purge(ScriptCall[Moved]):
    """Delete the oldest ``limit`` dead letters for good."""

    script: ClassVar[str] = "purge"
    receipt: ClassVar[bool] = True
    shard: ShardKeys
    limit: int = 1000
    call: str = field(default_factory=call_id)  # the receipt's id: a resend purges nothing

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.dead, s.batches, s.payloads, s.stats, s.quarantine, s.receipt(self.call))

    def args(self) -> Sequence[Any]:
        return (self.limit,)

    def parse(self, reply: Any) -> Moved:
        return Moved(int(reply[0]), int(reply[1]))


@dataclass(frozen=True, slots=True)
class PurgeIds(ScriptCall[Moved]):
    """Delete the named dead letters for good (those still on the dead list); send a few
    hundred ids per call at most, each costs a scan of the dead list."""

    script: ClassVar[str] = "purge_ids"
    receipt: ClassVar[bool] = True
    shard: ShardKeys
    batch_ids: Sequence[str]
    call: str = field(default_factory=call_id)  # the receipt's id

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.dead, s.batches, s.payloads, s.stats, s.quarantine, s.receipt(self.call))

    def args(self) -> Sequence[Any]:
        return tuple(self.batch_ids)

    def parse(self, reply: Any) -> Moved:
        return Moved(int(reply[0]), int(reply[1]))


@dataclass(frozen=True, slots=True)
class ShardLease(ScriptCall[bool]):
    """Take or renew ``owner``'s lease on a shard (``lease_ms`` 0 gives it up); True if
    ``owner`` holds it now."""

    script: ClassVar[str] = "shard_lease"
    shard: ShardKeys
    owner: str
    lease_ms: int

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.owner, s.stats, s.quarantine)

    def args(self) -> Sequence[Any]:
        return (self.owner, self.lease_ms)

    def parse(self, reply: Any) -> bool:
        return bool(reply)


@dataclass(frozen=True, slots=True)
class Heartbeat(ScriptCall[int]):
    """Note ``owner`` alive in the reporter registry (``key``) until ``deadline_ms``, forget
    the reporters expired at ``now_ms`` (each reporter's own clock); the live count."""

    script: ClassVar[str] = "heartbeat"
    key: str
    owner: str
    now_ms: int
    deadline_ms: int

    def keys(self) -> Sequence[str]:
        # the registry's shard (0): its counters and quarantine, for a registry set aside
        return (self.key, sibling(self.key, "stats"), sibling(self.key, "quarantine"))

    def args(self) -> Sequence[Any]:
        return (self.owner, self.now_ms, self.deadline_ms)

    def parse(self, reply: Any) -> int:
        return int(reply)


@dataclass(frozen=True, slots=True)
class ReadShard(ScriptCall[list[Any]]):
    """A shard's whole state in one atomic read, with the buffers of ``games``; the reply
    as the script returns it (``_shard_reads.read_shard`` reads it)."""

    script: ClassVar[str] = "read_shard"
    shard: ShardKeys
    games: Sequence[str]

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.ring, s.inflight, s.retry, s.dead, s.stats, s.owner, s.batches,
                *(s.queue(g) for g in self.games))

    def args(self) -> Sequence[Any]:
        return ()

    def parse(self, reply: Any) -> list[Any]:
        return list(reply)


@dataclass(frozen=True, slots=True)
class SetAside(ScriptCall[int]):
    """Move to the quarantine what a sweep's reads of a shard met and cannot use: keys of its
    registry of another type than they must be, and ``members`` of its ring that are not game
    names; the result is the records set aside."""

    script: ClassVar[str] = "set_aside"
    shard: ShardKeys
    members: Sequence[bytes] = ()

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.ring, s.active, s.retry, s.marker, s.stats, s.legacy_ring, s.quarantine)

    def args(self) -> Sequence[Any]:
        return tuple(self.members)

    def parse(self, reply: Any) -> int:
        return int(reply)


@dataclass(frozen=True, slots=True)
class TakeTokens(ScriptCall[Tokens]):
    """Take up to ``wanted`` tokens from the bucket at ``key`` (``KeySchema.limiter``):
    ``rate`` per second, at most ``capacity`` held.  ``wanted`` < 0 gives tokens back;
    ``pause_ms`` > 0 grants nothing for that long; a ``spare`` caller gets none while tokens
    are scarce.  ``now_us`` replaces Redis TIME (tests)."""

    script: ClassVar[str] = "take_tokens"
    receipt: ClassVar[bool] = True
    key: str
    rate: float
    capacity: int
    wanted: int
    pause_ms: int = 0
    now_us: int | None = None
    spare: bool = False
    call: str = field(default_factory=call_id)  # the receipt's id: a resend takes no more

    def keys(self) -> Sequence[str]:
        # the receipt, and the limiter's own quarantine and counters (its hash tag is not a
        # shard's), for a bucket of another type set aside
        return (self.key, receipt_key(self.key, self.call), sibling(self.key, "quarantine"),
                sibling(self.key, "stats"))

    def args(self) -> Sequence[Any]:
        return (repr(self.rate), self.capacity, self.wanted, self.pause_ms,
                "" if self.now_us is None else self.now_us, "1" if self.spare else "")

    def parse(self, reply: Any) -> Tokens:
        return Tokens(int(reply[0]), int(reply[1]), bool(reply[2]))


@dataclass(frozen=True, slots=True)
class ReserveSlot(ScriptCall[Slot]):
    """Reserve the next free slot of ``scope`` ('' for the whole key, or a game's bizId) in
    the slots at ``key`` (``KeySchema.limiter``), slots ``interval_us`` apart, if it is at
    most ``horizon_us`` ahead (-1: only look); ``pause_ms`` > 0 puts every scope's next slot
    that far from now.  ``now_us`` replaces Redis TIME (tests)."""

    script: ClassVar[str] = "reserve_slot"
    receipt: ClassVar[bool] = True
    key: str
    interval_us: int
    scope: str = ""
    horizon_us: int = 0
    pause_ms: int = 0
    now_us: int | None = None
    call: str = field(default_factory=call_id)  # the receipt's id: a resend takes no more

    def keys(self) -> Sequence[str]:
        # the receipt, and the limiter's own quarantine and counters (its hash tag is not a
        # shard's), for a hash of another type set aside
        return (self.key, receipt_key(self.key, self.call), sibling(self.key, "quarantine"),
                sibling(self.key, "stats"))

    def args(self) -> Sequence[Any]:
        return (self.interval_us, self.scope, self.horizon_us, self.pause_ms,
                "" if self.now_us is None else self.now_us)

    def parse(self, reply: Any) -> Slot:
        return Slot(bool(int(reply[0])), int(reply[1]), int(reply[2]))


@dataclass(frozen=True, slots=True)
class Hold(ScriptCall[HoldState]):
    """Sending held for every reporter (at ``key``, ``KeySchema.hold``): ``what`` is
    ``hold`` (start it, or note the latest ``cause``), ``probe`` (take the turn to probe if
    it has come; the next turn is ``interval_ms`` later), ``kick`` (the next probe is due
    now), ``lift`` or ``read``.  A hold nobody touches for ``keep_ms`` is forgotten.
    ``now_ms`` replaces Redis TIME (tests)."""

    script: ClassVar[str] = "hold"
    receipt: ClassVar[bool] = True
    key: str
    what: str
    interval_ms: int = 0
    cause: str = ""
    check: str = ""
    game: str = ""
    keep_ms: int = 86_400_000
    now_ms: int | None = None
    call: str = field(default_factory=call_id)  # the receipt's id: a resend does nothing more

    def keys(self) -> Sequence[str]:
        # the receipt, and the hold's own quarantine and counters (its hash tag is not a
        # shard's), for a hold key of another type set aside
        return (self.key, receipt_key(self.key, self.call), sibling(self.key, "quarantine"),
                sibling(self.key, "stats"))

    def args(self) -> Sequence[Any]:
        return (self.what, self.interval_ms, self.cause[:200], self.check[:500],
                self.game, self.keep_ms, "" if self.now_ms is None else self.now_ms)

    def parse(self, reply: Any) -> HoldState:
        state = int(reply[0])
        return HoldState(state > 0, int(reply[1]), int(reply[2]), int(reply[3]),
                         int(reply[4]), text(reply[5]), text(reply[6]), text(reply[7]),
                         state == 2)


@dataclass(frozen=True, slots=True)
class NoteLate(ScriptCall[int]):
    """Count ``moved`` items delivered with their behaviour time moved into the window, and
    keep ``record`` (JSON: their original times) in the shard's audit list, at most
    ``keep`` records; the result is the records kept."""

    script: ClassVar[str] = "note_late"
    receipt: ClassVar[bool] = True
    shard: ShardKeys
    moved: int
    record: str
    keep: int
    call: str = field(default_factory=call_id)  # the receipt's id: a resend does nothing more

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.stats, s.late, s.quarantine, s.receipt(self.call))

    def args(self) -> Sequence[Any]:
        return (self.moved, self.record, self.keep)

    def parse(self, reply: Any) -> int:
        return int(reply)
