"""Levels the metrics endpoint serves that are not counts: readings of Redis, cached, and the
claim limiter's last refusal.

A reading of Redis costs one HGETALL per shard (the cluster's counters), one ZCOUNT (live
reporters), five cheap commands per shard this process holds and two per game buffered in
them, and one INFO (memory, errorstats) per node; it is reused for ``[metrics]
cache_seconds``, however many scrapes come.  A failed read is reused as long, so a Redis
outage is not probed once per scrape either.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from collector.store import (
    BackendError,
    BackendRefused,
    BackendUnavailable,
    MemoryUse,
    ShardLevels,
    Store,
)
from reporter._pacing.limiter import ClaimLimiter, Grant

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Reading:
    """What one read of Redis found; ``error`` says why it failed (then nothing else is)."""

    at: float  # monotonic seconds
    now_ms: int  # wall-clock milliseconds when it was made
    counters: dict[str, int] = field(default_factory=dict)  # every shard's stats, added up
    live_reporters: int = 0
    shards: list[ShardLevels] = field(default_factory=list)  # the shards this process held
    memory: list[MemoryUse] = field(default_factory=list)  # each node's (none if INFO refused)
    # Whether a node refuses writes for lack of memory: full with noeviction, or it refused
    # some (its OOM error count grew) since the previous reading.
    refusing_writes: bool = False
    error: str = ""


class RedisReadings:
    """Reads Redis for the metrics at most once per ``max_age`` seconds; concurrent scrapes
    wait for the one read under way instead of making their own."""

    def __init__(
        self,
        store: Store,
        owned: Callable[[], frozenset[int]],
        max_age: float,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
    ) -> None:
        self._store = store
        self._owned = owned
        self._max_age = max_age
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._last: Reading | None = None
        self._oom_refusals: dict[str, int] = {}  # node -> its OOM error count, last reading

    def get(self) -> Reading:
        with self._lock:
            last = self._last
            if last is None or self._clock() - last.at >= self._max_age:
                last = self._last = self._read()
            return last

    def _read(self) -> Reading:
        at, now_ms = self._clock(), int(self._wall() * 1000)
        schema = self._store.schema
        try:
            counters = self._store.counter_totals()
            live = self._store.live_reporters()
            shards = self._store.shard_levels(
                [schema.shard(n) for n in sorted(self._owned())], now_ms
            )
            memory = self._memory()
        except BackendError as exc:
            return Reading(at, now_ms, error=f"{type(exc).__name__}: {exc}")
        grew = any(m.oom_refusals > self._oom_refusals.get(m.node, m.oom_refusals) for m in memory)
        self._oom_refusals = {m.node: m.oom_refusals for m in memory}
        refusing = grew or any(m.refusing_writes for m in memory)
        return Reading(at, now_ms, counters, live, shards, memory, refusing)

    def _memory(self) -> list[MemoryUse]:
        try:
            return self._store.memory()
        except BackendUnavailable:
            raise
        except BackendRefused:  # INFO renamed or forbidden: the other series still serve
            return []


class WatchedLimiter:
    """A claim limiter that remembers how long the last refused claim was told to wait."""

    def __init__(self, inner: ClaimLimiter) -> None:
        self.inner = inner
        self.limited = inner.limited
        self.last_wait = 0.0  # seconds; 0 until a claim is refused

    def acquire(self, requests: int, spare: bool = False, game: str = "") -> Grant:
        grant = self.inner.acquire(requests, spare, game)
        if not grant.granted:
            self.last_wait = grant.wait
        return grant

    def refund(self, requests: int) -> None:
        self.inner.refund(requests)

    def pause(self, seconds: float, game: str = "") -> None:
        self.inner.pause(seconds, game)

    def describe(self) -> str:
        return self.inner.describe()
