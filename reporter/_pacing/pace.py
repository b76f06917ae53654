"""Pacing and permission as the batch path asks them, in one place: the request rate
(``Permits``), the failures (``SinkGate``) and a refusal of our identity (``SendHold``)."""

from __future__ import annotations

import threading

from reporter._pacing.gate import SinkGate
from reporter._pacing.permits import Permits
from reporter._pacing.send_hold import SendHold
from reporter._senders.outcome import Outcome


class Pace:
    """May a batch be claimed, may its request go, and what an answer says about the next:
    a failure closes the gate for a backoff, the endpoint's own rate limit pauses every
    reporter, and a refusal of our identity holds every reporter (``hold``, if the sink can
    be held; the gate stays closed while it lasts)."""

    def __init__(self, permits: Permits, gate: SinkGate, hold: SendHold | None = None) -> None:
        self.permits = permits
        self.gate = gate
        self.hold = hold

    def is_open(self) -> bool:
        """Whether claims (and the requests of a claim) may go out now."""
        return self.gate.is_open()

    @property
    def limited(self) -> bool:
        return self.permits.limited

    @property
    def contended(self) -> bool:
        return self.permits.contended

    def at_send(self, game: str, stop: threading.Event) -> bool:
        """Right before a batch's first request: its slot, if the rate has slots, and the
        gate still open (a hold or a failure heard meanwhile keeps the request back)."""
        return self.permits.at_send(game, stop) and self.gate.is_open()

    def one(self, stop: threading.Event, game: str) -> bool:
        """One more request (a half after a 413, a part after a malformed event)."""
        return self.permits.one(stop, game)

    def heard(self, outcome: Outcome, game: str) -> None:
        """An answer of the endpoint (or a transport error)."""
        if outcome.hold is not None and self.hold is not None:
            self.hold.begin(outcome.hold, game)
            return
        self.gate.record(outcome)
        if outcome.pause_all:
            self.permits.pause(outcome.pause_all, game)
