"""Store buffered events in Redis: many events of one game per script call, many calls per write."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from collector._buffer import Pending, no_pending
from collector._constants import CALL_BYTES, EVENTS_PER_CALL
from collector._exceptions import BackendError, BackendFull, BackendUnreplicated
from collector.counters import Counter
from collector.store import Collect, ShardKeys, Store, Stored


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


@dataclass
class WriteResult:
    stored: int = 0
    evicted: int = 0
    failed: dict[str, list[bytes]] = field(default_factory=dict)
    failed_pending: Pending = field(default_factory=no_pending)
    error: BackendError | None = None
    refused_oom: int = 0  # events in the calls Redis refused for being at maxmemory
    # Events that ran on the primary but too few replicas confirmed: sent again.
    unreplicated: int = 0
    # Shards whose identity marker changed since this writer last wrote to them: their data
    # vanished in between (Redis restarted empty, flushed, failed over to an empty replica).
    reset_shards: list[int] = field(default_factory=list)


def plan_calls(queues: Mapping[str, Sequence[bytes]], pending: Pending,
               cap_for: Callable[[str], int]) -> list[Call]:
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
        calls.append(Call(
            game, parts[0], thinned + pending[Counter.EVICTED].get(game, 0),
            pending[Counter.DROPPED_BUFFER_FULL].get(game, 0),
            pending[Counter.DROPPED_TOO_LARGE].get(game, 0),
            entries[:thinned],
        ))
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


class Writer:
    """Runs planned calls through the store's bulk path: on a single server one batch of
    writes, on a cluster one per node."""

    def __init__(self, store: Store, cap_for: Callable[[str], int],
                 ttl_for: Callable[[str], int],
                 on_reset: Callable[[list[int]], None] = lambda shards: None) -> None:
        self.store = store
        self._schema = store.schema
        self._cap_for = cap_for
        self._ttl_for = ttl_for
        self._markers: dict[int, str] = {}  # shard -> the marker it had at the last write
        self._on_reset = on_reset
        self._full: set[int] = set()  # shards whose last write Redis refused for lack of memory

    def write(self, queues: Mapping[str, Sequence[bytes]], pending: Pending) -> WriteResult:
        calls = plan_calls(queues, pending, self._cap_for)
        shards = [self._schema.for_game(c.game) for c in calls]
        # Offered as the marker of a shard that has none; new each round, so that a shard
        # reset since the last round never gets back the marker it had.
        identity = uuid.uuid4().hex
        replies: list[Stored | BackendError | None] = [None] * len(calls)
        if not self._full:
            self._send(calls, shards, range(len(calls)), identity, replies)
        else:
            self._probe(calls, shards, identity, replies)
        self._full = {keys.shard for keys, reply in zip(shards, replies, strict=True)
                      if isinstance(reply, BackendFull)}
        result = tally(calls, replies)
        for keys, reply in zip(shards, replies, strict=True):
            if isinstance(reply, Stored):
                known = self._markers.setdefault(keys.shard, reply.marker)
                if known != reply.marker:
                    self._markers[keys.shard] = reply.marker
                    result.reset_shards.append(keys.shard)
        if result.reset_shards:
            self._on_reset(result.reset_shards)
        return result

    def _probe(self, calls: list[Call], shards: list[ShardKeys], identity: str,
               replies: list[Stored | BackendError | None]) -> None:
        """After Redis refused writes for lack of memory: one call per shard that was full
        (and every call of the others) first; the rest of a shard's calls only if its probe
        was taken.  A full Redis is not sent every buffered event at every retry (it reads
        each command whole before refusing it)."""
        probes: set[int] = set()
        first = []
        for i, keys in enumerate(shards):
            if keys.shard in self._full:
                if keys.shard in probes:
                    continue
                probes.add(keys.shard)
            first.append(i)
        self._send(calls, shards, first, identity, replies)
        still_full = {keys.shard for keys, reply in zip(shards, replies, strict=True)
                      if isinstance(reply, BackendFull)}
        rest = [i for i, reply in enumerate(replies)
                if reply is None and shards[i].shard not in still_full]
        self._send(calls, shards, rest, identity, replies)

    def _send(self, calls: list[Call], shards: list[ShardKeys], which: Sequence[int],
              identity: str, replies: list[Stored | BackendError | None]) -> None:
        if not which:
            return
        got = self.store.call_many([
            Collect(shards[i], calls[i].game, calls[i].entries, self._cap_for(calls[i].game),
                    self._ttl_for(calls[i].game), calls[i].pre_evicted,
                    calls[i].dropped_buffer_full, calls[i].dropped_too_large, identity)
            for i in which
        ])
        for i, reply in zip(which, got, strict=True):
            replies[i] = reply


def tally(calls: list[Call], replies: Sequence[Stored | BackendError | None]) -> WriteResult:
    """Sum what was stored; collect what failed (or was held back, None: its shard is full)
    so it can be put back and sent again."""
    result = WriteResult()
    for c, reply in zip(calls, replies, strict=True):
        if not isinstance(reply, Stored):
            if isinstance(reply, BackendFull):
                result.refused_oom += len(c.thinned) + len(c.entries)
            if isinstance(reply, BackendUnreplicated):
                result.unreplicated += len(c.entries)
            if reply is not None:  # None is held back: its shard's probe was refused
                result.error = reply
            failed = result.failed.setdefault(c.game, [])
            failed += c.thinned
            failed += c.entries
            failed_pending = result.failed_pending
            failed_pending[Counter.EVICTED][c.game] += c.pre_evicted - len(c.thinned)
            failed_pending[Counter.DROPPED_BUFFER_FULL][c.game] += c.dropped_buffer_full
            failed_pending[Counter.DROPPED_TOO_LARGE][c.game] += c.dropped_too_large
        else:
            result.stored += len(c.entries) + c.pre_evicted
            result.evicted += reply.evicted
    return result
