"""The SDK's and the store's fixed numbers, named in one place.  Settings an operator may want
to change are in the config instead; these are choices of the implementation.  The stored
entry's 13-digit time prefix is part of the entry format (``store._entries``)."""

from __future__ import annotations

# collect(): a flush starts early once this many events are waiting.
FLUSH_SOON_EVENTS = 2048
# collect(): validated game names remembered, so the hot path skips the regex for known games.
KNOWN_GAMES_LIMIT = 10_000
# The flusher: while a round goes on (a steady flood keeps it going), it tells on_error of
# dropped events at most this often; a round reports at its end in any case.
DROPS_REPORT_SECONDS = 1.0
# The flusher: events per collect script call; large enough to amortise the call, small
# enough that one call never blocks the server for long (about a millisecond).
EVENTS_PER_CALL = 1000
# The flusher: bytes of entries per collect script call at most (they travel as one argument).
# Half the smallest proto-max-bulk-len Redis accepts (1 MB), so that no server refuses a call
# for its size; it also bounds [buffer] max_event_bytes.
CALL_BYTES = 512 * 1024
# The store's bulk path: bytes of commands per socket write.
WRITE_BYTES = 4 * 1024 * 1024

# Written once (lua/_written_once.lua): the bounds of what a shard remembers of the SDK's
# writes, so that a write sent again (a lost reply, an unconfirmed WAIT) is answered, not
# applied twice.  A writer's writes are kept for this long after its latest write to the
# shard (longer than any failover plus retry_max_delay_ms: a repeat later than that is
# applied again, a duplicate) ...
WRITES_REMEMBERED_MS = 600_000
# ... for this many writers per shard at most (the least recent forgotten first) ...
WRITERS_PER_SHARD = 10_000
# ... and this many writes per writer and shard: the writes a writer may have sent to one
# shard without an answer.  The SDK sends no more to a shard in one round.
WRITES_PER_WRITER = 1024
# Dedup keys ([buffer] dedup_fields, collect(dedup_key=...)): remembered per game at most,
# the oldest forgotten first (a later duplicate of a forgotten key is stored) ...
DEDUP_KEYS_PER_GAME = 1_000_000
# ... each as given (JSON text) up to this many bytes, a longer one as a digest.
DEDUP_KEY_BYTES = 64
