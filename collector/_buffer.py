"""The bounded in-process buffer between ``collect()`` and the flusher thread."""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Iterable

Item = tuple[str, bytes]  # (game, stored entry)

# Counts per game that still have to reach the game's shard in Redis.
EVICTED = "evicted"          # thinned out before sending: more than the cap were waiting
DROPPED_FULL = "dropped_full"  # pushed out of this buffer by newer events
TOO_LARGE = "too_large"      # refused by collect() for their size
Pending = dict[str, Counter[str]]


def no_pending() -> Pending:
    return {EVICTED: Counter(), DROPPED_FULL: Counter(), TOO_LARGE: Counter()}


class EventBuffer:
    """A FIFO of at most ``limit`` events; when full the oldest is dropped and counted.

    Drops are counted per game so they can be reported to that game's shard in Redis.
    The lock is held only for a few list operations, so ``collect()`` never waits long.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._items: deque[Item] = deque()
        self._pending = no_pending()
        self.accepted_total = 0
        self.dropped_total = 0
        self.closed = False
        # Bumped by every append and note; ``taken_seq`` is its value at the latest take, so a
        # take that finds nothing proves everything up to ``taken_seq`` has been handed over.
        self.seq = 0
        self.taken_seq = 0

    def __len__(self) -> int:
        return len(self._items)

    def append(self, game: str, entry: bytes) -> int:
        """Add one event; return the number now waiting, or -1 if the buffer is closed."""
        with self._lock:
            if self.closed:
                return -1
            items = self._items
            if len(items) >= self.limit:
                self._pending[DROPPED_FULL][items.popleft()[0]] += 1
                self.dropped_total += 1
            items.append((game, entry))
            self.accepted_total += 1
            self.seq += 1
            return len(items)

    def note(self, kind: str, game: str, count: int = 1) -> None:
        with self._lock:
            self._pending[kind][game] += count
            self.seq += 1

    def take(self, most: int) -> tuple[list[Item], Pending]:
        """Remove up to ``most`` of the oldest events and the drop counts not yet reported."""
        with self._lock:
            items = self._items
            if len(items) <= most:
                taken = list(items)
                items.clear()
            else:
                taken = [items.popleft() for _ in range(most)]
            pending, self._pending = self._pending, no_pending()
            self.taken_seq = self.seq
            return taken, pending

    def put_back(self, items: Iterable[Item], pending: Pending) -> None:
        """Return events that could not be stored, ahead of newer ones, within the bound."""
        with self._lock:
            for kind, counts in pending.items():
                self._pending[kind].update(counts)
            self._items.extendleft(reversed(list(items)))
            excess = len(self._items) - self.limit
            for _ in range(max(0, excess)):
                self._pending[DROPPED_FULL][self._items.popleft()[0]] += 1
                self.dropped_total += 1

    def close(self) -> int:
        """Refuse further events; drop and return the number still waiting."""
        with self._lock:
            self.closed = True
            count = len(self._items)
            self._items.clear()
            return count

    def reset_after_fork(self) -> None:
        """In a forked child: the parent still owns and will send what was buffered."""
        self._lock = threading.Lock()
        self._items = deque()
        self._pending = no_pending()
        self.accepted_total = 0
        self.dropped_total = 0
        self.seq = 0
        self.taken_seq = 0
