"""The delivery core as ``ReporterService`` has it (``reporter._service.graph.build_core``),
for tests that drive claims and deliveries one call at a time (no workers, no threads)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from collector.metrics import Tally
from collector.store import ShardKeys
from reporter._config import ReporterConfig
from reporter._delivery.batches import Batches
from reporter._delivery.claims import Claimer
from reporter._delivery.deliverer import Deliverer, send
from reporter._delivery.lease import Lease, Leased, Result
from reporter._pacing.gate import SinkGate
from reporter._pacing.limiter import ClaimLimiter, Unlimited
from reporter._senders.outcome import Outcome
from reporter._service.graph import Given, build_core
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
    """The core ``ReporterService`` runs, built by the same builder, over ``batches``'s store,
    with the test's sender, clock and limiter, and a gate that reopens within 10 ms."""
    given = Given(
        store=batches.store,
        sender=sender,
        clock=clock,
        limiter=limiter or Unlimited(),
        held=sending_held,
        gate_seconds=(0.01, 0.01),
    )
    core = build_core(config, given)
    return Delivery(core.claimer, core.deliverer, core.gate, core.tally)


class Sent:
    """A sender that takes every batch and notes its id, in the order sent."""

    def __init__(self) -> None:
        self.batches: list[str] = []

    def send(self, game: str, batch_id: str, events: object, attempt: int = 1) -> Outcome:
        self.batches.append(batch_id)
        return Outcome("delivered")

    def describe(self) -> str:
        return "recorder"

    def close(self) -> None:
        pass
