"""The sink gate: all claiming stops while the endpoint is failing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from collector.retry import backoff
from reporter._senders.outcome import RETRY, Outcome


class SinkGate:
    """Stops all claiming while the endpoint is failing, so an outage costs one probe per
    backoff period instead of one request per batch.

    Each retryable failure in a row doubles the pause (from ``initial`` to ``longest``
    seconds); a Retry-After longer than that is honoured; any answer that is not a
    retryable failure opens the gate again.  ``held``: whether sending is held (an answer
    only the operator can fix, ``SendHold``): the gate stays closed while it is.
    """

    def __init__(
        self,
        initial: float,
        longest: float,
        clock: Callable[[], float] = time.monotonic,
        held: Callable[[], bool] = lambda: False,
    ) -> None:
        self._initial = initial
        self._longest = longest
        self._clock = clock
        self._held = held
        self._lock = threading.Lock()
        self._failures = 0
        self._closed_until = 0.0

    def is_open(self) -> bool:
        return self._clock() >= self._closed_until and not self._held()

    def record(self, outcome: Outcome) -> None:
        with self._lock:
            if outcome.kind != RETRY:
                self._failures = 0
                self._closed_until = 0.0
                return
            self._failures += 1
            pause = backoff(self._failures, self._initial, self._longest, least=outcome.retry_after)
            self._closed_until = self._clock() + pause

    @property
    def failures(self) -> int:
        """Retryable failures in a row (0 once any other answer came)."""
        return self._failures
