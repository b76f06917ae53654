"""The SDK's writes as planned: one ``Call`` per game (more for a large one), and what a round
of them did (``WriteResult``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from collector._buffer import Pending, no_pending
from collector._constants import CALL_BYTES, EVENTS_PER_CALL
from collector._exceptions import BackendError
from collector.counters import Counter
from collector.store import Stored


@dataclass
class Call:
    """One collect script call: events of one game plus counts to report for it."""

    game: str
    entries: list[bytes]
    pre_evicted: int = 0
    dropped_buffer_full: int = 0
    dropped_too_large: int = 0
    # The oldest events, left out because the cap would trim them at once (in pre_evicted);
    # kept so that a failed call puts them back as events rather than as a bare count.
    thinned: list[bytes] = field(default_factory=list)
    # The writer id and sequence number in its shard the call is first sent with (0: not
    # yet), kept while its outcome is unknown, so that sending it again is a repeat.
    writer: str = ""
    seq: int = 0
    # Whether a copy of it may have run: a reply was lost (or WAIT was short).  Its outcome
    # is then known only from an answer, or from the script's own refusal.
    maybe_ran: bool = False

    @property
    def events(self) -> int:
        """The events taken from the buffer for this call."""
        return len(self.thinned) + len(self.entries)


@dataclass
class WriteResult:
    stored: int = 0
    evicted: int = 0
    failed: dict[str, list[bytes]] = field(default_factory=dict)
    failed_pending: Pending = field(default_factory=no_pending)
    error: BackendError | None = None
    refused_oom: int = 0  # events in the calls Redis refused for being at maxmemory
    # Events that ran on the primary but too few replicas confirmed: sent again (a repeat).
    unreplicated: int = 0
    merged: int = 0  # events merged into an earlier one with the same dedup key
    repeats: int = 0  # calls the shard answered as repeats of writes it had applied
    # Calls a shard's script refused for good (WriteRefused): nothing stored.  Those that
    # were repeats with other content (another process uses the writer id), and those whose
    # outcome had been unknown until then.
    refused_writes: int = 0
    refused_repeats: int = 0
    refused_unconfirmed: int = 0
    # The writer's calls without an answer after this write, and their events.
    unconfirmed_writes: int = 0
    unconfirmed_events: int = 0
    # Shards whose identity marker changed since this writer last wrote to them: their data
    # vanished in between (Redis restarted empty, flushed, failed over to an empty replica).
    reset_shards: list[int] = field(default_factory=list)


def plan_calls(
    queues: Mapping[str, Sequence[bytes]], pending: Pending, cap_for: Callable[[str], int]
) -> list[Call]:
    """One call per game (more for a game with over EVENTS_PER_CALL events or CALL_BYTES
    bytes of them), drop counts riding on the game's first call.

    More events of one game than its cap would be trimmed at once, so they are not sent;
    the script counts them as evicted all the same.
    """
    games = dict.fromkeys(queues)
    for counts in pending.values():
        games.update(dict.fromkeys(counts))
    calls: list[Call] = []
    for game in games:
        entries = list(queues.get(game, ()))
        thinned = max(0, len(entries) - cap_for(game))
        parts = _cut(entries[thinned:])
        calls.append(
            Call(
                game,
                parts[0],
                thinned + pending[Counter.EVICTED].get(game, 0),
                pending[Counter.DROPPED_BUFFER_FULL].get(game, 0),
                pending[Counter.DROPPED_TOO_LARGE].get(game, 0),
                entries[:thinned],
            )
        )
        calls.extend(Call(game, part) for part in parts[1:])
    return calls


def _cut(entries: list[bytes]) -> list[list[bytes]]:
    """The entries in parts of at most EVENTS_PER_CALL events and CALL_BYTES bytes (an
    entry is never larger: max_event_bytes is bounded by it); at least one part."""
    if len(entries) <= EVENTS_PER_CALL and sum(map(len, entries)) <= CALL_BYTES:
        return [entries]  # the usual case, decided in C
    parts: list[list[bytes]] = [[]]
    size = 0
    for entry in entries:
        if parts[-1] and (len(parts[-1]) == EVENTS_PER_CALL or size + len(entry) > CALL_BYTES):
            parts.append([])
            size = 0
        parts[-1].append(entry)
        size += len(entry)
    return parts


def add_stored(result: WriteResult, c: Call, reply: Stored) -> None:
    """Count an answered call."""
    result.stored += len(c.entries) + c.pre_evicted
    result.evicted += reply.evicted
    result.merged += reply.merged
    result.repeats += reply.repeat


def fail_counts(result: WriteResult, c: Call) -> None:
    """Put the drop counts riding on a call that was not answered among the result's."""
    failed_pending = result.failed_pending
    failed_pending[Counter.EVICTED][c.game] += c.pre_evicted - len(c.thinned)
    failed_pending[Counter.DROPPED_BUFFER_FULL][c.game] += c.dropped_buffer_full
    failed_pending[Counter.DROPPED_TOO_LARGE][c.game] += c.dropped_too_large


def fail(result: WriteResult, c: Call) -> None:
    """Put a call that surely was not stored among the result's failed events and counts."""
    failed = result.failed.setdefault(c.game, [])
    failed += c.thinned
    failed += c.entries
    fail_counts(result, c)
