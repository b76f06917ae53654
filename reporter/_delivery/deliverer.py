"""One lease's life, top to bottom: for each batch, the stale events set aside, one attempt at
the rest, and its outcome settled; then the delivered batches acknowledged together.

    lease = claimer.claim(keys, game, stop)        # claims.py: permits, the claim script
    deliverer.deliver(lease, stop)
      for each batch:  split_fresh                 # freshness.py: too old to send?
                       attempt.send                # attempt.py: the request(s), an Outcome
                       settler.settle              # settling.py: one store call, counts, log
      settler.finish                               # the delivered ones acked in one round trip

Every batch of a lease is in flight from the start (``Settler.track``), so the lease keeper
renews the leases of those still waiting behind a slow POST.  Once the process is stopping or the
endpoint has started failing, the ones not yet sent are released without charging an
attempt.

For a sink in order (``Sink.in_order``) a batch not settled in full (retried whole or in
part, handed back, its lease lost) ends the lease: the rest are released, and the retry set
gives its game's batches back in their order (``lua/_order.lua``), this one first.  Before
each request the lease is renewed, and a batch whose lease was lost meanwhile (a process
stalled past it, and the reaper gave it to another) is not sent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from reporter._delivery.attempt import Attempt
from reporter._delivery.freshness import Freshness, split_fresh
from reporter._delivery.lease import SETTLED, Lease, Leased, Result
from reporter._delivery.settling import Settler
from reporter._pacing.pace import Pace

Clock = Callable[[], float]  # wall-clock seconds, injectable for tests


class Deliverer:
    """Delivers leases: ``attempt`` sends a batch, ``settler`` finishes it, ``pace`` says
    whether a request may go and hears every answer, ``freshness`` (on ``clock``) says which
    events are still worth sending.  ``in_order``: each game's batches go first in, first out."""

    def __init__(
        self,
        attempt: Attempt,
        settler: Settler,
        pace: Pace,
        freshness: Freshness,
        clock: Clock,
        in_order: bool = False,
    ) -> None:
        self._attempt = attempt
        self._settler = settler
        self._pace = pace
        self._freshness = freshness
        self._clock = clock
        self._in_order = in_order

    def deliver(self, lease: Lease, stop: threading.Event) -> list[Result]:
        """Send the lease's batches one after another; what became of each batch sent."""
        batch_ids = [batch.batch_id for batch in lease.batches]
        self._settler.track(lease.keys, batch_ids, lease.token)
        results: list[Result] = []
        try:
            for i, batch in enumerate(lease.batches):
                result = None
                if not stop.is_set() and self._pace.is_open():
                    result = self._deliver_one(lease, batch, stop)
                if result is None:  # stopping, failing, or no request slot within reach
                    self._settler.release_unsent(lease.keys, lease.token, batch_ids[i:])
                    break
                results.append(result)
                if self._in_order and result not in SETTLED:
                    # Its game's later batches wait behind it; the retry set gives them
                    # back in order once it is due.
                    self._settler.release_unsent(lease.keys, lease.token, batch_ids[i + 1 :])
                    break
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
        pace, game = self._pace, batch.game
        if pace.blocked(game):  # its app, key or game is held: back until it is lifted
            return self._settler.hold_back(lease.keys, lease.token, batch)
        # The slot may be a while away: a hold or a failure heard meanwhile (by any thread)
        # keeps the request back, handed back uncharged, as if no slot had been found.
        if not pace.at_send(game, stop):
            return None
        if self._in_order and not self._settler.renew(lease.keys, batch.batch_id, lease.token):
            return Result.LOST  # another process may send it now: never this one too
        sent = self._attempt.send(
            game, batch.batch_id, fresh.events, batch.attempts + 1, lambda: pace.one(stop, game)
        )
        if sent.outcome.unsent:  # its slot was gone at the last moment (a pause): handed back
            return None
        outcome = sent.outcome
        for answer in sent.answers:
            heard = pace.heard(answer.outcome, game, batch.batch_id)
            if answer.outcome is sent.outcome:
                outcome = heard  # the batch's own refusal, met again after a probe passed
        return self._settler.settle(lease.keys, lease.token, batch, fresh, outcome)


def send(deliverer: Deliverer, lease: Lease | None, stop: threading.Event) -> bool:
    """Deliver ``lease`` if there is one (None: no request could go out); whether more work
    waits right behind it."""
    if lease is None:
        return False
    deliverer.deliver(lease, stop)
    return lease.more
