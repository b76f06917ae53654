"""The delivery core wired by hand, as ``ReporterService`` wires it, for tests that drive
claims and deliveries one call at a time (no workers, no threads)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from collector.metrics import Tally
from collector.store import ShardKeys
from reporter._config import ReporterConfig
from reporter._delivery.attempt import Attempt
from reporter._delivery.batches import Batches
from reporter._delivery.claims import Claimer
from reporter._delivery.deliverer import Deliverer, send
from reporter._delivery.in_flight import InFlight
from reporter._delivery.lease import Lease, Leased, Result
from reporter._delivery.settling import Settler
from reporter._pacing.body_limit import JSON_BODY, BodyLimit
from reporter._pacing.gate import SinkGate
from reporter._pacing.limiter import ClaimLimiter, Unlimited
from reporter._pacing.permits import Permits
from reporter._pacing.slots import SharedSlots
from reporter._sinks.registry import Sender


@dataclass
class Delivery:
    claimer: Claimer
    deliverer: Deliverer
    gate: SinkGate
    counts: Tally

    def drain(self, keys: ShardKeys, game: str, stop: threading.Event, wait: bool = True) -> bool:
        """What a worker does for one ready game: claim, then deliver the lease."""
        return send(self.deliverer, self.claimer.claim(keys, game, stop, wait), stop)

    def send_retries(self, keys: ShardKeys, stop: threading.Event, game: str = "") -> bool:
        return send(self.deliverer, self.claimer.take_retries(keys, stop, game), stop)

    def deliver_all(
        self,
        keys: ShardKeys,
        token: str,
        batches: Sequence[tuple[str, str, list[bytes], int]],
        stop: threading.Event,
    ) -> list[Result]:
        return self.deliverer.deliver(Lease(keys, token, [Leased(*b) for b in batches]), stop)


def delivery_for(
    batches: Batches,
    sender: Sender,
    config: ReporterConfig,
    clock: Callable[[], float],
    limiter: ClaimLimiter | None = None,
    sending_held: Callable[[], bool] = lambda: False,
) -> Delivery:
    counts, in_flight, gate = Tally(), InFlight(), SinkGate(0.01, 0.01, held=sending_held)
    permits = Permits(limiter or Unlimited(), limiter if isinstance(limiter, SharedSlots) else None)
    body_limit = BodyLimit(0, JSON_BODY)
    r = config.reporter
    claimer = Claimer(batches, permits, body_limit, counts, r.batch_size, r.max_batches_per_claim)
    deliverer = Deliverer(
        Attempt(sender, body_limit),
        Settler(batches, in_flight, counts),
        permits,
        gate,
        in_flight,
        batches.freshness,
        counts,
        clock,
    )
    return Delivery(claimer, deliverer, gate, counts)
