"""Store buffered events in Redis: many events of one game per script call, many calls per write."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter as PerGame
from collections.abc import Callable, Mapping, Sequence
from enum import Enum

from collector._buffer import Pending
from collector._calls import Call, WriteResult, add_stored, fail, fail_counts, plan_calls
from collector._constants import WRITES_PER_WRITER
from collector._exceptions import (
    BackendError,
    BackendFull,
    BackendUnconfirmed,
    BackendUnreplicated,
    WriteRefused,
)
from collector.store import Collect, ShardKeys, Store, Stored

__all__ = ["Call", "WriteResult", "Writer", "plan_calls"]


class Writer:
    """Runs planned calls through the store's bulk path: on a single server one batch of
    writes, on a cluster one per node.

    Written once: every call carries this writer's id, a sequence number counted per shard
    and a checksum of its content, and the shard remembers the writes it applied
    (``lua/collect.lua``).  A call whose outcome is unknown (``BackendUnconfirmed``: no reply,
    or too few replicas confirmed it) is kept as it is, ``unconfirmed``, and sent again with
    the same id and number in later rounds, where the shard answers a repeat without storing
    anything.  It stays unconfirmed until it is answered or the script refuses it for good
    (``WriteRefused``): a refusal before the script ran (OOM, READONLY, NOREPLICAS) says
    nothing of the copy whose reply was lost.  While a shard has such calls, they are sent
    first and alone: the shard's new calls wait (in the buffer) until every one of them has
    an answer, so no more than ``WRITES_PER_WRITER`` of this writer's writes are ever
    without an answer in one shard, and the shard can let go of the memory of the answered
    ones.

    The id is new when the process id changes (a fork the ``os.register_at_fork`` hook did
    not see: one in C code) and when a shard refuses a write as a repeat with other content
    (another process uses the id: a cloned machine or container); the calls already sent
    keep theirs.  ``write_now`` is sync mode's write: it sends a call whose outcome is
    unknown again for a bounded time, so that its caller learns whether it was stored.
    """

    def __init__(
        self,
        store: Store,
        cap_for: Callable[[str], int],
        ttl_for: Callable[[str], int],
        on_reset: Callable[[list[int]], None] = lambda shards: None,
        window_for: Callable[[str], int] = lambda game: 0,
        on_new_id: Callable[[str, str], None] = lambda writer, why: None,
    ) -> None:
        self.store = store
        self._schema = store.schema
        self._cap_for = cap_for
        self._ttl_for = ttl_for
        self._window_for = window_for  # the game's dedup window in seconds
        self._markers: dict[int, str] = {}  # shard -> the marker it had at the last write
        self._on_reset = on_reset
        self._on_new_id = on_new_id
        self._full: set[int] = set()  # shards whose last write Redis refused for lack of memory
        self._lock = threading.Lock()
        self.writer_id = new_writer_id()
        self._pid = os.getpid()
        self._next: dict[int, int] = {}  # shard -> the id's next sequence number there
        # (writer id, shard) -> sequence numbers on their way now (each is sent by one sender
        # at a time): with the unconfirmed ones, the lowest is the lowest without an answer.
        self._sending: dict[tuple[str, int], set[int]] = {}
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

    # -- the process's identity --------------------------------------------------------------

    def _check_pid(self) -> None:
        """A new id in a child forked without Python's hooks (a fork in C code): the child
        would otherwise number its writes as the parent does, under the parent's id.  The
        parent's unconfirmed calls are the parent's to send again."""
        pid = os.getpid()
        if pid == self._pid:
            return
        with self._lock:
            self._pid = pid
            self._unconfirmed = {}
            self._full = set()
            self._sending = {}
            self._new_id("the process id changed (a fork the SDK's fork hook did not see)")

    def _new_id(self, why: str) -> None:
        """Take a new writer id (under the lock), numbered from 1 again in every shard."""
        self.writer_id = new_writer_id()
        self._next = {}
        self._on_new_id(self.writer_id, why)

    # -- background mode -------------------------------------------------------------------

    def write(self, queues: Mapping[str, Sequence[bytes]], pending: Pending) -> WriteResult:
        self._check_pid()
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
        self._note_markers(shards, replies, result)
        return result

    def _note_markers(
        self,
        shards: list[ShardKeys],
        replies: Sequence[Stored | BackendError | None],
        result: WriteResult,
    ) -> None:
        for keys, reply in zip(shards, replies, strict=True):
            if isinstance(reply, Stored):
                known = self._markers.setdefault(keys.shard, reply.marker)
                if known != reply.marker:
                    self._markers[keys.shard] = reply.marker
                    result.reset_shards.append(keys.shard)
        if result.reset_shards:
            self._on_reset(result.reset_shards)

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
        """The shard's lowest sequence number of the current id without an answer (its next
        if none)."""
        mine = [c.seq for c in self._unconfirmed.get(shard, ()) if c.writer == self.writer_id]
        return min(mine) if mine else self._next.get(shard, 1)

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
        with self._lock:  # sync mode: threads write at once
            for i in which:  # numbered as they go out, so that each shard's numbers ascend
                c, shard = calls[i], shards[i].shard
                if c.seq == 0:
                    c.writer = self.writer_id
                    c.seq = self._next.get(shard, 1)
                    self._next[shard] = c.seq + 1
                self._sending.setdefault((c.writer, shard), set()).add(c.seq)
            low = {(calls[i].writer, shards[i].shard): 0 for i in which}
            for writer, shard in low:
                unsure = [c.seq for c in self._unconfirmed.get(shard, ()) if c.writer == writer]
                low[writer, shard] = min(self._sending[writer, shard].union(unsure))
        try:
            self._call(calls, shards, which, identity, replies, low)
        finally:
            with self._lock:
                for i in which:
                    key = (calls[i].writer, shards[i].shard)
                    sending = self._sending.get(key)
                    if sending is not None:
                        sending.discard(calls[i].seq)
                        if not sending:
                            del self._sending[key]

    def _call(
        self,
        calls: list[Call],
        shards: list[ShardKeys],
        which: Sequence[int],
        identity: str,
        replies: list[Stored | BackendError | None],
        low: dict[tuple[str, int], int],
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
                    c.writer,
                    c.seq,
                    low[c.writer, keys.shard],
                    self._window_for(c.game) * 1000,
                )
            )
        got: Sequence[Stored | BackendError]
        try:
            got = self.store.call_many(requests)
        except BackendError as exc:  # the whole bulk failed: each call may or may not have run
            unknown = BackendUnconfirmed(str(exc))
            unknown.__cause__ = exc
            got = [unknown] * len(requests)
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
        unsure: dict[int, list[Call]] = {}
        result = WriteResult()
        for c, keys, reply in zip(calls, shards, replies, strict=True):
            if isinstance(reply, Stored):
                add_stored(result, c, reply)
            elif c.maybe_ran if reply is None else self._outcome(result, c, reply).unknown:
                unsure.setdefault(keys.shard, []).append(c)  # held back, or sent: unknown
            else:  # refused (for good, or before it ran), never sent or held back: not stored
                fail(result, c)
        self._unconfirmed = unsure
        if unsure:
            for calls_of_shard in unsure.values():
                calls_of_shard.sort(key=lambda c: c.seq)
            result.unconfirmed_writes = self.unconfirmed_writes
            result.unconfirmed_events = self.unconfirmed_events
        return result

    def _outcome(self, result: WriteResult, c: Call, reply: BackendError) -> Outcome:
        """Count a reply that is not an answer, and say what it means for the call."""
        result.error = reply
        if isinstance(reply, WriteRefused):  # for good: this write is never applied
            result.refused_writes += 1
            result.refused_unconfirmed += c.maybe_ran
            if reply.conflict:  # another process uses the id: take a new one (once)
                result.refused_repeats += 1
                with self._lock:
                    if c.writer == self.writer_id:
                        self._new_id("a shard remembers its writer id with other writes")
                return Outcome.CONFLICT
            return Outcome.REFUSED
        if isinstance(reply, BackendFull):
            result.refused_oom += c.events
        if isinstance(reply, BackendUnreplicated):
            result.unreplicated += len(c.entries)
        if isinstance(reply, BackendUnconfirmed):
            c.maybe_ran = True
        # A refusal before the script ran says nothing of an earlier copy whose reply was lost.
        return Outcome.UNKNOWN if c.maybe_ran else Outcome.NOT_STORED

    # -- sync mode ---------------------------------------------------------------------------

    def write_now(
        self,
        game: str,
        entries: list[bytes],
        pending: Pending,
        patience: float,
        stop: threading.Event,
        longest_wait: float,
    ) -> WriteResult:
        """Store events of one game now (with the drop counts of ``pending``).  A call whose outcome
        is unknown is sent again as it is, with backoff up to ``longest_wait`` seconds, for
        up to ``patience`` seconds (or until ``stop`` is set), until it is answered or
        refused; one refused as a repeat with other content goes again as a new write, under
        a new id.  ``result.error`` is set when a call of the events was not answered: a
        ``BackendUnconfirmed`` if it may have been stored, any other error if it surely was
        not (``result.stored`` says how many were, when they took more than one call).
        Drop counts whose call was not answered are in ``failed_pending``."""
        self._check_pid()
        calls = plan_calls({game: entries}, pending, self._cap_for)
        shards = [self._schema.for_game(c.game) for c in calls]
        identity = uuid.uuid4().hex
        replies: list[Stored | BackendError | None] = [None] * len(calls)
        result = WriteResult()
        delay = min(SYNC_FIRST_WAIT, longest_wait)
        deadline = None
        todo = list(range(len(calls)))
        while todo:
            self._send(calls, shards, todo, identity, replies)
            todo = [i for i in todo if self._again(result, calls[i], replies[i])]
            if not todo:  # the usual case: every call answered at once
                break
            if deadline is None:
                deadline = time.monotonic() + patience
            if time.monotonic() + delay > deadline or stop.is_set():
                break
            stop.wait(delay)
            delay = min(delay * 2, longest_wait)
        result.error = None
        for c, reply in zip(calls, replies, strict=True):
            if isinstance(reply, Stored):
                add_stored(result, c, reply)
                continue
            fail_counts(result, c)
            if c.game == game and result.error is None:  # a call of the events themselves
                result.error = reply if c.seq else _out_of_time()
        self._note_markers(shards, replies, result)
        return result

    def _again(self, result: WriteResult, c: Call, reply: Stored | BackendError | None) -> bool:
        """Whether sync mode sends a call again: its outcome is unknown (as it is), or it was
        refused as a repeat with other content (never applied: as a new write)."""
        if not isinstance(reply, BackendError):
            return False
        outcome = self._outcome(result, c, reply)
        if outcome is Outcome.CONFLICT:
            c.writer, c.seq, c.maybe_ran = "", 0, False
        return outcome in (Outcome.CONFLICT, Outcome.UNKNOWN)


class Outcome(Enum):
    """What a reply that is not an answer means for its call."""

    UNKNOWN = "may have run: send it again as it is"
    NOT_STORED = "refused before it ran, or never sent"
    REFUSED = "refused for good by the script"
    CONFLICT = "refused as a repeat with other content: another process uses the writer id"

    @property
    def unknown(self) -> bool:
        return self is Outcome.UNKNOWN


def _out_of_time() -> WriteRefused:
    return WriteRefused(
        "refused as a repeat with other content (another process uses the writer id), and "
        "the time to send it again under a new id ran out: nothing stored",
        conflict=True,
    )


# Sync mode: the first wait before a call whose outcome is unknown goes again (it doubles).
SYNC_FIRST_WAIT = 0.02


def new_writer_id() -> str:
    """16 random hex digits: a writer id."""
    return uuid.uuid4().hex[:16]
