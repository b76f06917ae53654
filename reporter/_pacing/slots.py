"""Request slots: a shared rate kept as a generic cell rate algorithm (GCRA) in Redis.

Used for the anti-addiction sink, whose interface throttles the app id for a minute when any
second holds more than its limit.  A token bucket granted at claim time lost the rate twice
over: a slot nobody took at its moment was gone (the takers polled), and the time between
the grant and the POST let requests bunch up at the interface.  Here every request takes
its slot when it is about to be sent: a first attempt, a part after a refusal, a re-send
after 1007, a probe of a held sender.  ``reserve_slot.lua`` keeps, per scope, the time of
the next free slot; the caller reserves it and sleeps until it (``stop`` wakes it), so
slots are ``1 / rate`` apart whichever process takes them, and while anyone waits none is
lost.

Before a claim the workers only look (``acquire``): a batch is leased when its slot is
near, never held through a 1006 pause.  The scope is the app id (``[nppa] rate_limit_scope
= "app"``) or each game's bizId (``"game"``), in one hash keyed by the app id.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from collector.store import ReserveSlot, Slot, Store
from reporter._pacing.limiter import Grant

# A slot further ahead than this is not reserved (a pause: the batch goes back); a queue of
# every sweep thread of a few reporters is well within it.
SLOT_HORIZON_SECONDS = 5.0
# A full batch is claimed when the next free slot is this near; a batch that is not full
# only when no slot is reserved ahead of it.
CLAIM_NEAR_SECONDS = 2.0


class SharedSlots:
    """Slots ``1 / rate`` apart, shared through Redis by every reporter process; per scope
    (one for every game, or with ``biz_id`` one per game's bizId)."""

    limited = True
    at_send = True

    def __init__(
        self, store: Store, name: str, rate: float, biz_id: Callable[[str], str] | None = None
    ) -> None:
        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"a request rate must be > 0: {rate}")
        self.rate = rate
        self._store = store
        self._key = store.schema.limiter(name)
        self._interval_us = math.ceil(1_000_000 / rate)  # rounded up: never faster
        self._biz_id = biz_id  # None: one scope for every game

    def acquire(self, requests: int, spare: bool = False, game: str = "") -> Grant:
        """Whether to claim now (nothing is reserved): a full batch when the next free slot
        is near, a spare one only when nobody waits ahead of it."""
        slot = self._call(game, horizon_us=-1)
        wait = slot.wait_us / 1_000_000
        scarce = slot.ahead > 0
        near = not scarce if spare else wait <= CLAIM_NEAR_SECONDS
        return Grant(requests if near else 0, wait, scarce)

    def reserve(self, game: str = "") -> Slot:
        """Reserve the scope's next free slot, if it is within the horizon."""
        return self._call(game, horizon_us=round(SLOT_HORIZON_SECONDS * 1_000_000))

    def wait_for_slot(self, game: str, stop: threading.Event) -> bool:
        """Reserve a slot and sleep until it; False when there is none within the horizon
        (a pause) or the process is stopping."""
        slot = self.reserve(game)
        if not slot.reserved:
            return False
        return not stop.wait(slot.wait_us / 1_000_000) if slot.wait_us > 0 else (not stop.is_set())

    def refund(self, requests: int) -> None:
        """Nothing to give back: nothing is taken before a request is sent."""

    def pause(self, seconds: float, game: str = "") -> None:
        self._call(game, pause_ms=math.ceil(seconds * 1000), horizon_us=-1)

    def _call(self, game: str, horizon_us: int, pause_ms: int = 0) -> Slot:
        return self._store.call(
            ReserveSlot(
                self._key,
                self._interval_us,
                self._biz_id(game) if self._biz_id else "",
                horizon_us,
                pause_ms,
            )
        )

    def describe(self) -> str:
        scope = "per game (bizId)" if self._biz_id else "per app id"
        return f"{self.rate:g} requests/s {scope}, slots shared through Redis"
