"""Store buffered events in Redis: many events of one game per script call, many calls per write."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import AskError, ClusterDownError, RedisClusterException, TryAgainError

from collector._buffer import DROPPED_FULL, EVICTED, TOO_LARGE, Pending, no_pending
from collector._pipeline import run_script_calls
from collector._redis import UNAVAILABLE
from collector._schema import KeySchema
from collector._scripts import Scripts, collect_call

# Events per script call: large enough to amortise the call, small enough that one call never
# blocks the server for long (about a millisecond).
EVENTS_PER_CALL = 1000
# Events per socket write: bounds the size of one write (a few MB).
EVENTS_PER_WRITE = 20_000
# Replies that mean the call went to the wrong cluster node, or to one that is not ready:
# MOVED, ASK (MovedError is an AskError), TRYAGAIN, CLUSTERDOWN; and no node for the slot.
REROUTE = (AskError, TryAgainError, ClusterDownError, RedisClusterException)


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
    failed: dict[str, list[bytes]] = field(default_factory=dict)
    failed_pending: Pending = field(default_factory=no_pending)
    error: Exception | None = None


def plan_calls(queues: Mapping[str, Sequence[bytes]], pending: Pending,
               cap_for: Callable[[str], int]) -> list[Call]:
    """One call per game (more for a game with over EVENTS_PER_CALL events), drop counts
    riding on the game's first call.

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


def writes(calls: list[Call]) -> Iterator[list[Call]]:
    """Consecutive groups of calls holding at most about EVENTS_PER_WRITE events each."""
    group: list[Call] = []
    events = 0
    for c in calls:
        if group and events + len(c.entries) > EVENTS_PER_WRITE:
            yield group
            group, events = [], 0
        group.append(c)
        events += len(c.entries)
    if group:
        yield group


class Writer:
    """Runs planned calls with as few socket writes as possible: on a single server all in
    one, on a cluster one per node (and the odd call redirected while slots move)."""

    def __init__(self, client: Any, scripts: Scripts, schema: KeySchema, cluster: bool,
                 cap_for: Callable[[str], int], ttl_for: Callable[[str], int]) -> None:
        self._client = client
        self._scripts = scripts
        self._schema = schema
        self._cluster = cluster
        self._cap_for = cap_for
        self._ttl_for = ttl_for

    def _args(self, c: Call) -> tuple[Sequence[str], Sequence[Any]]:
        return collect_call(self._schema.for_game(c.game), c.game, self._cap_for(c.game),
                            self._ttl_for(c.game), c.entries, c.pre_evicted, c.dropped_full,
                            c.too_large)

    def write(self, queues: Mapping[str, Sequence[bytes]], pending: Pending) -> WriteResult:
        calls = plan_calls(queues, pending, self._cap_for)
        replies = self._run_on_cluster(calls) if self._cluster else self._run(self._client, calls)
        return tally(calls, replies)

    def _run(self, client: Any, calls: list[Call]) -> list[Any]:
        """Replies in order; a refused call (WRONGTYPE, OOM, ...) fails alone, and if the
        connection fails, so do the calls not yet answered."""
        script = self._scripts.script("collect")
        replies: list[Any] = []
        for group in writes(calls):
            try:
                replies += run_script_calls(client, script, [self._args(c) for c in group])
            except UNAVAILABLE as exc:
                replies += [exc] * (len(calls) - len(replies))
                break
        return replies

    def _run_on_cluster(self, calls: list[Call]) -> list[Any]:
        replies: list[Any] = [None] * len(calls)
        by_node: dict[str, tuple[Any, list[int]]] = {}
        for i, c in enumerate(calls):
            try:
                node = self._client.get_node_from_key(self._schema.for_game(c.game).tag)
            except Exception as exc:  # the slot map has no node for it: redis-py decides below
                replies[i] = exc
                continue
            by_node.setdefault(node.name, (node, []))[1].append(i)
        for node, numbers in by_node.values():
            node_client = self._client.get_redis_connection(node)
            for i, reply in zip(numbers, self._run(node_client, [calls[i] for i in numbers]),
                                strict=True):
                replies[i] = reply
        return self._rerouted(calls, replies)

    def _rerouted(self, calls: list[Call], replies: list[Any]) -> list[Any]:
        """Calls the slot map sent astray (a moved or moving slot, a node gone) go once through
        redis-py's own routing, which follows MOVED/ASK and refreshes the map; after a
        connection failure one call does, and the rest wait for the next round."""
        refreshed = False
        for i, reply in enumerate(replies):
            if isinstance(reply, UNAVAILABLE):
                if refreshed:
                    continue
                refreshed = True
            elif not isinstance(reply, REROUTE):
                continue
            try:
                replies[i] = self._scripts.run("collect", *self._args(calls[i]))
            except Exception as exc:
                replies[i] = exc
        return replies


def tally(calls: list[Call], replies: list[Any]) -> WriteResult:
    """Sum what was stored; collect what failed so it can be put back and sent again."""
    result = WriteResult()
    for c, reply in zip(calls, replies, strict=True):
        if isinstance(reply, Exception):
            result.error = reply
            failed = result.failed.setdefault(c.game, [])
            failed += c.thinned
            failed += c.entries
            result.failed_pending[EVICTED][c.game] += c.pre_evicted - len(c.thinned)
            result.failed_pending[DROPPED_FULL][c.game] += c.dropped_full
            result.failed_pending[TOO_LARGE][c.game] += c.too_large
        else:
            result.stored += len(c.entries) + c.pre_evicted
            result.evicted += int(reply)
    return result
