"""The SDK's one write: ``Collect``, a game's entries stored in its shard."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from collector._constants import (
    DEDUP_KEYS_PER_GAME,
    WRITERS_PER_SHARD,
    WRITES_PER_WRITER,
    WRITES_REMEMBERED_MS,
)
from collector.store._entries import join_entries
from collector.store._keys import ShardKeys
from collector.store._results import (
    Stored,
    text,
)
from collector.store._script_call import ScriptCall


@dataclass(frozen=True, slots=True)
class Collect(ScriptCall[Stored]):
    """Store one game's entries; the result is how many events the cap evicted (including
    ``pre_evicted``, events the client left out because the cap would trim them at once),
    the shard's identity marker (``identity`` becomes it if the shard has none), and how
    many entries were merged.

    Written once: with a ``writer`` id, ``seq`` (counted from 1 per writer and shard) and
    ``low`` (the writer's lowest ``seq`` for this shard still without an answer), the shard
    remembers the write and answers a repeat with the first answer, storing nothing
    (``Stored.repeat``).  An entry made by ``keyed_entry`` carries a dedup key: it is merged
    (counted, not stored) if an entry of the game with the same key was stored within
    ``dedup_window_ms``."""

    script: ClassVar[str] = "collect"
    confirmed: ClassVar[bool] = True
    shard: ShardKeys
    game: str
    entries: Sequence[bytes]
    cap: int
    ttl_seconds: int
    pre_evicted: int = 0
    dropped_buffer_full: int = 0
    dropped_too_large: int = 0
    identity: str = ""
    writer: str = ""
    seq: int = 0
    low: int = 0
    dedup_window_ms: int = 0

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (
            s.queue(self.game),
            s.active,
            s.ring,
            s.stats,
            s.marker,
            s.quarantine,
            s.writes,
            s.writers,
            s.seen(self.game),
        )

    def args(self) -> Sequence[Any]:
        return (
            self.game,
            self.cap,
            self.ttl_seconds,
            self.pre_evicted,
            self.dropped_buffer_full,
            self.dropped_too_large,
            join_entries(self.entries),
            self.identity,
            self.writer,
            self.seq,
            self.low,
            WRITES_REMEMBERED_MS,
            WRITERS_PER_SHARD,
            WRITES_PER_WRITER,
            self.dedup_window_ms,
            DEDUP_KEYS_PER_GAME,
        )

    def parse(self, reply: Any) -> Stored:
        return Stored(int(reply[0]), text(reply[1]), int(reply[2]), bool(reply[3]))
