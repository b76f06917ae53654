"""The one vocabulary of counts: every counter and gauge the project reports, by one name.

The Lua scripts write the ``STORE`` counters into each shard's ``stats`` hash (spelled out:
Lua cannot import this), ``Collector.stats()`` reports the ``SDK`` counters, the reporter's
in-process tally the ``REPORTER`` counters, and ``status``, the metrics and
``docs/delivery.md`` use the same names.  A test checks every one of those against this
module.  Counters only go up; gauges are a level read at one moment; histograms count
observations (a POST's duration, a batch's size) into buckets.

The accounting invariant in these words: every event ``collect()`` accepted is stored or
dropped in the SDK (``dropped_buffer_full``, ``dropped_at_close``, ``dropped_disabled``) or
still ``buffered`` there; every event stored is ``evicted``, ``merged``, ``stale``,
``delivered``, in a dead letter (``dead_events - replayed``), set aside in a quarantine
(``quarantined_events``), or still buffered or pending in Redis.
"""

from __future__ import annotations

from enum import StrEnum


class Counter(StrEnum):
    """A count that only goes up.  Unit: events, unless the name says batches."""

    # -- the SDK, per process (Collector.stats())
    ACCEPTED = "accepted"
    FLUSHES = "flushes"
    BACKEND_ERRORS = "backend_errors"
    # Events in writes Redis refused because it was at maxmemory (an OOM reply); not a loss:
    # they stay in the buffer and go again, so one event can be counted more than once.
    REFUSED_OOM = "refused_oom"
    UNREPLICATED_WRITES = "unreplicated_writes"  # stored, too few replicas confirmed: resent
    # Writes a shard's script refused for good (unit: writes): nothing stored, and the same
    # write would be refused again.  Their events go back to the buffer as new writes (sync
    # mode: collect() raises WriteRefused), and a write whose outcome was unknown is no longer
    # sent again.  Includes refused_repeats.
    REFUSED_WRITES = "refused_writes"
    DROPPED_AT_CLOSE = "dropped_at_close"
    DROPPED_CLOSED = "dropped_closed"
    DROPPED_DISABLED = "dropped_disabled"
    # -- the SDK and the store (counted in the SDK, reported to the game's shard)
    STORED = "stored"
    EVICTED = "evicted"
    # Events not stored because an event of the same game with the same dedup key was stored
    # within the dedup window (part of stored: the first event wins, this one ends here).
    MERGED = "merged"
    DROPPED_BUFFER_FULL = "dropped_buffer_full"
    DROPPED_TOO_LARGE = "dropped_too_large"
    # Writes a shard refused as repeats with other content (unit: writes): the shard remembers
    # their writer id and number with another length or checksum, or has let go of the
    # numbers below theirs, so another process uses the same writer id (a cloned machine or
    # container, a fork the SDK did not see).  Nothing stored; the SDK takes a new writer id
    # and sends the events again as new writes.
    REFUSED_REPEATS = "refused_repeats"
    # -- the store (scripts) and the reporter's tally
    CLAIMED = "claimed"
    STALE = "stale"
    DELIVERED = "delivered"
    REJECTED_ITEMS = "rejected_items"
    MALFORMED_ENTRIES = "malformed_entries"
    DEAD_EVENTS = "dead_events"
    REPLAYED = "replayed"
    DEAD_DROPPED = "dead_dropped"
    PURGED = "purged"
    BATCHES_CLAIMED = "batches_claimed"
    BATCHES_DELIVERED = "batches_delivered"
    BATCHES_RETRIED = "batches_retried"
    BATCHES_REAPED = "batches_reaped"
    BATCHES_RELEASED = "batches_released"
    DEAD_BATCHES = "dead_batches"
    # Events delivered with their behaviour time moved into the anti-addiction interface's
    # window ([nppa] late_behaviour = "resend"); a part of delivered, not a state of its own.
    LATE_SENT = "late_sent"
    # Logins and logouts (bt 1 and 0) of the anti-addiction sink dropped as stale (a part of
    # stale): a stale logout leaves its session open in the system.  Each item is recorded
    # (the shard's late list, and the audit trail if one is kept).
    STALE_LOGINS = "stale_logins"
    STALE_LOGOUTS = "stale_logouts"
    # Records of the shards' late lists (items that missed the window) dropped beyond their
    # bound, oldest first; unit: records.
    LATE_RECORDS_TRIMMED = "late_records_trimmed"
    # Records the scripts moved to a shard's quarantine (a key of another type, metadata that
    # does not decode: lua/_guard.lua); unit: records.  And the events of the pending batches
    # among them (in flight or waiting for a retry), which leave the pending ones there.
    QUARANTINED_RECORDS = "quarantined_records"
    QUARANTINED_EVENTS = "quarantined_events"
    # Shards a reporter took over from an owner key nobody could be renewing: one without
    # expiry, or whose holder was missing from the live registry (lua/shard_lease.lua);
    # unit: takeovers.  Each is a quarantine record too.
    OWNERS_TAKEN_OVER = "owners_taken_over"
    # -- the reporter only
    BATCHES_STALE = "batches_stale"
    CONFIG_ERRORS = "config_errors"
    ACK_FAILED = "ack_failed"
    LEASE_LOST = "lease_lost"
    # [redis] wait_for_replicas: claimed batches handed back unsent, acks a failover may undo
    BATCHES_UNREPLICATED = "batches_unreplicated"
    ACKS_UNREPLICATED = "acks_unreplicated"
    # Slots of the shared request rate this process let go because a thread was more than
    # 20 ms late for its own (a busy host); it took another.  Unit: slots.
    LATE_SLOTS = "late_slots"
    # Lines of the anti-addiction audit trail ([nppa] audit_directory) this process could
    # not write (a full disk, a directory it may not write); unit: lines.
    AUDIT_LINES_LOST = "audit_lines_lost"
    # -- the SDK and the reporter, each in its own process
    STORE_RESETS = "store_resets"


