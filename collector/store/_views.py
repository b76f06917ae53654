"""The views the store's reads return: a shard's ring, games and state, levels, memory, records."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RingSlice:
    """Part of a shard's ring of active games (the next names after a cursor), the ring's
    length, and how many batches wait for a retry (so an idle shard costs one round trip);
    and, in the same round trip, the shard's identity marker (None if absent), its
    outstanding events by its counters (stored and not yet evicted, stale, delivered or dead:
    what a reset would lose) and whether a ring of an older version (a list) is still there."""

    games: list[str]
    ring_length: int
    retries: int
    marker: str | None = None
    outstanding: int = 0
    legacy_ring: bool = False
    # What the scripts must set aside (collector.store.SetAside): ring members that are not
    # game names, and whether a key read here was of another type than the shard needs.
    junk: list[bytes] = field(default_factory=list)
    wrong_type: bool = False
    quarantined: int = 0  # records the shard's scripts have set aside so far (its counter)
    # The states of the games the caller named as known (read in the same round trip).
    states: list[GameState] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class GameState:
    game: str
    length: int
    oldest_ms: int | None


@dataclass(frozen=True, slots=True)
class GameView:
    game: str
    shard: int
    buffered: int
    oldest_ms: int | None


@dataclass(frozen=True, slots=True)
class ShardView:
    shard: int
    owner: str
    buffered: int
    games: list[GameView]
    inflight: int
    retry: int
    dead: int
    pending_events: int
    counters: dict[str, int]
    # Records the shard holds that the scripts will set aside when they meet them: keys of
    # another type, batch metadata that does not decode ("<key> is a <type>", ...).
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ShardLevels:
    """A shard's levels now, read cheaply for the metrics: no batch metadata, no payloads."""

    shard: int
    games: list[GameState]
    inflight: int
    retry: int
    retry_due: int
    dead: int

    @property
    def buffered(self) -> int:
        return sum(g.length for g in self.games)

    @property
    def oldest_ms(self) -> int | None:
        """Collect time of the oldest buffered event, or None if nothing is buffered."""
        times = [g.oldest_ms for g in self.games if g.oldest_ms is not None and g.length]
        return min(times) if times else None


# Within this share of maxmemory a node counts as full: Redis checks the limit before a write
# runs, with the write's own arguments already read, so writes are refused before the last
# bytes are taken (an SDK write carries up to 512 KiB).
FULL_RATIO = 0.98


@dataclass(frozen=True, slots=True)
class MemoryUse:
    """One Redis node's memory against its ``maxmemory`` (INFO memory), and the writes it has
    refused for lack of memory since it started (INFO errorstats, ``errorstat_OOM``)."""

    node: str  # host:port
    used: int  # bytes Redis counts against maxmemory
    maximum: int  # maxmemory in bytes; 0 = no limit
    policy: str  # maxmemory-policy
    oom_refusals: int

    @property
    def full(self) -> bool:
        return self.maximum > 0 and self.used >= self.maximum * FULL_RATIO

    @property
    def refusing_writes(self) -> bool:
        """Full with ``noeviction``: Redis answers OOM to writes that need memory (any other
        policy evicts keys instead, which can delete buffered events and batches)."""
        return self.full and self.policy == "noeviction"


@dataclass(frozen=True, slots=True)
class DeadBatch:
    batch_id: str
    shard: int
    game: str
    events: int
    attempts: int
    reason: str
    dead_at: float  # seconds since the epoch


@dataclass(frozen=True, slots=True)
class Alert:
    """Something an endpoint refused that only the operator can fix."""

    name: str
    message: str
    at: float  # seconds since the epoch, the latest time
    count: int


@dataclass(frozen=True, slots=True)
class Reporter:
    """A reporter process in the registry, and when its heartbeat runs out (ms, its clock)."""

    owner: str
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class QuarantineRecord:
    """A record the scripts moved to a shard's quarantine (``lua/_guard.lua``)."""

    shard: int
    key: str
    field: str  # the batch id, hash field or ring member; '' for a whole key
    found: str  # the type found where another belongs; '' for a record of the right type
    reason: str
    sample: str  # the record's first bytes
    events: int  # events in it
    script: str
    at: float  # seconds since the epoch


@dataclass(frozen=True, slots=True)
class BatchDetail:
    batch_id: str
    shard: int
    game: str
    attempts: int
    reason: str
    entries: list[bytes]
    item_reasons: list[str]  # one per entry for refused items set aside together, else empty
