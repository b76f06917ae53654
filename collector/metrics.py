"""Counting through the shared vocabulary (``collector.counters``).

``Tally`` is the in-process count: thread-safe, keyed by ``Counter`` only, so a name outside
the vocabulary cannot be counted.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from collector.counters import Counter


class Tally:
    """Counters of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[Counter, int] = {}

    def count(self, counter: Counter, amount: int = 1) -> None:
        if type(counter) is not Counter:
            raise TypeError(f"not a counter of the vocabulary: {counter!r}")
        with self._lock:
            self._counts[counter] = self._counts.get(counter, 0) + amount

    def add(self, amounts: Mapping[Counter, int]) -> None:
        if any(type(counter) is not Counter for counter in amounts):
            raise TypeError(f"not counters of the vocabulary: {list(amounts)!r}")
        with self._lock:
            for counter, amount in amounts.items():
                self._counts[counter] = self._counts.get(counter, 0) + amount

    def get(self, counter: Counter) -> int:
        with self._lock:
            return self._counts.get(counter, 0)

    def snapshot(self) -> dict[str, int]:
        """Every counter counted so far, by name."""
        with self._lock:
            return {str(c): n for c, n in self._counts.items()}

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
