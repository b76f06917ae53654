"""Logging helpers shared by the SDK and the reporter.

``RateLimitedLog`` stays quiet under repetition: one line per key per interval, with a count
of what it held back.
"""

from __future__ import annotations

import logging
import threading
import time


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, interval: float = 60.0) -> None:
        self._logger = logger
        self._interval = interval
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def log(self, level: int, key: str, msg: str, *args: object, exc_info: bool = False
            ) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._interval:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return
            self._last[key] = now
            hidden = self._suppressed.pop(key, 0)
        if hidden:
            msg += " (%d similar messages suppressed)"
            args = (*args, hidden)
        self._logger.log(level, msg, *args, exc_info=exc_info)

    def reset(self, key: str) -> None:
        with self._lock:
            self._last.pop(key, None)
            self._suppressed.pop(key, None)
