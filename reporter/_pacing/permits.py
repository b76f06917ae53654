"""Permits: the request limiter as the workers use it, and the limiter a config asks for.

A token bucket (``reporter._pacing.limiter``) grants requests at claim time; slots
(``reporter._pacing.slots``, the anti-addiction sink) are taken by each request right
before it is sent, and a claim only looks.
"""

from __future__ import annotations

import threading
import time

from collector.counters import Counter
from collector.metrics import NO_METRICS, Metrics
from collector.store import Store
from reporter._config import ReporterConfig
from reporter._constants import CONTENDED_SECONDS, LIMITER_WAIT_SECONDS
from reporter._pacing.limiter import (
    ClaimLimiter,
    Grant,
    LocalTokenBucket,
    SharedTokenBucket,
    Unlimited,
)
from reporter._pacing.slots import SharedSlots
from reporter._sinks.base import Pacing, SlotRate
from reporter._sinks.registry import make_sink

# A slot is used only this close to its time (else let go for the next); how many tries.
SLOT_LATE_SECONDS = 0.02
SLOT_TRIES = 3
# With a sender that checks its slot at the last moment (``on_time``), the thread wakes this
# long before its slot, so that checking, sealing and signing the body happen before the
# slot, not after it (on a loaded host they took 20-70 ms and the slot was let go).
SLOT_LEAD_SECONDS = 0.05


