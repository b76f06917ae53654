"""One lease's life, top to bottom: for each batch, the stale events set aside, one attempt at
the rest, and its outcome settled; then the delivered batches acknowledged together.

    lease = claimer.claim(keys, game, stop)        # claims.py: permits, the claim script
    deliverer.deliver(lease, stop)
      for each batch:  split_fresh                 # freshness.py: too old to send?
                       attempt.send                # attempt.py: the request(s), an Outcome
                       settler.settle              # settling.py: one store call, counts, log
      settler.finish                               # the delivered ones acked in one round trip

Every batch of a lease is held from the start (``InFlight``), so the lease keeper renews the
leases of those still waiting behind a slow POST.  Once the process is stopping or the
endpoint has started failing, the ones not yet sent are released without charging an
attempt.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from collector.counters import Histogram
from collector.metrics import Metrics
from reporter._delivery.attempt import Answer, Attempt
from reporter._delivery.freshness import Freshness, split_fresh
from reporter._delivery.in_flight import InFlight
from reporter._delivery.lease import Lease, Leased, Result
from reporter._delivery.settling import Settler
from reporter._pacing.gate import SinkGate
from reporter._pacing.permits import Permits
from reporter._pacing.send_hold import SendHold
from reporter._senders.outcome import SendErrors

Clock = Callable[[], float]  # wall-clock seconds, injectable for tests


class Deliverer:
    def __init__(
        self,
        attempt: Attempt,
        settler: Settler,
        permits: Permits,
        gate: SinkGate,
        in_flight: InFlight,
        freshness: Freshness,
        counts: Metrics,
        clock: Clock,
        errors: SendErrors | None = None,
        hold: SendHold | None = None,
    ) -> None:
        self._hold = hold
        self._attempt = attempt
        self._settler = settler
        self._permits = permits
        self._gate = gate
        self._in_flight = in_flight
        self._freshness = freshness
        self._counts = counts
        self._clock = clock
        self._errors = errors or SendErrors()

    def deliver(self, lease: Lease, stop: threading.Event) -> list[Result]:
        """Send the lease's batches one after another; what became of each batch sent."""
        batch_ids = [batch.batch_id for batch in lease.batches]
        for batch_id in batch_ids:
            self._in_flight.add(lease.keys, batch_id, lease.token)
        results: list[Result] = []
        try:
            for i, batch in enumerate(lease.batches):
                result = None
                if not stop.is_set() and self._gate.is_open():
                    result = self._deliver_one(lease, batch, stop)
                if result is None:  # stopping, failing, or no request slot within reach
                    self._settler.release_unsent(lease.keys, lease.token, batch_ids[i:])
                    break
                results.append(result)
        finally:
            self._settler.finish(batch_ids)
        return results

    def _deliver_one(self, lease: Lease, batch: Leased, stop: threading.Event) -> Result | None:
        """What became of the batch; None if it was not sent (no slot for its request, or the
        gate closed while it waited for one)."""
        fresh = split_fresh(batch.entries, int(self._clock() * 1000), self._freshness)
        if fresh.stale and self._freshness.note_stale is not None:
            self._settler.note_stale(lease.keys, batch, fresh, self._freshness.note_stale)
        if not fresh.events:
            return self._settler.all_stale(lease.keys, lease.token, batch.batch_id, fresh.stale)
        # The slot may be a while away: a hold or a failure heard meanwhile (by any thread)
        # keeps the request back, handed back uncharged, as if no slot had been found.
        if not self._permits.at_send(batch.game, stop) or not self._gate.is_open():
            return None
        sent = self._attempt.send(
            batch.game,
            batch.batch_id,
            fresh.events,
            batch.attempts + 1,
            lambda: self._permits.one(stop, batch.game),
        )
        self._heard(sent.answers, batch.game)
        return self._settler.settle(lease.keys, lease.token, batch, fresh, sent.outcome)

    def _heard(self, answers: Sequence[Answer], game: str) -> None:
        """Every answer of the endpoint: the histograms, the failures by code, the gate (is
        it failing?), its own rate limit, which pauses every reporter, and a refusal of our
        identity, which holds every reporter (the gate stays closed while it lasts, not for
        a backoff)."""
        for answer in answers:
            self._counts.observe(Histogram.POST_DURATION_SECONDS, answer.seconds)
            self._counts.observe(Histogram.BATCH_SIZE_EVENTS, answer.events)
            self._errors.record(answer.outcome)
            if answer.outcome.hold and self._hold is not None:
                self._hold.begin(answer.outcome.hold, game)
                continue
            self._gate.record(answer.outcome)
            if answer.outcome.pause_all:
                self._permits.pause(answer.outcome.pause_all, game)


def send(deliverer: Deliverer, lease: Lease | None, stop: threading.Event) -> bool:
    """Deliver ``lease`` if there is one (None: no request could go out); whether more work
    waits right behind it."""
    if lease is None:
        return False
    deliverer.deliver(lease, stop)
    return lease.more
