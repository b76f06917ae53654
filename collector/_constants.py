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