class Permits:
    """The limiter as the workers use it: a full batch waits for a token that is near, a
    lingering game takes only one that is there, and a refusal of a full batch marks
    requests as scarce (in any process) for a while.  With ``slots`` (the same limiter,
    a ``SharedSlots``) a claim only looks, and each request takes its slot right before it
    is sent (``at_send``, ``one``)."""

    def __init__(
        self,
        limiter: ClaimLimiter,
        slots: SharedSlots | None = None,
        lead: float = 0.0,
        metrics: Metrics = NO_METRICS,
    ) -> None:
        self.limiter = limiter
        self._slots = slots
        self._lead = lead  # > 0 only when every request goes through ``on_time``
        self._scarce_at = float("-inf")
        # Counts LATE_SLOTS: slots let go because this process woke too late for them.
        self._metrics = metrics
        # .at: the slot this thread took, on its clock; .send_at: not before then
        self._due = threading.local()

    @property
    def limited(self) -> bool:
        """Whether requests may be refused at all (workers then serve the fullest first)."""
        return self.limiter.limited

    @property
    def contended(self) -> bool:
        """Whether the limiter said lately that requests are scarce."""
        return time.monotonic() - self._scarce_at < CONTENDED_SECONDS

    def take(
        self, requests: int, stop: threading.Event, wait: bool = True, game: str = ""
    ) -> Grant:
        """Permission for up to ``requests`` requests.  With ``wait`` (a full batch), a token
        that is near is waited for (a sweep's poll interval would leave the limit unused that
        long); without, only a token that is there is taken.  With slots: whether to claim
        (the slot is taken when the request goes)."""
        grant = self.limiter.acquire(requests, spare=not wait, game=game)
        if grant.scarce:
            self._scarce_at = time.monotonic()
        if grant.granted or not wait or self._slots is not None:
            return grant
        if grant.wait <= LIMITER_WAIT_SECONDS and not stop.wait(grant.wait):
            grant = self.limiter.acquire(requests, game=game)
        return grant

    def at_send(self, game: str, stop: threading.Event) -> bool:
        """Right before a batch's first request: with slots, its slot, slept for (False: none
        within reach, or stopping); else nothing to do (its token came with the claim)."""
        return self._slots is None or self._slot(game, stop)

    def one(self, stop: threading.Event, game: str = "") -> bool:
        """One more request (a half after a 413, a re-send after 1007, a probe)."""
        if self._slots is not None:
            return self._slot(game, stop)
        return self.take(1, stop).granted > 0

    def _slot(self, game: str, stop: threading.Event) -> bool:
        """A slot, slept until.  A taker that wakes more than ``SLOT_LATE_SECONDS`` after its
        slot (a busy host) lets it go and takes the next free one: sent late, its request
        would arrive close to the next one's, and ten slots a second leave only a few ms
        each to spare.  A pause that began while it slept (a 1006 heard by any reporter)
        makes it give the slot up (without a lead; with one, ``on_time`` asks)."""
        assert self._slots is not None
        self._due.at = None
        for _ in range(SLOT_TRIES):
            # The slot, on this clock, lies between asked + wait and answered + wait: send
            # at the later (never early), and take the middle for its time (a slow round
            # trip to Redis is not lateness; half of it may be).  Sleep until the lead
            # before it: ``on_time`` sleeps the rest once the request is ready.
            asked = time.monotonic()
            slot = self._slots.reserve(game)
            answered = time.monotonic()
            wait = slot.wait_us / 1_000_000
            if slot.ahead > 0:
                self._scarce_at = answered
            send_at = answered + wait
            if not slot.reserved or stop.wait(max(0.0, send_at - self._lead - time.monotonic())):
                return False
            due = (asked + answered) / 2 + wait
            if time.monotonic() - due <= SLOT_LATE_SECONDS:
                if not self._lead and self._slots.paused(game):
                    return False
                self._due.at, self._due.send_at = due, send_at
                return True
            self._metrics.count(Counter.LATE_SLOTS)
        return False

    def on_time(self, game: str, stop: threading.Event) -> bool:
        """Asked by the sender at the last moment before a request goes: the rest of the
        sleep until the slot this thread took (woken ``lead`` early to get the request
        ready), then is it still within ``SLOT_LATE_SECONDS`` of it?  If not (it stalled on
        the way: sealing, a busy host), a new slot, slept for; False if there is none within
        reach, a pause began since the slot was reserved (every reporter's request waits it
        out), or the process is stopping."""
        due, self._due.at = getattr(self._due, "at", None), None
        if self._slots is None or due is None:
            return True
        rest = self._due.send_at - time.monotonic()
        if rest > 0 and stop.wait(rest):
            return False
        if time.monotonic() - due <= SLOT_LATE_SECONDS:
            return not self._slots.paused(game)
        self._metrics.count(Counter.LATE_SLOTS)
        return self._slot(game, stop) and self.on_time(game, stop)

    @property
    def watched(self) -> bool:
        """Whether the rate keeps a state in Redis that every reporter watches (slots)."""
        return self._slots is not None

    def watch(self) -> bool:
        """Look at the shared rate's state (``SharedSlots.watch``); False: nothing more."""
        return self._slots.watch() if self._slots is not None else False

    def refund(self, requests: int) -> None:
        if requests > 0:
            self.limiter.refund(requests)

    def pause(self, seconds: float, game: str = "") -> None:
        self.limiter.pause(seconds, game)


class PermitsPacer:
    """``Permits`` as a sender paced by slots asks it (``reporter._sinks.base.Pacer``)."""

    def __init__(self, permits: Permits, stop: threading.Event) -> None:
        self._permits = permits
        self._stop = stop

    def one(self, game: str) -> bool:
        return self._permits.one(self._stop, game)

    def on_time(self, game: str) -> bool:
        return self._permits.on_time(game, self._stop)


def make_limiter(config: ReporterConfig, store: Store) -> ClaimLimiter:
    """The limiter the configured sink asks for (``Sink.pacing``)."""
    return limiter_for(make_sink(config).pacing(), store)


def limiter_for(pacing: Pacing, store: Store) -> ClaimLimiter:
    """Slots shared by every reporter for a ``SlotRate``; a token bucket, this process's or
    shared in Redis, for a ``TokenRate``; no limit for None."""
    if isinstance(pacing, SlotRate):
        return SharedSlots(store, pacing.name, pacing.per_second, pacing.scope)
    if pacing is None:
        return Unlimited()
    if not pacing.shared:
        return LocalTokenBucket(pacing.per_second, pacing.burst)
    return SharedTokenBucket(store, pacing.name, pacing.per_second, pacing.burst)
