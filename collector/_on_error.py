"""The ``on_error`` callback: how the SDK tells its host about failed writes and lost events.

``on_error(error, count)`` gets a ``BackendError`` (a write to Redis failed; ``count`` events
went back to the buffer to be tried again) or an ``EventsDropped`` (``count`` events are
lost).  It is never called from ``collect()``'s path in the default background mode: the
flusher thread calls it, for the drops ``collect()`` noted too; ``close()`` calls it for the
events it leaves behind.  Sync and disabled modes have no thread, so there ``collect()``
calls it itself when it refuses an event for its size.  A callback that raises is logged
(once a minute at most) and otherwise ignored: it never stops the flusher.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from collector._exceptions import BackendError, EventsDropped, TelemetryError
from collector.counters import Counter
from collector.logs import RateLimitedLog

OnError = Callable[[TelemetryError, int], object]


def check_callback(callback: object) -> OnError | None:
    """``callback`` if it can be called (or is None); ``TypeError`` naming it otherwise."""
    if callback is not None and not callable(callback):
        raise TypeError(
            f"on_error must be a callable taking (error, count) or None, "
            f"got {type(callback).__name__}"
        )
    return callback


class ErrorReport:
    """Calls the host's ``on_error`` (``callback``, replaceable at any time) safely."""

    def __init__(self, callback: OnError | None, ratelog: RateLimitedLog) -> None:
        self.callback = callback
        self.ratelog = ratelog  # the rate-limited log of the collector it reports for

    def __call__(self, error: TelemetryError, count: int) -> None:
        callback = self.callback
        if callback is None or count <= 0:
            return
        try:
            callback(error, count)
        except Exception:  # the host's bug must not stop the flusher or close()
            self.ratelog.log(
                logging.ERROR,
                "on_error",
                "the on_error callback raised (ignored) while told: %s",
                error,
                exc_info=True,
            )

    def failed_write(self, exc: Exception, count: int, reason: str) -> None:
        """A write of ``count`` events failed with ``exc``: hand on a ``BackendError``."""
        if self.callback is None:
            return
        if isinstance(exc, BackendError):
            error = exc
        else:  # a bug or a foreign store's error: still a BackendError to the host
            error = BackendError(f"could not store {count} events: {reason}")
            error.__cause__ = exc
        self(error, count)

    def drops(self, drops: Mapping[Counter, Mapping[str, int]]) -> None:
        """One ``EventsDropped`` per kind of loss in ``drops`` (counts per game)."""
        if self.callback is None:
            return
        for kind, games in drops.items():
            count = sum(games.values())
            if count:
                self(EventsDropped(kind, count, games), count)
