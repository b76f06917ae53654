"""Pacing and permission as the batch path asks them, in one place: the request rate
(``Permits``), the failures (``SinkGate``) and a refusal of our identity (``Holds``)."""

from __future__ import annotations

import dataclasses
import threading

from reporter._pacing.gate import SinkGate
from reporter._pacing.permits import Permits
from reporter._pacing.send_hold import Holds
from reporter._senders.outcome import REJECTED, Outcome


class Pace:
    """May a batch be claimed, may its request go, and what an answer says about the next:
    a failure closes the gate for a backoff, the endpoint's own rate limit pauses every
    reporter, and a refusal of our identity holds its scope in every reporter (``holds``, if
    the sink can be held: a held game is not claimed; the gate stays closed while nothing
    at all may be sent)."""

    def __init__(self, permits: Permits, gate: SinkGate, holds: Holds | None = None) -> None:
        self.permits = permits
        self.gate = gate
        self.holds = holds

    def is_open(self) -> bool:
        """Whether claims (and the requests of a claim) may go out now."""
        return self.gate.is_open()

    @property
    def limited(self) -> bool:
        return self.permits.limited

    @property
    def contended(self) -> bool:
        return self.permits.contended

    def blocked(self, game: str) -> bool:
        """Whether ``game`` is held (in its app, its key, itself): not claimed, not sent."""
        return self.holds is not None and self.holds.blocked(game) is not None

    def at_send(self, game: str, stop: threading.Event) -> bool:
        """Right before a batch's first request: its slot, if the rate has slots, and the
        gate still open and the game not held (a hold or a failure heard meanwhile keeps the
        request back)."""
        return self.permits.at_send(game, stop) and self.gate.is_open() and not self.blocked(game)

    def one(self, stop: threading.Event, game: str) -> bool:
        """One more request (a half after a 413, a part after a malformed event)."""
        return self.permits.one(stop, game)

    def heard(self, outcome: Outcome, game: str, batch: str = "") -> Outcome:
        """An answer of the endpoint (or a transport error) to a request of ``batch``; the
        outcome to settle it with: a refusal the batch drew again right after a probe of
        its scope passed is the batch's own (rejected: dead-lettered), not the config's."""
        if outcome.hold is not None and self.holds is not None:
            state = self.holds.begin(game, outcome.hold, batch)
            if not state.poison:
                return outcome
            return dataclasses.replace(
                outcome,
                kind=REJECTED,
                reason=(
                    f"{outcome.reason}: met again right after a probe of its scope passed, "
                    "so this batch draws it itself (not the configuration)"
                ),
                hold=None,
            )
        self.gate.record(outcome)
        if outcome.pause_all:
            self.permits.pause(outcome.pause_all, game)
        return outcome
