"""A clock the test sets: the code under test reads it by calling it (``clock()``), the test
moves it by setting ``now``."""

from __future__ import annotations


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def at_ms(self, ms: int) -> None:
        self.now = ms / 1000 + 0.0005  # inside the millisecond, safe from rounding
