"""The bounded in-process buffer between ``collect()`` and the flusher thread."""

from __future__ import annotations

import threading
from collections import Counter as PerGame
from collections import deque
from collections.abc import Mapping, Sequence
from itertools import repeat

from collector.counters import Counter

# Waiting entries by game, each game's oldest first.
Queues = dict[str, deque[bytes]]

# Counts per game that still have to reach the game's shard in Redis: events thinned out
# before sending (more than the cap were waiting), pushed out of this buffer by newer events,
# or refused by collect() for their size.
PENDING_KINDS = (Counter.EVICTED, Counter.DROPPED_BUFFER_FULL, Counter.DROPPED_TOO_LARGE)
Pending = dict[Counter, PerGame[str]]


def no_pending() -> Pending:
    return {kind: PerGame() for kind in PENDING_KINDS}


# Events lost per game that ``on_error`` has not been told of yet, by the counter they were
# counted in (dropped_buffer_full, dropped_too_large).  Apart from ``Pending``: a failed write
# puts its pending counts back to be sent again, but they must be reported only once.
Drops = dict[Counter, PerGame[str]]
DROP_KINDS = (Counter.DROPPED_BUFFER_FULL, Counter.DROPPED_TOO_LARGE)


def no_drops() -> Drops:
    return {kind: PerGame() for kind in DROP_KINDS}


