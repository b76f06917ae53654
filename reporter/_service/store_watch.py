"""Notices when Redis lost a shard's data: restarted without persistence, flushed, or failed
over to a replica that had not received it.

Every shard carries an identity marker, written when the shard is first used (by the SDK's
first write or a reporter's first sweep).  Each sweep reads it, in the round trip that reads
the ring, with the shard's outstanding events by its counters.  A marker that vanished or
changed since the previous sweep means everything the shard held is gone, counters included,
so nothing else would ever tell: the events outstanding at the previous sweep are lost.

One Redis restart resets all of its shards at once, so shards found within
``RESET_GATHER_SECONDS`` of each other are one reset: one ERROR, one ``store_resets``, one
record that ``status`` prints.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from collector.counters import Counter
from collector.logs import counted
from collector.metrics import Metrics
from collector.store import BackendFull, ShardKeys, Store
from reporter._delivery.batches import new_id

logger = logging.getLogger("reporter")

# Shards found reset this close together are reported as one reset.
RESET_GATHER_SECONDS = 1.0
ALERT_NAME = "store_reset"


class StoreWatch:
    def __init__(
        self, store: Store, counts: Metrics, clock: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self._counts = counts
        self._clock = clock
        self._lock = threading.Lock()
        # shard -> (its marker, events outstanding) at the last sweep
        self._known: dict[int, tuple[str, int]] = {}
        self._found: list[tuple[int, int, float]] = []  # (shard, events lost, when found)

    def seen(self, keys: ShardKeys, marker: str | None, outstanding: int) -> None:
        """What a sweep read: the shard's marker (None: it has none, so it gets one now) and
        its outstanding events."""
        if marker is None:
            try:
                marker = self._store.mark(keys, new_id())
            except BackendFull:  # Redis is at maxmemory: mark the shard at a later sweep
                return
        with self._lock:
            known = self._known.get(keys.shard)
            self._known[keys.shard] = (marker, outstanding)
            if known is not None and known[0] != marker:
                self._found.append((keys.shard, max(0, known[1]), time.monotonic()))

    def loop(self) -> bool:
        """Report the resets found, once no more shards have joined for a moment."""
        with self._lock:
            if not self._found or time.monotonic() - self._found[-1][2] < RESET_GATHER_SECONDS:
                return False
            found, self._found = self._found, []
        now = self._clock()
        lost = sum(events for _, events, _ in found)
        shards = sorted(shard for shard, _, _ in found)
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        message = (
            f"store reset detected at {when}, about {counted(lost, 'event')} lost "
            f"({_shard_list(shards)})"
        )
        logger.error(
            "%s: Redis lost what these shards held (a restart without persistence, "
            "a flush, or a failover to a replica that lagged); they are in use again. "
            "See docs/operations.md, Persistence",
            message,
            extra={"events": lost, "shards": shards},
        )
        try:
            self._store.note_alert(ALERT_NAME, message, int(now * 1000))
        except BackendFull:  # status misses the record; the log line and the count have it
            logger.warning("could not record the store reset for status: Redis is full")
        # Counted last: whoever sees the count finds the log line and the alert there too.
        self._counts.count(Counter.STORE_RESETS)
        return False


def _shard_list(shards: list[int]) -> str:
    if len(shards) == 1:
        return f"shard {shards[0]}"
    if shards == list(range(shards[0], shards[-1] + 1)):
        return f"shards {shards[0]}-{shards[-1]}"
    return "shards " + ", ".join(map(str, shards))
