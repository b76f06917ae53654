"""Names of the counters the scripts keep in each shard's ``stats`` hash.

The scripts spell them out (Lua cannot import these); a test checks they agree.
"""

from __future__ import annotations

STORED = "stored"
EVICTED = "evicted"
SDK_DROPPED_BUFFER_FULL = "sdk_dropped_buffer_full"
SDK_DROPPED_TOO_LARGE = "sdk_dropped_too_large"
COUNTERS = (
    STORED, EVICTED, "stale", "delivered", "rejected", "replayed", "dead_dropped", "purged",
    SDK_DROPPED_BUFFER_FULL, SDK_DROPPED_TOO_LARGE, "claimed", "batches_claimed",
    "batches_delivered", "batches_retried", "batches_dead", "batches_reaped", "batches_released",
)
