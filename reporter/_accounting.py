"""Every shard's state and counters from Redis, and whether they add up.

Every event stored by ``collect()`` is, at any moment, exactly one of: evicted by the cap,
stale, delivered, dead-lettered (``rejected - replayed``), buffered, or in a pending batch
(in flight or waiting for retry).  Whatever is missing was in a buffer that expired (TTL).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from collector.counters import COUNTERS
from collector.store import ShardView, Store


@dataclass
class Totals:
    shards: list[ShardView] = field(default_factory=list)

    def counter(self, name: str) -> int:
        return sum(s.counters.get(name, 0) for s in self.shards)

    @property
    def buffered(self) -> int:
        return sum(s.buffered for s in self.shards)

    @property
    def pending_events(self) -> int:
        return sum(s.pending_events for s in self.shards)

    @property
    def dead_events(self) -> int:
        return self.counter("rejected") - self.counter("replayed")

    @property
    def unaccounted(self) -> int:
        """Stored events in none of the states: only an expired buffer explains these."""
        c = self.counter
        return (c("stored") - c("evicted") - c("stale") - c("delivered") - self.dead_events
                - self.buffered - self.pending_events)

    def summary(self) -> dict[str, int]:
        out = {name: self.counter(name) for name in COUNTERS}
        out.update(buffered=self.buffered, pending_events=self.pending_events,
                   dead_events=self.dead_events, unaccounted=self.unaccounted,
                   batches_in_flight=sum(s.inflight for s in self.shards),
                   batches_retry=sum(s.retry for s in self.shards),
                   batches_dead_listed=sum(s.dead for s in self.shards))
        return out


def read_totals(store: Store) -> Totals:
    return Totals(store.read_shards())