class Gauge(StrEnum):
    """A level, read when asked."""

    BUFFERED = "buffered"  # events waiting in the SDK's buffer, or in Redis
    # The SDK's writes whose outcome is unknown (a lost reply, or too few replicas confirmed
    # them), kept to be sent again as they are (their events are part of buffered).
    UNCONFIRMED_WRITES = "unconfirmed_writes"
    PENDING_EVENTS = "pending_events"  # events in batches in flight or waiting for retry
    UNACCOUNTED = "unaccounted"  # stored events in none of the states (expired buffers)
    BATCHES_IN_FLIGHT = "batches_in_flight"
    BATCHES_RETRY = "batches_retry"
    BATCHES_DEAD_LISTED = "batches_dead_listed"
    HELD_BATCHES = "held_batches"  # batches this reporter process holds a lease on
    OWNED_SHARDS = "owned_shards"  # shards this reporter process sweeps
    HOT_GAMES_SERVED = "hot_games_served"  # hot games whose shard this reporter process holds
    SINK_GATE_OPEN = "sink_gate_open"  # 1 while claims may go out, 0 while paused
    # Seconds sending has been held (an identity or configuration answer; 0: not held)
    SENDING_HELD_SECONDS = "sending_held_seconds"
    # -- the reporter's metrics endpoint ([metrics] listen)
    BATCHES_RETRY_DUE = "batches_retry_due"  # batches whose retry time has come
    OLDEST_EVENT_AGE_SECONDS = "oldest_event_age_seconds"  # of the events buffered in Redis
    GAME_BUFFERED = "game_buffered"  # events buffered of one of the games with the most
    # age of the oldest event buffered of one of the games whose oldest event is oldest
    GAME_OLDEST_EVENT_AGE_SECONDS = "game_oldest_event_age_seconds"
    LIVE_REPORTERS = "live_reporters"  # reporter processes with a live heartbeat
    SHARDS = "shards"  # [redis] shards: every reporter process's shards add up to this
    LIMITER_WAIT_SECONDS = "limiter_wait_seconds"  # what the last refused claim had to wait
    REDIS_UP = "redis_up"  # 1 if the last read of Redis for the metrics worked, else 0
    REDIS_MEMORY_USED_BYTES = "redis_memory_used_bytes"  # per node, counted against maxmemory
    REDIS_MEMORY_MAX_BYTES = "redis_memory_max_bytes"  # per node: maxmemory (0 = no limit)
    REDIS_REFUSING_WRITES = "redis_refusing_writes"  # 1 while a node answers writes with OOM


class Histogram(StrEnum):
    """Observations counted into buckets."""

    POST_DURATION_SECONDS = "post_duration_seconds"  # one request to the endpoint
    BATCH_SIZE_EVENTS = "batch_size_events"  # events in one request


C = Counter

