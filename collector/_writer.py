"""Store buffered events in Redis: grouped by game, many events per script call, pipelined."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from collector._buffer import DROPPED_FULL, EVICTED, TOO_LARGE, Item, Pending, no_pending
from collector._redis import UNAVAILABLE
from collector._schema import KeySchema
from collector._scripts import Scripts

# Events per script call: large enough to amortise the round trip, small enough that one call
# never blocks the server for long.
EVENTS_PER_CALL = 1000


@dataclass
class Call:
    """One collect script call: events of one game plus counts to report for it."""

    game: str
    entries: list[bytes]
    pre_evicted: int = 0
    dropped_full: int = 0
    too_large: int = 0
    # The oldest events, left out because the cap would trim them at once (in pre_evicted);
    # kept so that a failed call puts them back as events rather than as a bare count.
    thinned: list[bytes] = field(default_factory=list)


@dataclass
class WriteResult:
    stored: int = 0
    evicted: int = 0
    failed: list[Item] = field(default_factory=list)
    failed_pending: Pending = field(default_factory=no_pending)
    error: Exception | None = None


def plan_calls(items: list[Item], pending: Pending, cap_for: Callable[[str], int]) -> list[Call]:
    """Group events by game (order kept) and split them into script calls.

    More events of one game than its cap would be trimmed at once, so they are not sent;
    the script counts them as evicted all the same.
    """
    by_game: dict[str, list[bytes]] = defaultdict(list)
    for game, entry in items:
        by_game[game].append(entry)
    for counts in pending.values():
        for game in counts:
            by_game.setdefault(game, [])
    calls: list[Call] = []
    for game, entries in by_game.items():
        cap = cap_for(game)
        thinned = max(0, len(entries) - cap)
        kept = entries[thinned:]
        calls.append(Call(
            game, kept[:EVENTS_PER_CALL], thinned + pending[EVICTED].get(game, 0),
            pending[DROPPED_FULL].get(game, 0), pending[TOO_LARGE].get(game, 0),
            entries[:thinned],
        ))
        calls.extend(
            Call(game, kept[i:i + EVENTS_PER_CALL])
            for i in range(EVENTS_PER_CALL, len(kept), EVENTS_PER_CALL)
        )
    return calls


class Writer:
    """Runs planned calls; on a single server they share one pipeline (one round trip)."""

    def __init__(self, client: Any, scripts: Scripts, schema: KeySchema, cluster: bool,
                 cap_for: Callable[[str], int], ttl_for: Callable[[str], int]) -> None:
        self._client = client
        self._scripts = scripts
        self._schema = schema
        self._cluster = cluster
        self._cap_for = cap_for
        self._ttl_for = ttl_for

    def call(self, c: Call, client: Any = None) -> Any:
        """Run one call; with a pipeline as ``client`` the reply comes from ``execute()``."""
        return self._scripts.collect(
            self._schema.for_game(c.game), c.game, self._cap_for(c.game), self._ttl_for(c.game),
            c.entries, c.pre_evicted, c.dropped_full, c.too_large, client=client,
        )

    def write(self, items: list[Item], pending: Pending) -> WriteResult:
        calls = plan_calls(items, pending, self._cap_for)
        replies: list[Any]
        if self._cluster or len(calls) == 1:
            # Scripts must not go through a cluster pipeline (no NOSCRIPT recovery there), and
            # one call needs no pipeline (which would cost a SCRIPT EXISTS round trip).
            replies = []
            # A refused call (WRONGTYPE, OOM, ...) fails alone, as in a pipeline: raising here
            # would put back, and so send again, the calls that already succeeded.
            for c in calls:
                try:
                    replies.append(self.call(c))
                except Exception as exc:
                    replies.append(exc)
        else:
            try:
                with self._client.pipeline(transaction=False) as pipe:
                    for c in calls:
                        self.call(c, client=pipe)
                    replies = pipe.execute(raise_on_error=False)
            except UNAVAILABLE as exc:
                replies = [exc] * len(calls)
        return tally(calls, replies)


def tally(calls: list[Call], replies: list[Any]) -> WriteResult:
    """Sum what was stored; collect what failed so it can be put back and sent again."""
    result = WriteResult()
    for c, reply in zip(calls, replies, strict=True):
        if isinstance(reply, Exception):
            result.error = reply
            result.failed.extend((c.game, e) for e in c.thinned)
            result.failed.extend((c.game, e) for e in c.entries)
            result.failed_pending[EVICTED][c.game] += c.pre_evicted - len(c.thinned)
            result.failed_pending[DROPPED_FULL][c.game] += c.dropped_full
            result.failed_pending[TOO_LARGE][c.game] += c.too_large
        else:
            result.stored += len(c.entries) + c.pre_evicted
            result.evicted += int(reply)
    return result
