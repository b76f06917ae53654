"""Claim limiters: a request rate the reporter keeps before it claims.

Before a claim (or a take of due retries) the ``Claimer`` asks for permission to make N
requests (``Permits``, over the limiter) and claims at most what it was granted, so no batch
is leased before its request may go out; what a claim leaves unused goes back.  Three
limiters:

- ``Unlimited`` (the default): every request is allowed, at no cost.
- ``LocalTokenBucket``: one process's rate, on its own clock.
- ``SharedTokenBucket``: one bucket in Redis (``take_tokens.lua``, Redis TIME) that every
  reporter process sharing the store draws from; works on a cluster (one key).

The anti-addiction sink uses slots instead (``reporter._pacing.slots``: each request takes
a slot of a GCRA in Redis right before it is sent); ``reporter._pacing.permits`` serves
both to the workers.

A token bucket holds at most ``burst`` tokens and refills at ``rate`` per second.  Over any
window of T seconds it grants at most ``burst + rate * T``; with ``burst = 1`` requests are
spaced ``1 / rate`` apart, so no second holds more than ``rate`` of them.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from collector.store import Store, TakeTokens

Clock = Callable[[], float]  # seconds, monotonic
# Requests stay scarce this long after a caller who would have waited was refused (as in
# take_tokens.lua).
SCARCE_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Grant:
    """A limiter's answer (``Permits.take`` passes it on): requests granted now (0 to the
    number asked), seconds until one more may be, and whether requests are scarce (a full
    batch found none in the last second)."""

    granted: int
    wait: float = 0.0
    scarce: bool = False


class ClaimLimiter(Protocol):
    # True when requests may be refused: workers then spend them on the fullest batches.
    limited: bool

    def acquire(self, requests: int, spare: bool = False, game: str = "") -> Grant:
        """Take up to ``requests`` permissions now (for ``game``'s batches); never waits.  A
        ``spare`` caller (a batch that is not full) gets none while requests are scarce."""

    def refund(self, requests: int) -> None:
        """Give back permissions taken but not used (a claim found fewer batches)."""

    def pause(self, seconds: float, game: str = "") -> None:
        """Grant nothing for ``seconds`` (the endpoint said it is over its limit)."""

    def describe(self) -> str: ...


class Unlimited:
    limited = False

    def acquire(self, requests: int, spare: bool = False, game: str = "") -> Grant:
        return Grant(requests)

    def refund(self, requests: int) -> None:
        pass

    def pause(self, seconds: float, game: str = "") -> None:
        pass

    def describe(self) -> str:
        return "no request limit"


class LocalTokenBucket:
    """The token bucket of one process."""

    limited = True

    def __init__(self, rate: float, burst: int = 1, clock: Clock = time.monotonic) -> None:
        if not (rate > 0 and math.isfinite(rate)) or burst < 1:
            raise ValueError(f"a token bucket needs rate > 0 and burst >= 1: {rate}, {burst}")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._at = clock()
        self._paused_until = 0.0
        self._refused_at = -math.inf

    def acquire(self, requests: int, spare: bool = False, game: str = "") -> Grant:
        with self._lock:
            now = self._refill()
            if now < self._paused_until:
                return Grant(0, self._paused_until - now)
            scarce = now - self._refused_at < SCARCE_SECONDS
            if spare and scarce:
                return Grant(0, max(0.0, 1 - self._tokens) / self.rate, True)
            granted = min(requests, math.floor(self._tokens))
            self._tokens -= granted
            wait = (1 - self._tokens) / self.rate if granted < requests else 0.0
            if not granted and not spare:
                self._refused_at, scarce = now, True
            return Grant(granted, wait, scarce)

    def refund(self, requests: int) -> None:
        with self._lock:
            self._refill()
            self._tokens = min(self.burst, self._tokens + requests)

    def pause(self, seconds: float, game: str = "") -> None:
        with self._lock:
            now = self._refill()
            self._paused_until = max(self._paused_until, now + seconds)
            self._tokens = 0.0

    def _refill(self) -> float:
        now = self._clock()
        start = max(self._at, self._paused_until)  # a pause empties the bucket
        if now > start:
            self._tokens = min(self.burst, self._tokens + (now - start) * self.rate)
        self._at = max(self._at, now)
        return now

    def describe(self) -> str:
        return f"{self.rate:g} requests/s (burst {self.burst}) in this process"


class SharedTokenBucket:
    """One token bucket in Redis for every reporter process that shares the store.

    After a refusal it does not ask Redis again before the bucket said a token could be
    there, so a limited reporter costs one round trip per token, not one per sweep."""

    limited = True

    def __init__(
        self, store: Store, name: str, rate: float, burst: int = 1, clock: Clock = time.monotonic
    ) -> None:
        if not (rate > 0 and math.isfinite(rate)) or burst < 1:
            raise ValueError(f"a token bucket needs rate > 0 and burst >= 1: {rate}, {burst}")
        self.rate = rate
        self.burst = burst
        self._store = store
        self._key = store.schema.limiter(name)
        self._clock = clock
        self._not_before = 0.0
        self._scarce = False  # what the bucket said last

    def acquire(self, requests: int, spare: bool = False, game: str = "") -> Grant:
        now = self._clock()
        if now < self._not_before:
            return Grant(0, self._not_before - now, self._scarce)
        tokens = self._store.call(
            TakeTokens(self._key, self.rate, self.burst, requests, spare=spare)
        )
        wait = tokens.wait_us / 1_000_000
        self._scarce = tokens.scarce
        if not tokens.granted:
            self._not_before = now + wait
        return Grant(tokens.granted, wait, tokens.scarce)

    def refund(self, requests: int) -> None:
        if requests > 0:
            self._store.call(TakeTokens(self._key, self.rate, self.burst, -requests))
            self._not_before = 0.0  # what came back may be taken at once

    def pause(self, seconds: float, game: str = "") -> None:
        self._store.call(
            TakeTokens(self._key, self.rate, self.burst, 0, pause_ms=math.ceil(seconds * 1000))
        )
        self._not_before = self._clock() + seconds

    def describe(self) -> str:
        return f"{self.rate:g} requests/s (burst {self.burst}) shared through Redis"


def bucket_name(kind: str, key: str) -> str:
    """A bucket name for ``key`` (an app id, say) fit for a Redis key name."""
    if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", key):
        return f"{kind}:{key}"
    return f"{kind}:{hashlib.sha256(key.encode()).hexdigest()[:24]}"
