"""How many bytes one request body may hold, and how batches are cut to fit.

Batches are cut when they are claimed (``lua/claim.lua``), by count and by bytes, so a batch
is the same set of events on every attempt.  The claim cannot build bodies, so each sink
describes its body as a ``BodyModel``: a fixed envelope plus, per event, its JSON and a few
bytes of framing, all scaled (the nppa body is sealed and base64-encoded: 4/3).

The limit is ``[sink] max_batch_bytes``, lowered when the endpoint refuses a body as too large
(HTTP 413) to the largest body it then took: learned once per process and logged.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from collector.config import mask_url

logger = logging.getLogger("reporter")


@dataclass(frozen=True, slots=True)
class BodyModel:
    """A body's size: ``fixed`` + ``scale`` x the sum of (event JSON + ``per_event``)."""

    fixed: int
    per_event: int
    scale: float = 1.0

    def body_bytes(self, events: Sequence[bytes]) -> int:
        return self.fixed + math.ceil(
            self.scale * (sum(map(len, events)) + self.per_event * len(events)))

    def event_budget(self, body_limit: int) -> int:
        """The bytes of events (each with its ``per_event``) a body of ``body_limit`` holds."""
        return max(1, math.floor((body_limit - self.fixed) / self.scale))


# {"game":...,"batch_id":...,"events":[e1,e2]}: the game name (at most 64 characters, quoted)
# and a batch id with the suffixes of retries and splits fit in the fixed part.
JSON_BODY = BodyModel(fixed=256, per_event=1)
# {"data":"<base64 of nonce, AES-GCM of {"collections":[{"no":n,...},...]}, tag>"}: the
# item's "no" and comma add 10 bytes; sealing adds 28 bytes before base64.
NPPA_BODY = BodyModel(fixed=128, per_event=10, scale=4 / 3)


def body_model(sink_kind: str) -> BodyModel:
    return NPPA_BODY if sink_kind == "nppa" else JSON_BODY


class BodyLimit:
    """The body size batches are cut at now; shared by every worker of the process."""

    def __init__(self, configured: int, model: BodyModel, endpoint: str = "") -> None:
        self.configured = configured
        self.model = model
        self._endpoint = mask_url(endpoint) if endpoint else "the endpoint"
        self._lock = threading.Lock()
        self._limit = configured

    @property
    def limit(self) -> int:
        return self._limit

    def claim_budget(self) -> tuple[int, int]:
        """What the claim script cuts by: (bytes of events per batch, bytes per event)."""
        return self.model.event_budget(self._limit), self.model.per_event

    def learn(self, refused: int, accepted: int) -> None:
        """The endpoint refused a body of ``refused`` bytes as too large and then took bodies
        of up to ``accepted`` bytes (0: none): cut later batches at the size it took, or just
        under the size it refused."""
        new = accepted if 0 < accepted < refused else refused - 1
        with self._lock:
            if new >= self._limit:
                return
            self._limit = new
        logger.warning(
            "%s refused a %d-byte body as too large (HTTP 413); batches are now cut at %d "
            "bytes (set [sink] max_batch_bytes = %d to start there)", self._endpoint,
            refused, new, new)
