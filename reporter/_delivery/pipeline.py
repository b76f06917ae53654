"""A game's way from claim to settle, as a worker drives it: ``Pipeline``."""

from __future__ import annotations

import threading
from collections.abc import Callable

from collector.store import ShardKeys
from reporter._delivery.claims import Claimer
from reporter._delivery.deliverer import Deliverer, send
from reporter._pacing.pace import Pace

Clock = Callable[[], float]  # wall-clock seconds, injectable for tests


class Pipeline:
    """Claims a game's batches as ``pace`` allows and delivers them, until ``stop``; the
    workers of every pool share one.  ``clock``: the wall clock the workers read too."""

    def __init__(
        self,
        claimer: Claimer,
        deliverer: Deliverer,
        pace: Pace,
        stop: threading.Event,
        clock: Clock,
    ) -> None:
        self.claimer = claimer
        self.deliverer = deliverer
        self.pace = pace
        self.stop = stop
        self.clock = clock

    def drain(self, keys: ShardKeys, game: str, wait: bool = True) -> bool:
        """One claim of ``game``'s batches, delivered; whether more work waits behind it.
        ``wait``: a request that is near is waited for (a full batch)."""
        if self.pace.blocked(game):  # held: its events wait in Redis, unclaimed
            return False
        lease = self.claimer.claim(keys, game, self.stop, wait)
        return send(self.deliverer, lease, self.stop)

    def retries(self, keys: ShardKeys, game: str = "") -> bool:
        """The shard's due retries (of ``game`` only, if given), delivered."""
        return send(self.deliverer, self.claimer.take_retries(keys, self.stop, game), self.stop)

    def running(self) -> bool:
        """Neither stopping nor paced out (the gate is open)."""
        return not self.stop.is_set() and self.pace.is_open()