class EventBuffer:
    """At most ``limit`` events and ``max_bytes`` bytes of entries, kept per game; when either
    is passed the oldest are dropped and counted (``dropped_buffer_full``).

    Events wait in one queue per game, so the flusher gets them already grouped the way they
    are written (one script call per game); ``_order`` holds the game of every waiting event,
    oldest first, so "drop the oldest" means the oldest of all games.  Drops are counted per
    game so they can be reported to that game's shard in Redis.  The lock is held only for a
    few container operations, so ``collect()`` never waits long.
    """

    def __init__(self, limit: int, max_bytes: int = 0) -> None:
        self.limit = limit
        # Bytes of the waiting entries (their JSON and time prefix; Python adds about 100 per
        # entry): a few large events must not take a game server's memory during an outage.
        self.max_bytes = max_bytes if max_bytes > 0 else 1 << 62
        self.bytes = 0
        self._lock = threading.Lock()
        self._queues: Queues = {}
        self._order: deque[str] = deque()
        self._pending = no_pending()
        self._drops = no_drops()
        self.unreported = 0  # events in ``_drops``: read without the lock, as a hint
        self._notes = 0
        self.dropped_total = 0
        self.closed = False
        # Events ``take()`` handed to the flusher that are not back (``put_back``) nor
        # settled (``settle``): being written, or kept by the writer until a write whose
        # outcome is unknown is answered.  ``append_all`` counts them against the bound, so a
        # batch it takes is never pushed out when they come back.  Their bytes are known at
        # the take and estimated (the average entry) once only some of them are still out.
        self.outside = 0
        self.outside_bytes = 0
        # Bumped by every append and note; ``taken_seq`` is its value at the latest take, so a
        # take that finds nothing proves everything up to ``taken_seq`` has been handed over.
        self.seq = 0
        self.taken_seq = 0

    def __len__(self) -> int:
        return len(self._order)

    @property
    def accepted_total(self) -> int:
        with self._lock:
            return self.seq - self._notes

    def append(self, game: str, entry: bytes) -> int:
        """Add one event; return the number now waiting, or -1 if the buffer is closed."""
        with self._lock:
            if self.closed:
                return -1
            order = self._order
            if len(order) >= self.limit:
                self._drop_oldest()
            self.bytes += len(entry)
            while self.bytes > self.max_bytes and order:
                self._drop_oldest()
            queue = self._queues.get(game)
            if queue is None:
                queue = self._queues[game] = deque()
            queue.append(entry)
            order.append(game)
            self.seq += 1
            return len(order)

    def append_all(self, game: str, entries: Sequence[bytes]) -> int:
        """Add all of ``entries`` or none: the number now waiting; 0 when they do not all fit
        beside the events waiting and those ``outside`` (nothing is dropped to make room);
        -1 once the buffer is closed."""
        count = len(entries)
        size = sum(map(len, entries))
        with self._lock:
            if self.closed:
                return -1
            order = self._order
            if (
                len(order) + self.outside + count > self.limit
                or self.bytes + self.outside_bytes + size > self.max_bytes
            ):
                return 0
            queue = self._queues.get(game)
            if queue is None:
                queue = self._queues[game] = deque()
            queue.extend(entries)
            order.extend(repeat(game, count))
            self.bytes += size
            self.seq += count
            return len(order)

    def note(self, kind: Counter, game: str, count: int = 1) -> None:
        """Count events of ``game`` that ``collect()`` refused (``kind``), for Redis and for
        ``on_error``."""
        with self._lock:
            self._pending[kind][game] += count
            if kind in self._drops:
                self._drops[kind][game] += count
                self.unreported += count
            self._notes += 1
            self.seq += 1

    def take_drops(self) -> Drops:
        """Remove and return the events lost since the last call, per kind and game."""
        with self._lock:
            drops, self._drops = self._drops, no_drops()
            self.unreported = 0
        return drops

    def take(self) -> tuple[Queues, Pending]:
        """Remove every waiting event and the drop counts not yet reported."""
        with self._lock:
            queues, self._queues = self._queues, {}
            self.outside += len(self._order)
            self.outside_bytes += self.bytes
            self._order = deque()
            self.bytes = 0
            pending, self._pending = self._pending, no_pending()
            self.taken_seq = self.seq
        return {game: queue for game, queue in queues.items() if queue}, pending

    def take_pending(self) -> Pending:
        """Remove only the drop counts not yet reported (sync mode sends them with an event)."""
        with self._lock:
            pending, self._pending = self._pending, no_pending()
        return pending

    def put_back(self, failed: Mapping[str, Sequence[bytes]], pending: Pending) -> None:
        """Return events that could not be stored, ahead of newer ones, within the bound.

        They go back in front of everything collected since, game after game; among
        themselves only each game's order is kept.
        """
        with self._lock:
            for kind, counts in pending.items():
                self._pending[kind].update(counts)
            for game, entries in failed.items():
                if not entries:
                    continue
                queue = self._queues.get(game)
                if queue is None:
                    queue = self._queues[game] = deque()
                queue.extendleft(reversed(entries))
                self._order.extendleft([game] * len(entries))
                size = sum(map(len, entries))
                self.bytes += size
                self.outside = max(0, self.outside - len(entries))
                self.outside_bytes = max(0, self.outside_bytes - size)
            while self._order and (len(self._order) > self.limit or self.bytes > self.max_bytes):
                self._drop_oldest()

    def settle(self, outside: int) -> None:
        """The flusher's round is over: of the events it took, ``outside`` are still kept
        by the writer (writes whose outcome is unknown); the rest are stored or put back."""
        with self._lock:
            if outside <= 0 or not self.outside:
                self.outside_bytes = 0
            else:
                self.outside_bytes = self.outside_bytes * min(outside, self.outside) // self.outside
            self.outside = max(0, outside)

    def _drop_oldest(self) -> None:
        game = self._order.popleft()
        self.bytes -= len(self._queues[game].popleft())
        self._pending[Counter.DROPPED_BUFFER_FULL][game] += 1
        self._drops[Counter.DROPPED_BUFFER_FULL][game] += 1
        self.unreported += 1
        self.dropped_total += 1

    def close(self) -> int:
        """Refuse further events; drop and return the number still waiting."""
        return sum(self.close_by_game().values())

    def close_by_game(self) -> dict[str, int]:
        """Refuse further events; drop the ones still waiting and return their number per
        game."""
        with self._lock:
            self.closed = True
            self.outside = self.outside_bytes = 0
            left = {game: len(queue) for game, queue in self._queues.items() if queue}
            self._queues = {}
            self._order = deque()
            self.bytes = 0
            return left

    def reset_after_fork(self) -> None:
        """In a forked child: the parent still owns and will send what was buffered."""
        self._lock = threading.Lock()
        self._queues = {}
        self._order = deque()
        self.bytes = 0
        self.outside = self.outside_bytes = 0
        self._pending = no_pending()
        self._drops = no_drops()
        self.unreported = 0
        self._notes = 0
        self.dropped_total = 0
        self.seq = 0
        self.taken_seq = 0
