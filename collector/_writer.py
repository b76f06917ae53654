"""Store buffered events in Redis: many events of one game per script call, many calls per write."""

from __future__ import annotations

import threading
import uuid
from collections import Counter as PerGame
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from collector._buffer import Pending, no_pending
from collector._constants import CALL_BYTES, EVENTS_PER_CALL, WRITES_PER_WRITER
from collector._exceptions import (
    BackendError,
    BackendFull,
    BackendUnavailable,
    BackendUnreplicated,
)
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
    # The call's sequence number in its shard, given when it is first sent (0: not yet) and
    # kept while its outcome is unknown, so that sending it again is a repeat.
    seq: int = 0

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


class Writer:
    """Runs planned calls through the store's bulk path: on a single server one batch of
    writes, on a cluster one per node.

    Written once: every call carries this writer's id and a sequence number counted per
    shard, and the shard remembers the writes it applied (``lua/collect.lua``).  A call
    whose outcome is unknown (no reply, or too few replicas confirmed it) is kept as it is,
    ``unconfirmed``, and sent again with the same number in later rounds, where the shard
    answers a repeat without storing anything.  While a shard has such calls, they are sent
    first and alone: the shard's new calls wait (in the buffer) until every one of them has
    an answer, so no more than ``WRITES_PER_WRITER`` of this writer's writes are ever without
    an answer in one shard, and the shard can let go of the memory of the answered ones.
    With ``keep_unconfirmed`` False (sync mode: the caller hears of the failure) such a call
    is given up instead.
    """

    def __init__(
        self,
        store: Store,
        cap_for: Callable[[str], int],
        ttl_for: Callable[[str], int],
        on_reset: Callable[[list[int]], None] = lambda shards: None,
        window_for: Callable[[str], int] = lambda game: 0,
        keep_unconfirmed: bool = True,
    ) -> None:
        self.store = store
        self._schema = store.schema
        self._cap_for = cap_for
        self._ttl_for = ttl_for
        self._window_for = window_for  # the game's dedup window in seconds
        self._markers: dict[int, str] = {}  # shard -> the marker it had at the last write
        self._on_reset = on_reset
        self._full: set[int] = set()  # shards whose last write Redis refused for lack of memory
        self._keep = keep_unconfirmed
        self.writer_id = uuid.uuid4().hex[:16]
        self._next: dict[int, int] = {}  # shard -> its next sequence number
        # shard -> sequence numbers on their way now (each is sent by one sender at a time):
        # the lowest of them is the shard's lowest without an answer.
        self._sending: dict[int, set[int]] = {}
        self._lock = threading.Lock()
        self._unconfirmed: dict[int, list[Call]] = {}  # shard -> calls without an answer

    @property
    def unconfirmed_writes(self) -> int:
        return sum(map(len, self._unconfirmed.values()))

    @property
    def unconfirmed_events(self) -> int:
        return sum(c.events for calls in self._unconfirmed.values() for c in calls)

    def take_unconfirmed(self) -> dict[str, int]:
        """Give up the calls still without an answer (at close): their events per game."""
        left: PerGame[str] = PerGame()
        for calls in self._unconfirmed.values():
            for c in calls:
                left[c.game] += c.events
        self._unconfirmed = {}
        return dict(left)

    def write(self, queues: Mapping[str, Sequence[bytes]], pending: Pending) -> WriteResult:
        calls = plan_calls(queues, pending, self._cap_for)
        if self._unconfirmed:
            calls = [c for cs in self._unconfirmed.values() for c in cs] + calls
        shards = [self._schema.for_game(c.game) for c in calls]
        # Offered as the marker of a shard that has none; new each round, so that a shard
        # reset since the last round never gets back the marker it had.
        identity = uuid.uuid4().hex
        replies: list[Stored | BackendError | None] = [None] * len(calls)
        if self._unconfirmed or self._full:
            first, later = self._plan(calls, shards)
        else:  # the usual round: every call at once
            first, later = list(range(len(calls))), []
            if len(calls) > WRITES_PER_WRITER:
                first = self._window(calls, shards, first)
        self._send(calls, shards, first, identity, replies)
        if later:
            answered = self._answered(shards, first, replies)
            self._send(
                calls,
                shards,
                self._window(calls, shards, [i for i in later if shards[i].shard in answered]),
                identity,
                replies,
            )
        self._full = {
            keys.shard
            for keys, reply in zip(shards, replies, strict=True)
            if isinstance(reply, BackendFull)
        }
        result = self._settle(calls, shards, replies)
        for keys, reply in zip(shards, replies, strict=True):
            if isinstance(reply, Stored):
                known = self._markers.setdefault(keys.shard, reply.marker)
                if known != reply.marker:
                    self._markers[keys.shard] = reply.marker
                    result.reset_shards.append(keys.shard)
        if result.reset_shards:
            self._on_reset(result.reset_shards)
        return result

    def _plan(self, calls: list[Call], shards: list[ShardKeys]) -> tuple[list[int], list[int]]:
        """Which calls go first, and which only if their shard's first ones are answered.

        A shard with unconfirmed calls sends those first (only the oldest if Redis refused
        its last write for lack of memory), its new calls later.  Otherwise a shard that was
        full sends one call first, a probe (a full Redis reads every command whole before
        refusing it, so it is not sent every buffered event at every retry), and the rest
        later; any other shard sends all its calls at once."""
        first: list[int] = []
        later: list[int] = []
        started: set[int] = set()
        for i, (c, keys) in enumerate(zip(calls, shards, strict=True)):
            shard = keys.shard
            if shard in self._unconfirmed:
                lead = c.seq != 0 and (shard not in self._full or shard not in started)
            else:
                lead = shard not in self._full or shard not in started
            (first if lead else later).append(i)
            if lead:
                started.add(shard)
        return self._window(calls, shards, first), later

    def _window(self, calls: list[Call], shards: list[ShardKeys], which: list[int]) -> list[int]:
        """``which``, without the new calls that would put a shard's writes without an answer
        at ``WRITES_PER_WRITER`` or more (they wait for a later round)."""
        room: dict[int, int] = {}
        out = []
        for i in which:
            shard = shards[i].shard
            if calls[i].seq == 0:
                if shard not in room:
                    room[shard] = WRITES_PER_WRITER - (
                        self._next.get(shard, 1) - self._lowest(shard)
                    )
                if room[shard] <= 0:
                    continue
                room[shard] -= 1
            out.append(i)
        return out

    def _lowest(self, shard: int) -> int:
        """The shard's lowest sequence number without an answer (its next if none)."""
        unsure = self._unconfirmed.get(shard)
        return unsure[0].seq if unsure else self._next.get(shard, 1)

    @staticmethod
    def _answered(
        shards: list[ShardKeys], sent: list[int], replies: list[Stored | BackendError | None]
    ) -> set[int]:
        """Shards every one of whose calls in ``sent`` was answered."""
        failed = {shards[i].shard for i in sent if not isinstance(replies[i], Stored)}
        return {shards[i].shard for i in sent} - failed

    def _send(
        self,
        calls: list[Call],
        shards: list[ShardKeys],
        which: Sequence[int],
        identity: str,
        replies: list[Stored | BackendError | None],
    ) -> None:
        if not which:
            return
        low: dict[int, int] = {}
        with self._lock:  # sync mode: threads write at once
            for i in which:  # numbered as they go out, so that each shard's numbers ascend
                shard = shards[i].shard
                seq = calls[i].seq
                if seq == 0:
                    seq = calls[i].seq = self._next.get(shard, 1)
                    self._next[shard] = seq + 1
                sending = self._sending.get(shard)
                if sending is None:
                    sending = self._sending[shard] = set()
                sending.add(seq)
            for shard in {shards[i].shard for i in which}:
                unsure = self._unconfirmed.get(shard)
                low[shard] = min(self._sending[shard])
                if unsure:  # in number order
                    low[shard] = min(low[shard], unsure[0].seq)
        try:
            self._call(calls, shards, which, identity, replies, low)
        finally:
            with self._lock:
                for i in which:
                    self._sending[shards[i].shard].discard(calls[i].seq)

    def _call(
        self,
        calls: list[Call],
        shards: list[ShardKeys],
        which: Sequence[int],
        identity: str,
        replies: list[Stored | BackendError | None],
        low: dict[int, int],
    ) -> None:
        requests = []
        for i in which:
            c, keys = calls[i], shards[i]
            requests.append(
                Collect(
                    keys,
                    c.game,
                    c.entries,
                    self._cap_for(c.game),
                    self._ttl_for(c.game),
                    c.pre_evicted,
                    c.dropped_buffer_full,
                    c.dropped_too_large,
                    identity,
                    self.writer_id,
                    c.seq,
                    low[keys.shard],
                    self._window_for(c.game) * 1000,
                )
            )
        got: Sequence[Stored | BackendError]
        try:
            got = self.store.call_many(requests)
        except BackendError as exc:  # the whole bulk failed: each call may or may not have run
            got = [exc] * len(requests)
        for i, reply in zip(which, got, strict=True):
            replies[i] = reply

    def _settle(
        self,
        calls: list[Call],
        shards: list[ShardKeys],
        replies: list[Stored | BackendError | None],
    ) -> WriteResult:
        """Sum what was stored; keep the calls whose outcome is unknown; collect what surely
        was not stored (refused, or held back: None) so it can be put back and sent again."""
        was_unsure = (
            {id(c) for cs in self._unconfirmed.values() for c in cs} if self._unconfirmed else set()
        )
        unsure: dict[int, list[Call]] = {}
        result = WriteResult()
        for c, keys, reply in zip(calls, shards, replies, strict=True):
            if isinstance(reply, Stored):
                result.stored += len(c.entries) + c.pre_evicted
                result.evicted += reply.evicted
                result.merged += reply.merged
                result.repeats += reply.repeat
                continue
            if isinstance(reply, BackendFull):
                result.refused_oom += c.events
            if isinstance(reply, BackendUnreplicated):
                result.unreplicated += len(c.entries)
            if reply is not None:  # None is held back
                result.error = reply
            if id(c) in was_unsure or (
                self._keep and isinstance(reply, BackendUnavailable) and c.seq
            ):
                unsure.setdefault(keys.shard, []).append(c)
            else:
                fail(result, c)
        self._unconfirmed = unsure
        if unsure:
            for calls_of_shard in unsure.values():
                calls_of_shard.sort(key=lambda c: c.seq)
            result.unconfirmed_writes = self.unconfirmed_writes
            result.unconfirmed_events = self.unconfirmed_events
        return result


def fail(result: WriteResult, c: Call) -> None:
    """Put a call that surely was not stored among the result's failed events and counts."""
    failed = result.failed.setdefault(c.game, [])
    failed += c.thinned
    failed += c.entries
    failed_pending = result.failed_pending
    failed_pending[Counter.EVICTED][c.game] += c.pre_evicted - len(c.thinned)
    failed_pending[Counter.DROPPED_BUFFER_FULL][c.game] += c.dropped_buffer_full
    failed_pending[Counter.DROPPED_TOO_LARGE][c.game] += c.dropped_too_large
