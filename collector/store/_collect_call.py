"""The SDK's one write: ``Collect``, a game's entries stored in its shard."""

from __future__ import annotations

import zlib
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
from collector.store._errors import WRITE_CONFLICT
from collector.store._keys import ShardKeys
from collector.store._results import (
    Stored,
    text,
)
from collector.store._script_call import ScriptCall

# The producer protocol version this package speaks (docs/protocol.md): the collect script's
# last argument.  A change to the collect call that a producer must follow bumps it, here and
# in lua/collect.lua, and the script refuses a call of another version, naming both.
PROTOCOL_VERSION = 1

# The entries are checksummed in pieces of at most this many bytes: CPython's zlib.crc32 lets
# go of the GIL for a longer buffer, and the flusher, which checksums every call of a round,
# then waits for a busy collect() loop to give it back, up to the interpreter's switch
# interval (5 ms) each time: rounds grew and fell behind the callers.
CRC_PIECE_BYTES = 5 * 1024


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
    ``dedup_window_ms``.  The call ends with the producer protocol version
    (``PROTOCOL_VERSION``, docs/protocol.md): a script of another version refuses it."""

    script: ClassVar[str] = "collect"
    confirmed: ClassVar[bool] = True
    refusals: ClassVar[tuple[str, ...]] = ("collect: ", WRITE_CONFLICT)
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
        entries = join_entries(self.entries)
        checksum = (
            content_checksum(
                self.game,
                self.pre_evicted,
                self.dropped_buffer_full,
                self.dropped_too_large,
                entries,
            )
            if self.writer
            else ""
        )
        return (
            self.game,
            self.cap,
            self.ttl_seconds,
            self.pre_evicted,
            self.dropped_buffer_full,
            self.dropped_too_large,
            entries,
            self.identity,
            self.writer,
            self.seq,
            self.low,
            WRITES_REMEMBERED_MS,
            WRITERS_PER_SHARD,
            WRITES_PER_WRITER,
            self.dedup_window_ms,
            DEDUP_KEYS_PER_GAME,
            checksum,
            PROTOCOL_VERSION,
        )

    def parse(self, reply: Any) -> Stored:
        return Stored(int(reply[0]), text(reply[1]), int(reply[2]), bool(reply[3]))


def content_checksum(
    game: str, pre_evicted: int, dropped_full: int, dropped_large: int, blob: bytes
) -> str:
    """What tells a write's content apart, with its length (``lua/collect.lua``, ARGV[17]):
    the CRC-32 of the game, the counts and the entries, as 8 hex digits.  Not a defence
    against anyone: a check that a write sent again under a writer id and number is the one
    first sent with them (another process with the same id sends other events)."""
    head = f"{game}\n{pre_evicted} {dropped_full} {dropped_large}\n".encode()
    crc = zlib.crc32(head)
    with memoryview(blob) as view:
        for start in range(0, len(view), CRC_PIECE_BYTES):
            crc = zlib.crc32(view[start : start + CRC_PIECE_BYTES], crc)
    return f"{crc:08x}"
