"""The batches this process holds a lease on, and the delivered ones waiting for their ack."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from collector.store import ShardKeys


@dataclass(frozen=True, slots=True)
class Delivered:
    """A batch the endpoint accepted, waiting to be acknowledged in Redis."""

    game: str
    stale: int


# A held batch taken out for its ack: (batch id, shard, lease token, what was delivered).
ToAck = tuple[str, ShardKeys, str, Delivered]


@dataclass
class InFlight:
    """Batches this process holds a lease on, so they can be extended, released or, once
    delivered, acknowledged.  Whoever takes a batch out (its worker or ``stop()``) finishes
    it, so it is never both released and acknowledged."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    batches: dict[str, tuple[ShardKeys, str]] = field(default_factory=dict)
    delivered: dict[str, Delivered] = field(default_factory=dict)
    # Taken out by their worker for the ack, until it is done: what a stop that cannot wait
    # for a hung Redis leaves to lease expiry.
    acking: set[str] = field(default_factory=set)

    def add(self, keys: ShardKeys, batch_id: str, token: str) -> None:
        with self.lock:
            self.batches[batch_id] = (keys, token)

    def drop(self, batch_id: str) -> None:
        with self.lock:
            self.batches.pop(batch_id, None)
            self.delivered.pop(batch_id, None)
            self.acking.discard(batch_id)

    def mark_delivered(self, batch_id: str, delivered: Delivered) -> bool:
        """Note a delivered batch for a later ack; False if it is no longer held."""
        with self.lock:
            if batch_id not in self.batches:
                return False
            self.delivered[batch_id] = delivered
            return True

    def take_delivered(self, batch_ids: Sequence[str]) -> list[ToAck]:
        with self.lock:
            out = []
            for batch_id in batch_ids:
                delivered = self.delivered.pop(batch_id, None)
                if delivered is not None:
                    keys, token = self.batches.pop(batch_id)
                    self.acking.add(batch_id)
                    out.append((batch_id, keys, token, delivered))
            return out

    def being_acked(self) -> list[str]:
        with self.lock:
            return sorted(self.acking)

    def take_all(self) -> tuple[list[tuple[str, ShardKeys, str]], list[ToAck]]:
        """Everything held: (to release, to acknowledge)."""
        with self.lock:
            batches, self.batches = self.batches, {}
            delivered, self.delivered = self.delivered, {}
        to_ack = [
            (b, keys, token, delivered[b]) for b, (keys, token) in batches.items() if b in delivered
        ]
        to_release = [
            (b, keys, token) for b, (keys, token) in batches.items() if b not in delivered
        ]
        return to_release, to_ack

    def snapshot(self) -> list[tuple[str, ShardKeys, str]]:
        with self.lock:
            return [(b, k, t) for b, (k, t) in self.batches.items()]

    def __len__(self) -> int:
        return len(self.batches)
