"""Whether this reporter process is alive and ready, for ``/healthz`` and ``/readyz``.

Ready means all of:

- the process is not stopping;
- Redis answers a PING now;
- the last round of shard leases succeeded less than ``shard_lease_seconds`` ago, so every
  lease the process believes it holds is still its own.  A round that ends with no shard
  held counts too: a round tries every shard while below its share, so holding none means
  that other processes hold them all.

A check is reused for a second, so a burst of probes costs Redis one PING.  A reason names
what is wrong (``redis: BackendUnavailable``) without the error's text, which carries hosts,
ports and users, unless ``[metrics] error_details`` is on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from collector.logs import mask
from collector.store import BackendError, Store

Clock = Callable[[], float]
# Seconds a readiness check is reused.
READY_REUSE_SECONDS = 1.0


class Health:
    def __init__(
        self,
        store: Store,
        stop: threading.Event,
        lease_seconds: float,
        owned: Callable[[], frozenset[int]],
        clock: Clock = time.monotonic,
        details: bool = False,
    ) -> None:
        self._store = store
        self._details = details
        self._stop = stop
        self._lease_seconds = lease_seconds
        self._owned = owned
        self._clock = clock
        self._renewed_at: float | None = None
        self._lock = threading.Lock()
        self._last: tuple[float, bool, dict[str, Any]] | None = None

    def leases_renewed(self) -> None:
        """A round of shard leases has just succeeded."""
        self._renewed_at = self._clock()

    def alive(self) -> dict[str, Any]:
        return {"alive": True}

    def ready(self) -> tuple[bool, dict[str, Any]]:
        """(ready, a JSON-able body that says why not)."""
        with self._lock:
            if self._last is not None and self._clock() - self._last[0] < READY_REUSE_SECONDS:
                return self._last[1], self._last[2]
            reasons = self._reasons()
            body = {"ready": not reasons, "owned_shards": len(self._owned()), "reasons": reasons}
            self._last = (self._clock(), not reasons, body)
            return not reasons, body

    def _reasons(self) -> list[str]:
        reasons = []
        if self._stop.is_set():
            reasons.append("stopping")
        try:
            self._store.ping()
        except BackendError as exc:
            # The error's text names hosts, ports and users: only when the operator asks.
            reasons.append(
                f"redis: {type(exc).__name__}: {mask(str(exc))}"
                if self._details
                else f"redis: {type(exc).__name__}"
            )
        renewed = self._renewed_at
        if renewed is None:
            reasons.append("shard leases: no round has succeeded yet")
        elif (age := self._clock() - renewed) >= self._lease_seconds:
            reasons.append(
                f"shard leases: last renewed {age:.1f}s ago, not within "
                f"shard_lease_seconds ({self._lease_seconds:g}s): they may have "
                "expired"
            )
        return reasons
