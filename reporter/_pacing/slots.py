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

The throttle is honoured everywhere.  A pause (a 1006 heard by any reporter) reaches every
reporter through that hash, and a slot reserved before it began is given up when its time
comes (``paused``, asked right before the request).  Each process keeps what the answers
said of the pause, so that it waits it out even if Redis forgets it.  A lost state (Redis
restarted empty, a failover to a replica without the hash) would hand out slots next to
those reserved before it: the script finds it lost (the hash is gone, or was first written
at another time than this process saw) and pauses every scope for the slot horizon, and a
process that knows of a longer pause puts it back.  Every reporter looks at the state once a
second (``watch``), sending or not, so each knows it and finds it lost within a second.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from collector.logs import RateLimitedLog
from collector.store import ReserveSlot, Slot, Store
from reporter._pacing.limiter import Grant

logger = logging.getLogger("reporter")
ratelog = RateLimitedLog(logger, interval=60.0)

# A slot further ahead than this is not reserved (a pause: the batch goes back); a queue of
# every sweep thread of a few reporters is well within it.
SLOT_HORIZON_SECONDS = 5.0
# A full batch is claimed when the next free slot is this near; a batch that is not full
# only when no slot is reserved ahead of it.
CLAIM_NEAR_SECONDS = 2.0
# The state in Redis is kept an hour after its last use (reserve_slot.lua): what this process
# saw of it is worth comparing (to find it lost) this long after.
KNOWN_SECONDS = 50 * 60.0


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
        # A lost state pauses every scope until each slot reserved before it has passed.
        self._lost_pause_us = round(SLOT_HORIZON_SECONDS * 1_000_000) + self._interval_us
        self._lock = threading.Lock()
        self._born = ""  # when the state this process saw was first written ('' none yet)
        self._seen_at = -math.inf  # when this process last used it (monotonic)
        self._paused_until = -math.inf  # the end of the pause last heard of (monotonic)

    def acquire(self, requests: int, spare: bool = False, game: str = "") -> Grant:
        """Whether to claim now (nothing is reserved): a full batch when the next free slot
        is near, a spare one only when nobody waits ahead of it."""
        slot = self._call(game, horizon_us=-1)  # a look also finds a lost state
        pause = self._pause_left()
        if pause > 0:
            return Grant(0, pause)
        wait = slot.wait_us / 1_000_000
        scarce = slot.ahead > 0
        near = not scarce if spare else wait <= CLAIM_NEAR_SECONDS
        return Grant(requests if near else 0, wait, scarce)

    def reserve(self, game: str = "") -> Slot:
        """Reserve the scope's next free slot, if it is within the horizon (never during a
        pause this process heard of, whatever Redis says)."""
        pause_us = round(self._pause_left() * 1_000_000)
        if pause_us > 0:
            return Slot(False, pause_us, 0, pause_us, self._born)
        return self._call(game, horizon_us=round(SLOT_HORIZON_SECONDS * 1_000_000))

    def watch(self) -> bool:
        """Look at the state (a job, every second, in every reporter, sending or not): what
        it was first written at, so that every reporter finds it lost, and puts back the
        pause it knows of, however idle it is.  Nothing more to do (False)."""
        self._call("", horizon_us=-1)
        return False

    def paused(self, game: str = "") -> bool:
        """Whether a pause runs now (asked right before a request goes, at its slot: a slot
        reserved before a pause began is given up)."""
        return self._pause_left() > 0 or self._call(game, horizon_us=-1).paused_us > 0

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
        """Every scope of every reporter pauses ``seconds`` (this process at once, even if
        Redis cannot be told)."""
        self._heard_pause(seconds)
        self._call(game, pause_ms=math.ceil(seconds * 1000), horizon_us=-1)

    def _pause_left(self) -> float:
        """Seconds the pause last heard of still runs (0: none)."""
        return max(0.0, self._paused_until - time.monotonic())

    def _heard_pause(self, seconds: float) -> None:
        with self._lock:
            self._paused_until = max(self._paused_until, time.monotonic() + seconds)

    def _call(self, game: str, horizon_us: int, pause_ms: int = 0) -> Slot:
        asked = time.monotonic()
        with self._lock:
            known = self._born if asked - self._seen_at < KNOWN_SECONDS else ""
        slot = self._store.call(
            ReserveSlot(
                self._key,
                self._interval_us,
                self._biz_id(game) if self._biz_id else "",
                horizon_us,
                pause_ms,
                known=known,
                lost_pause_us=self._lost_pause_us,
            )
        )
        if slot.paused_us > 0:
            self._heard_pause(slot.paused_us / 1_000_000)
        with self._lock:
            before, self._born, self._seen_at = self._born, slot.born, asked
        if slot.lost:
            self._lost(before, game)
        return slot

    def _lost(self, before: str, game: str) -> None:
        """The state in Redis was lost: the script paused every scope for the horizon; a
        longer pause this process knows of (a 1006's) is put back for every reporter."""
        left = self._pause_left()
        ratelog.log(
            logging.WARNING,
            "slots-lost",
            "the shared request rate's state in Redis was lost (written at %s, now gone or "
            "written anew: a restart or a failover); every reporter waits %.1f s before its "
            "next request, so that none meets a slot reserved before the loss",
            before,
            max(left, self._lost_pause_us / 1_000_000),
        )
        if left * 1_000_000 > self._lost_pause_us:
            self._call(game, pause_ms=math.ceil(left * 1000), horizon_us=-1)

    def describe(self) -> str:
        scope = "per game (bizId)" if self._biz_id else "per app id"
        return f"{self.rate:g} requests/s {scope}, slots shared through Redis"
