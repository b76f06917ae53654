"""Every shard's state and counters from Redis, and whether they add up.

Every event stored by ``collect()`` is, at any moment, exactly one of: evicted by the cap,
merged into an earlier event with the same dedup key, stale, delivered, dead-lettered
(``dead_events - replayed``), set aside with a batch the scripts could not use
(``quarantined_events``), buffered, or in a pending batch (in flight or waiting for retry).
Whatever is missing was in a buffer that expired (TTL).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from collector.counters import STORE, Counter, Gauge
from collector.store import ShardView, Store


@dataclass
class Totals:
    shards: list[ShardView] = field(default_factory=list)

    def counter(self, name: Counter | str) -> int:
        return sum(s.counters.get(name, 0) for s in self.shards)

    @property
    def buffered(self) -> int:
        return sum(s.buffered for s in self.shards)

    @property
    def pending_events(self) -> int:
        return sum(s.pending_events for s in self.shards)

    @property
    def dead_now(self) -> int:
        """Events that ended in a dead letter and were not replayed (purged ones included)."""
        return self.counter(Counter.DEAD_EVENTS) - self.counter(Counter.REPLAYED)

    @property
    def unaccounted(self) -> int:
        """Stored events in none of the states: only an expired buffer explains these."""
        c = self.counter
        return (
            c(Counter.STORED)
            - c(Counter.EVICTED)
            - c(Counter.MERGED)
            - c(Counter.STALE)
            - c(Counter.DELIVERED)
            - self.dead_now
            - c(Counter.QUARANTINED_EVENTS)
            - self.buffered
            - self.pending_events
        )

    def summary(self) -> dict[str, int]:
        """The store's counters and the levels ``status`` shows, by vocabulary name."""
        out = {str(name): self.counter(name) for name in STORE}
        levels = {
            Gauge.BUFFERED: self.buffered,
            Gauge.PENDING_EVENTS: self.pending_events,
            Gauge.BATCHES_IN_FLIGHT: sum(s.inflight for s in self.shards),
            Gauge.BATCHES_RETRY: sum(s.retry for s in self.shards),
            Gauge.BATCHES_DEAD_LISTED: sum(s.dead for s in self.shards),
            Gauge.UNACCOUNTED: self.unaccounted,
        }
        out.update({str(name): value for name, value in levels.items()})
        return out


def read_totals(store: Store) -> Totals:
    return Totals(store.read_shards())
