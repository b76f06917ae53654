"""Key names, the stored entry format and the names that both halves must agree on.

Every key of a shard starts with the hash tag ``{<prefix>:<shard>}``, so each script call
touches one hash slot and runs unchanged on Redis Cluster.  Game names come from callers; they
are validated against a small ASCII set without braces, and the tag comes first in every key,
so no game name can move a key to another slot.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

MAX_GAME_NAME_LENGTH = 128
GAME_NAME_CHARS = "A-Z a-z 0-9 _ - . : @ /"
_GAME_NAME = re.compile(r"[A-Za-z0-9_.:@/-]{1,128}")
_PREFIX = re.compile(r"[A-Za-z0-9_.:-]{1,64}")

# A stored entry is the collect time in milliseconds as 13 ASCII digits, then the event's JSON.
# The reporter reads ages and assembles POST bodies without decoding the events.
ENTRY_TIME_DIGITS = 13

# Names of the per-shard counters kept in the ``stats`` hash (HINCRBY from the scripts, which
# spell them out: Lua cannot import these).
STORED = "stored"
EVICTED = "evicted"
SDK_DROPPED_BUFFER_FULL = "sdk_dropped_buffer_full"
SDK_DROPPED_TOO_LARGE = "sdk_dropped_too_large"
COUNTERS = (
    STORED, EVICTED, "stale", "delivered", "rejected", "replayed", "dead_dropped", "purged",
    SDK_DROPPED_BUFFER_FULL, SDK_DROPPED_TOO_LARGE, "claimed", "batches_claimed",
    "batches_delivered", "batches_retried", "batches_dead", "batches_reaped", "batches_released",
)


def validate_game(game: object) -> str:
    """Return ``game`` if it is a valid game name, else raise ``ValueError`` naming it."""
    if isinstance(game, str) and _GAME_NAME.fullmatch(game):
        return game
    if not isinstance(game, str):
        raise ValueError(f"game name must be a str, got {type(game).__name__}: {game!r:.80}")
    raise ValueError(
        f"invalid game name {game!r:.160}: use 1 to {MAX_GAME_NAME_LENGTH} characters "
        f"from [{GAME_NAME_CHARS}]"
    )


def is_valid_prefix(prefix: str) -> bool:
    return bool(_PREFIX.fullmatch(prefix))


def encode_entry(collected_ms: int, event_json: bytes) -> bytes:
    return b"%013d" % collected_ms + event_json


def entry_time_ms(entry: bytes) -> int:
    return int(entry[:ENTRY_TIME_DIGITS])


def entry_event(entry: bytes) -> bytes:
    return entry[ENTRY_TIME_DIGITS:]


@dataclass(frozen=True, slots=True)
class ShardKeys:
    """The keys of one shard; all share the shard's hash tag."""

    shard: int
    tag: str

    def queue(self, game: str) -> str:
        return f"{self.tag}:q:{game}"

    @property
    def active(self) -> str:
        return f"{self.tag}:active"

    @property
    def ring(self) -> str:
        return f"{self.tag}:ring"

    @property
    def inflight(self) -> str:
        return f"{self.tag}:inflight"

    @property
    def batches(self) -> str:
        return f"{self.tag}:batches"

    @property
    def payloads(self) -> str:
        return f"{self.tag}:payloads"

    @property
    def retry(self) -> str:
        return f"{self.tag}:retry"

    @property
    def dead(self) -> str:
        return f"{self.tag}:dead"

    @property
    def stats(self) -> str:
        return f"{self.tag}:stats"

    @property
    def owner(self) -> str:
        return f"{self.tag}:owner"


class KeySchema:
    """Maps games to shards and shards to key names for one deployment."""

    def __init__(self, prefix: str, shards: int) -> None:
        if not is_valid_prefix(prefix):
            raise ValueError(f"invalid key prefix {prefix!r}")
        if shards < 1 or shards & (shards - 1):
            raise ValueError(f"shards must be a power of two, got {shards}")
        self.prefix = prefix
        self.shards = shards
        self._mask = shards - 1
        self._shards = tuple(ShardKeys(n, f"{{{prefix}:{n}}}") for n in range(shards))

    def shard_of(self, game: str) -> int:
        return zlib.crc32(game.encode()) & self._mask

    def shard(self, number: int) -> ShardKeys:
        return self._shards[number]

    def for_game(self, game: str) -> ShardKeys:
        return self._shards[self.shard_of(game)]

    def all_shards(self) -> tuple[ShardKeys, ...]:
        return self._shards
