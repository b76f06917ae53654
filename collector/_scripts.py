"""Load the Lua scripts shipped in the package and call them with named results.

Scripts are read as package resources (``collector._lua``), so they load the same from a
source checkout and from an installed wheel.  Each is registered once per client through
redis-py's ``Script``, which runs EVALSHA and reloads the script on NOSCRIPT.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from redis.commands.core import Script

from collector._schema import ShardKeys

SCRIPT_NAMES = (
    "collect", "claim", "ack", "nack", "extend", "release", "reap", "take_retries",
    "replay", "purge", "shard_lease",
)


@cache
def script_text(name: str) -> str:
    return (files("collector._lua") / f"{name}.lua").read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class Claimed:
    """What one claim call took: its batches (id, entries) and what it found."""

    stale: int
    remaining: int
    batches: list[tuple[str, list[bytes]]]


@dataclass(frozen=True, slots=True)
class RetryBatch:
    batch_id: str
    game: str
    attempts: int
    entries: list[bytes]


@dataclass(frozen=True, slots=True)
class NackResult:
    state: str  # "retry", "dead" or "lost"
    delay_ms: int


class Scripts:
    """The project's scripts bound to one client (a Redis, RedisCluster or Pipeline)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._scripts: dict[str, Script] = {
            name: client.register_script(script_text(name)) for name in SCRIPT_NAMES}

    def run(self, name: str, keys: Sequence[str], args: Sequence[Any], client: Any = None) -> Any:
        return self._scripts[name](keys=keys, args=args, client=client or self._client)

    def script(self, name: str) -> Script:
        return self._scripts[name]

    def collect(self, keys: ShardKeys, game: str, cap: int, ttl: int, entries: Sequence[bytes],
                pre_evicted: int = 0, dropped_full: int = 0, dropped_large: int = 0) -> Any:
        """Store ``entries``; return how many events the cap evicted."""
        return self.run("collect", *collect_call(keys, game, cap, ttl, entries, pre_evicted,
                                                 dropped_full, dropped_large))

    def claim(self, keys: ShardKeys, game: str, batch_id: str, token: str, batch_size: int,
              max_batches: int, lease_ms: int, max_age_ms: int, linger_ms: int) -> Claimed:
        reply = self.run(
            "claim",
            (keys.queue(game), keys.active, keys.ring, keys.inflight, keys.batches,
             keys.payloads, keys.stats),
            (game, batch_id, token, batch_size, max_batches, lease_ms, max_age_ms, linger_ms),
        )
        pairs = reply[2:]
        batches = [
            (_text(pairs[i]), split_entries(pairs[i + 1])) for i in range(0, len(pairs), 2)
        ]
        return Claimed(int(reply[0]), int(reply[1]), batches)

    def ack(self, keys: ShardKeys, batch_id: str, token: str, stale: int = 0,
            rejected: int = 0) -> int:
        """Events counted as delivered, or -1 if the lease was lost."""
        return int(self.run("ack", *ack_call(keys, batch_id, token, stale, rejected)))

    def nack(self, keys: ShardKeys, batch_id: str, token: str, *, permanent: bool,
             min_delay_ms: int, initial_ms: int, max_ms: int, max_attempts: int,
             jitter: float, dead_max: int, reason: str) -> NackResult:
        state, delay = self.run(
            "nack",
            (keys.inflight, keys.batches, keys.payloads, keys.retry, keys.dead, keys.stats),
            (batch_id, token, int(permanent), min_delay_ms, initial_ms, max_ms, max_attempts,
             repr(jitter), dead_max, reason[:500]),
        )
        return NackResult(_text(state), int(delay))

    def extend(self, keys: ShardKeys, batch_id: str, token: str, lease_ms: int) -> bool:
        return bool(self.run("extend", (keys.inflight, keys.batches), (batch_id, token, lease_ms)))

    def release(self, keys: ShardKeys, batch_id: str, token: str) -> bool:
        return bool(self.run("release", (keys.inflight, keys.batches, keys.retry, keys.stats),
                             (batch_id, token)))

    def reap(self, keys: ShardKeys, limit: int, max_attempts: int, dead_max: int
             ) -> tuple[int, int]:
        retried, dead = self.run(
            "reap",
            (keys.inflight, keys.batches, keys.payloads, keys.retry, keys.dead, keys.stats),
            (limit, max_attempts, dead_max),
        )
        return int(retried), int(dead)

    def take_retries(self, keys: ShardKeys, token: str, lease_ms: int, limit: int,
                     game: str = "") -> list[RetryBatch]:
        flat = self.run("take_retries", (keys.retry, keys.inflight, keys.batches, keys.payloads),
                        (token, lease_ms, limit, game))
        return [
            RetryBatch(_text(flat[i]), _text(flat[i + 1]), int(flat[i + 2]),
                       split_entries(flat[i + 3] or b""))
            for i in range(0, len(flat), 4)
        ]

    def replay(self, keys: ShardKeys, batch_id: str = "", limit: int = 1000) -> tuple[int, int]:
        batches, events = self.run("replay", (keys.dead, keys.batches, keys.retry, keys.stats),
                                   (batch_id, limit))
        return int(batches), int(events)

    def purge(self, keys: ShardKeys, limit: int = 1000) -> tuple[int, int]:
        batches, events = self.run("purge", (keys.dead, keys.batches, keys.payloads, keys.stats),
                                   (limit,))
        return int(batches), int(events)

    def shard_lease(self, keys: ShardKeys, owner: str, lease_ms: int) -> bool:
        return bool(self.run("shard_lease", (keys.owner,), (owner, lease_ms)))


def collect_call(keys: ShardKeys, game: str, cap: int, ttl: int, entries: Sequence[bytes],
                 pre_evicted: int = 0, dropped_full: int = 0, dropped_large: int = 0,
                 ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """KEYS and ARGV of one collect script call."""
    return (
        (keys.queue(game), keys.active, keys.ring, keys.stats),
        (game, cap, ttl, pre_evicted, dropped_full, dropped_large, b"\n".join(entries)),
    )


def ack_call(keys: ShardKeys, batch_id: str, token: str, stale: int = 0, rejected: int = 0
             ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """KEYS and ARGV of one ack script call."""
    return (keys.inflight, keys.batches, keys.payloads, keys.stats), (batch_id, token, stale,
                                                                      rejected)


def split_entries(blob: bytes) -> list[bytes]:
    return blob.split(b"\n") if blob else []


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
