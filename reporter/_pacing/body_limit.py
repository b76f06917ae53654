"""How many bytes one request body may hold, and how batches are cut to fit.

Batches are cut when they are claimed (``lua/claim.lua``), by count and by bytes, so a batch
is the same set of events on every attempt.  The claim cannot build bodies, so each sink
describes its body as a ``BodyModel`` (``Sink.body_model``): a fixed envelope plus, per
event, its JSON and a few bytes of framing, all scaled (the nppa body is sealed and
base64-encoded: 4/3).

The limit is ``[sink] max_batch_bytes``, lowered when the endpoint refuses a body of several
events as too large (HTTP 413), and raised again by a larger body it takes (``BodyLimit``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from collector.config import mask_url
from reporter._constants import BODY_PROBE_SECONDS
from reporter._sinks.base import JSON_BODY, BodyModel

__all__ = ["JSON_BODY", "BodyLimit", "BodyModel"]

logger = logging.getLogger("reporter")


class BodyLimit:
    """The body size batches are cut at now; shared by every worker of the process.

    It starts at ``configured`` (``[sink] max_batch_bytes``) and is lowered only by a body of
    more than one event refused as too large: to the largest body the endpoint took in the
    same attempt, or just under the size it refused, and never below ``floor`` (one event of
    ``[buffer] max_event_bytes`` in its envelope: an event the SDK took must still be a batch
    of its own).  A single event refused says nothing of the limit: it is dead-lettered alone.
    While lowered, one claim per ``probe_seconds`` is cut at twice the limit (at most
    ``configured``); a body the endpoint takes that is an eighth larger than the limit or
    more raises the limit to it (to ``configured`` when within an eighth of it).  Every
    change is logged once.
    """

    def __init__(
        self,
        configured: int,
        model: BodyModel,
        endpoint: str = "",
        max_event_bytes: int = 0,
        probe_seconds: float = BODY_PROBE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.configured = configured
        self.model = model
        self.floor = min(configured, model.body_bytes_of(max_event_bytes))
        self._endpoint = mask_url(endpoint) if endpoint else "the endpoint"
        self._probe_seconds = probe_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._limit = configured
        self._next_probe = 0.0

    @property
    def limit(self) -> int:
        return self._limit

    def claim_budget(self) -> tuple[int, int]:
        """What the claim script cuts by: (bytes of events per batch, bytes per event); now
        and then, while the limit is lowered, a probe's larger budget."""
        limit = self._limit
        if limit < self.configured:
            now = self._clock()
            with self._lock:
                if now >= self._next_probe:
                    self._next_probe = now + self._probe_seconds
                    limit = min(self.configured, 2 * self._limit)
        return self.model.event_budget(limit), self.model.per_event

    def learn(self, refused: int, accepted: int) -> None:
        """What an attempt heard: the smallest body of more than one event the endpoint refused
        as too large (0: none) and the largest body it took (0: none)."""
        lower = max(self.floor, accepted if 0 < accepted < refused else refused - 1)
        with self._lock:
            old = self._limit
            if refused and lower < old:
                new = self._limit = lower
                self._next_probe = self._clock() + self._probe_seconds
            elif accepted > old and old < self.configured:
                # Within an eighth of the configured limit is as good as there; a smaller
                # step than an eighth is not worth a change (nor a log line a minute).
                new = self.configured if accepted * 9 >= self.configured * 8 else accepted
                if new < self.configured and new * 8 < old * 9:
                    return
                self._limit = new
            else:
                return
        if new < old:
            logger.warning(
                "%s refused a %d-byte body of several events as too large (HTTP 413); batches "
                "are now cut at %d bytes (set [sink] max_batch_bytes = %d to start there); a "
                "larger body is tried every %g s",
                self._endpoint,
                refused,
                new,
                new,
                self._probe_seconds,
            )
        else:
            logger.info(
                "%s took a %d-byte body; batches are now cut at %d bytes (of [sink] "
                "max_batch_bytes = %d)",
                self._endpoint,
                accepted,
                new,
                self.configured,
            )