# Collector.stats(): these counters and the SDK_GAUGES.
SDK: tuple[Counter, ...] = (
    C.ACCEPTED,
    C.STORED,
    C.EVICTED,
    C.MERGED,
    C.DROPPED_BUFFER_FULL,
    C.DROPPED_AT_CLOSE,
    C.DROPPED_TOO_LARGE,
    C.DROPPED_CLOSED,
    C.DROPPED_DISABLED,
    C.BACKEND_ERRORS,
    C.REFUSED_OOM,
    C.FLUSHES,
    C.STORE_RESETS,
    C.UNREPLICATED_WRITES,
    C.REFUSED_WRITES,
    C.REFUSED_REPEATS,
)
SDK_GAUGES: tuple[Gauge, ...] = (Gauge.BUFFERED, Gauge.UNCONFIRMED_WRITES)
# Written by the scripts into each shard's stats hash.
STORE: tuple[Counter, ...] = (
    C.STORED,
    C.EVICTED,
    C.MERGED,
    C.DROPPED_BUFFER_FULL,
    C.DROPPED_TOO_LARGE,
    C.REFUSED_REPEATS,
    C.CLAIMED,
    C.BATCHES_CLAIMED,
    C.STALE,
    C.DELIVERED,
    C.BATCHES_DELIVERED,
    C.BATCHES_RETRIED,
    C.REJECTED_ITEMS,
    C.MALFORMED_ENTRIES,
    C.DEAD_EVENTS,
    C.DEAD_BATCHES,
    C.BATCHES_REAPED,
    C.BATCHES_RELEASED,
    C.REPLAYED,
    C.DEAD_DROPPED,
    C.PURGED,
    C.LATE_SENT,
    C.STALE_LOGINS,
    C.STALE_LOGOUTS,
    C.LATE_RECORDS_TRIMMED,
    C.QUARANTINED_RECORDS,
    C.QUARANTINED_EVENTS,
    C.OWNERS_TAKEN_OVER,
)
# What one reporter process did (its tally; the "stopped:" line).
REPORTER: tuple[Counter, ...] = (
    C.STALE,
    C.DELIVERED,
    C.BATCHES_DELIVERED,
    C.BATCHES_STALE,
    C.BATCHES_RETRIED,
    C.REJECTED_ITEMS,
    C.MALFORMED_ENTRIES,
    C.DEAD_EVENTS,
    C.DEAD_BATCHES,
    C.BATCHES_RELEASED,
    C.CONFIG_ERRORS,
    C.ACK_FAILED,
    C.LEASE_LOST,
    C.STORE_RESETS,
    C.BATCHES_UNREPLICATED,
    C.ACKS_UNREPLICATED,
    C.LATE_SENT,
    C.LATE_SLOTS,
    C.STALE_LOGINS,
    C.STALE_LOGOUTS,
    C.AUDIT_LINES_LOST,
)
# telemetry-reporter status (and --json): the store's counters and these levels.
STATUS_GAUGES: tuple[Gauge, ...] = (
    Gauge.BUFFERED,
    Gauge.PENDING_EVENTS,
    Gauge.BATCHES_IN_FLIGHT,
    Gauge.BATCHES_RETRY,
    Gauge.BATCHES_DEAD_LISTED,
    Gauge.UNACCOUNTED,
)
# The reporter's metrics endpoint ([metrics] listen): these levels, besides its counters and
# the histograms; each served as telemetry_<name>.
METRICS_GAUGES: tuple[Gauge, ...] = (
    Gauge.OWNED_SHARDS,
    Gauge.HOT_GAMES_SERVED,
    Gauge.HELD_BATCHES,
    Gauge.SINK_GATE_OPEN,
    Gauge.SENDING_HELD_SECONDS,
    Gauge.LIMITER_WAIT_SECONDS,
    Gauge.SHARDS,
    Gauge.REDIS_UP,
    Gauge.REDIS_MEMORY_USED_BYTES,
    Gauge.REDIS_MEMORY_MAX_BYTES,
    Gauge.REDIS_REFUSING_WRITES,
    Gauge.LIVE_REPORTERS,
    Gauge.BUFFERED,
    Gauge.GAME_BUFFERED,
    Gauge.GAME_OLDEST_EVENT_AGE_SECONDS,
    Gauge.OLDEST_EVENT_AGE_SECONDS,
    Gauge.BATCHES_IN_FLIGHT,
    Gauge.BATCHES_RETRY,
    Gauge.BATCHES_RETRY_DUE,
    Gauge.BATCHES_DEAD_LISTED,
)
