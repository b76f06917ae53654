"""Errors raised by the collector package (the SDK and its store layer).

Every error derives from one root, so callers can catch the whole family::

    TelemetryError
    ├── ConfigError             the config file, an environment override or a keyword
    │                           argument is wrong
    ├── BackendError            Redis failed
    │   ├── BackendUnavailable  Redis did not answer: refused, reset or timed-out connection,
    │   │   │                   cluster down, server loading
    │   │   └── BackendUnconfirmed  the call may have run: its reply was lost after it was
    │   │       │               sent (or a resend after a lost reply was refused)
    │   │       └── BackendUnreplicated  the write ran, but fewer replicas than
    │   │                       [redis] wait_for_replicas confirmed it in time
    │   └── BackendRefused      Redis answered with an error: read-only replica, a script
    │       │                   error, a wrong key type
    │       ├── BackendFull     Redis is at maxmemory and refuses writes (an OOM reply);
    │       │                   the SDK keeps the events and tries again
    │       └── WriteRefused    the script refused the write itself, for good: the same
    │                           write is never applied (another process uses the writer
    │                           id, or an argument is out of range)
    ├── InvalidEvent            ``collect_json()``: an event breaks the event rules (also a
    │                           ``ValueError``); ``index`` names the first one
    ├── BufferFull              ``collect_json()``: no room in the buffer for all the events;
    │                           nothing was taken
    └── EventsDropped           the SDK dropped or refused events (never raised: handed to
                                ``on_error``)

In background mode the SDK never raises ``BackendError`` into game code (it counts, logs and
retries, and hands it to the ``on_error`` callback if one is set); sync-mode ``collect()``
and the store layer (``collector.store``) raise it.  ``EventsDropped`` is never raised by the
package: it only tells ``on_error`` which events were lost, why, and of which games.
redis-py's own exceptions never leave the store layer: they are the ``__cause__``.

Programmer errors at the call site stay built-in: a game name that is not a str is a
``TypeError``, a str that is not a valid name a ``ValueError``, and an event that is not a
JSON-serialisable mapping a ``TypeError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from collector.counters import Counter


class TelemetryError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigError(TelemetryError):
    """A setting is unknown, of the wrong type or out of range; the message names it."""


class BackendError(TelemetryError):
    """Redis failed; the message names the server (password masked) and what it said."""


class BackendUnavailable(BackendError):
    """Redis did not answer; trying again later may work."""


class BackendUnconfirmed(BackendUnavailable):
    """A call whose outcome is unknown: it was sent, and its reply was lost (a timeout, a
    broken connection), or a resend after such a loss was refused before it ran.  It may have
    run."""


class BackendUnreplicated(BackendUnconfirmed):
    """A write ran on the primary but too few replicas confirmed it (``WAIT``) in time: a
    failover now could undo it.  ``result`` is what the call returned on the primary."""

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result


class BackendRefused(BackendError):
    """Redis answered the command with an error."""


class BackendFull(BackendRefused):
    """Redis refused a write because it is at ``maxmemory`` (an ``OOM`` reply, policy
    ``noeviction``).  Nothing was written; the same write works once the reporters have
    drained some of what Redis holds, so the SDK keeps the events and tries again."""


class WriteRefused(BackendRefused):
    """A script refused a write itself, for good: the same write would be refused again, so
    it is never applied under its writer id and number.  ``conflict``: the shard remembers
    that number of that writer id with other content (or has let go of the numbers below
    it), so another process uses the same writer id; otherwise an argument is out of range
    (the message names it)."""

    def __init__(self, message: str, conflict: bool = False) -> None:
        super().__init__(message)
        self.conflict = conflict


class InvalidEvent(TelemetryError, ValueError):
    """``Collector.collect_json()`` refused its events: the one at ``index`` (0-based) breaks
    the event rules for ``reason``; none of them was taken."""

    def __init__(self, game: str, index: int, reason: str) -> None:
        super().__init__(f"event {index} of game {game!r}: {reason}")
        self.game = game
        self.index = index
        self.reason = reason

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.game, self.index, self.reason)


class BufferFull(TelemetryError):
    """``Collector.collect_json()`` found no room in the in-process buffer for all its events
    beside those waiting and those being written: none was taken and none dropped.  Room comes
    back as the flusher stores what waits; while Redis is unreachable it does not."""


class EventsDropped(TelemetryError):
    """Events the SDK dropped or refused, as ``on_error`` receives them.

    ``reason`` is the ``stats()`` counter they were counted in: ``dropped_buffer_full``,
    ``dropped_too_large`` or ``dropped_at_close``; ``count`` is how many events; ``games``
    how many of them each game lost; ``game`` is the game when only one lost events, else
    None.
    """

    def __init__(self, reason: Counter, count: int, games: Mapping[str, int]) -> None:
        self.reason = reason
        self.count = count
        self.games: Mapping[str, int] = MappingProxyType(
            {game: n for game, n in games.items() if n > 0}
        )
        self.game = next(iter(self.games)) if len(self.games) == 1 else None
        events = "event" if count == 1 else "events"
        super().__init__(
            f"{count} {events} {_WHY.get(reason, str(reason))} ({_by_game(self.games)})"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.reason, self.count, dict(self.games))


_WHY = {
    Counter.DROPPED_BUFFER_FULL: "dropped: the in-process buffer was full "
    "([collector] max_buffer_events or max_buffer_bytes)",
    Counter.DROPPED_TOO_LARGE: "refused: larger than [buffer] max_event_bytes",
    Counter.DROPPED_AT_CLOSE: "dropped: still buffered when close() ran out of time",
}
_GAMES_SHOWN = 5


def _by_game(games: Mapping[str, int]) -> str:
    """``'a': 3, 'b': 1``: the games that lost the most first, at most five named."""
    top = sorted(games.items(), key=lambda item: (-item[1], item[0]))
    shown = ", ".join(f"{game!r}: {n}" for game, n in top[:_GAMES_SHOWN])
    more = len(top) - _GAMES_SHOWN
    return f"{shown}, and {more} more games" if more > 0 else shown
