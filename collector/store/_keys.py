"""Every key name the project uses, and the game names allowed inside them.

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
_LIMIT_NAME = re.compile(r"[A-Za-z0-9_.:@/-]{1,128}")
# Records a shard's quarantine keeps, newest first (lua/_guard.lua says the same; a test
# checks): enough to show an operator every kind of junk met, bounded whatever comes.
QUARANTINE_KEEP = 1000


def sibling(key: str, name: str) -> str:
    """A key named ``name`` in the hash tag of ``key`` (so in its cluster slot)."""
    return f"{key[: key.index('}') + 1]}:{name}"


def held_index(hold: str) -> str:
    """zset: the scopes held now (scope -> since, ms) of the group of ``hold`` (a
    ``KeySchema.hold`` key), in its hash tag."""
    return sibling(hold, "holds")


def receipt_key(key: str, call_id: str) -> str:
    """string: what a script call answered, kept for a resend of that same call after a lost
    reply (``lua/_guard.lua``, receipts); in the hash tag of ``key``, expiring."""
    return sibling(key, f"done:{call_id}")


def validate_game(game: object) -> str:
    """Return ``game`` if it is a valid game name; raise ``TypeError`` if it is not a str
    and ``ValueError`` if it is a str that is not a valid name."""
    if isinstance(game, str) and _GAME_NAME.fullmatch(game):
        return game
    if not isinstance(game, str):
        raise TypeError(f"game name must be a str, got {type(game).__name__}: {game!r:.80}")
    raise ValueError(
        f"invalid game name {game!r:.160}: use 1 to {MAX_GAME_NAME_LENGTH} characters "
        f"from [{GAME_NAME_CHARS}]"
    )


def is_valid_prefix(prefix: str) -> bool:
    return bool(_PREFIX.fullmatch(prefix))


@dataclass(frozen=True, slots=True)
class ShardKeys:
    """The keys of one shard; all share the shard's hash tag."""

    shard: int
    tag: str

    def queue(self, game: str) -> str:
        """list: the game's buffered entries, oldest first."""
        return f"{self.tag}:q:{game}"

    @property
    def active(self) -> str:
        """set: games with buffered events."""
        return f"{self.tag}:active"

    @property
    def ring(self) -> str:
        """zset: the active games, all scored 0, so in name order: the sweeper walks it with
        a name cursor (ZRANGE BYLEX), and removing a game is O(log n), not a scan."""
        return f"{self.tag}:games"

    @property
    def legacy_ring(self) -> str:
        """list: the ring of versions before the sorted set; moved into ``ring`` when seen."""
        return f"{self.tag}:ring"

    @property
    def inflight(self) -> str:
        """zset: batch id -> lease deadline (ms)."""
        return f"{self.tag}:inflight"

    @property
    def batches(self) -> str:
        """hash: batch id -> metadata (JSON)."""
        return f"{self.tag}:batches"

    @property
    def payloads(self) -> str:
        """hash: batch id -> the batch's entries joined by newlines."""
        return f"{self.tag}:payloads"

    @property
    def retry(self) -> str:
        """zset: batch id -> when it is due (ms)."""
        return f"{self.tag}:retry"

    @property
    def dead(self) -> str:
        """list: dead-lettered batch ids, newest first."""
        return f"{self.tag}:dead"

    @property
    def order(self) -> str:
        """zset: the games' queues of pending batches, for a sink that sends each game's
        batches first in, first out: ``<game>\\n<seq>\\n<batch id>``, all scored 0, so a
        game's batches are one range by name, in the order claimed (``lua/_order.lua``)."""
        return f"{self.tag}:order"

    @property
    def stats(self) -> str:
        """hash: the shard's counters (names from ``collector.counters``)."""
        return f"{self.tag}:stats"

    @property
    def owner(self) -> str:
        """string: the reporter process holding the shard's lease."""
        return f"{self.tag}:owner"

    @property
    def late(self) -> str:
        """list: audit records of items sent with their behaviour time moved into the
        anti-addiction interface's window (JSON), newest first, bounded."""
        return f"{self.tag}:late"

    @property
    def quarantine(self) -> str:
        """list: records the scripts set aside (keys of another type, metadata that does
        not decode), newest first, at most ``QUARANTINE_KEEP`` (``lua/_guard.lua``)."""
        return f"{self.tag}:quarantine"

    def receipt(self, call_id: str) -> str:
        """string: a script call's answer, kept a short while for a resend of the same call
        (``call_id``: the batch id, the lease token or the call's own id)."""
        return receipt_key(self.tag, call_id)

    @property
    def writes(self) -> str:
        """hash: the SDK's writes the shard applied recently, so that a repeat is answered,
        not applied again (``lua/_written_once.lua``)."""
        return f"{self.tag}:writes"

    @property
    def writers(self) -> str:
        """zset: writer id -> ms of its latest write to the shard."""
        return f"{self.tag}:writers"

    def seen(self, game: str) -> str:
        """zset: the game's dedup keys -> ms when the event that first had it was stored."""
        return f"{self.tag}:seen:{game}"

    @property
    def marker(self) -> str:
        """string: the shard's identity, written once when it is first used; a different
        one (or none) later means its data vanished (a restart without persistence, a
        flush, a failover to an empty replica)."""
        return f"{self.tag}:marker"


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

    @property
    def reporters(self) -> str:
        """zset: reporter process id -> heartbeat deadline (ms); in shard 0's tag."""
        return f"{self._shards[0].tag}:reporters"

    @property
    def alerts(self) -> str:
        """hash: what endpoints refused for the operator to fix (name -> JSON, name#count ->
        count); in shard 0's tag."""
        return f"{self._shards[0].tag}:alerts"

    def limiter(self, name: str) -> str:
        """hash: a request rate shared by every reporter; a hash tag of its own."""
        if not _LIMIT_NAME.fullmatch(name):
            raise ValueError(f"invalid limiter name {name!r}")
        return f"{{{self.prefix}:limit:{name}}}:bucket"

    def hold(self, name: str, scope: str = "") -> str:
        """hash: sending held for every reporter (an answer only the operator can fix), and
        whose turn it is to probe; a hash tag of its own per group ``name`` (a sink's), one
        hash per ``scope`` in it ('' the group's first: an app id), and their index
        (``held_index``)."""
        if not _LIMIT_NAME.fullmatch(name):
            raise ValueError(f"invalid hold name {name!r}")
        if scope and not _LIMIT_NAME.fullmatch(scope):
            raise ValueError(f"invalid hold scope {scope!r}")
        return f"{{{self.prefix}:hold:{name}}}:hold" + (f":{scope}" if scope else "")
