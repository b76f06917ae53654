"""Calls on dead letters: replayed to retry, purged for good."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from collector.store._keys import ShardKeys
from collector.store._results import (
    Moved,
    Replayed,
)
from collector.store._script_call import ScriptCall, call_id


@dataclass(frozen=True, slots=True)
class Replay(ScriptCall[Replayed]):
    """Move one dead letter (``batch_id``), or the oldest ``limit``, back to retry, cutting
    a batch again when it holds more than ``max_bytes`` (as ``Claim`` counts them)."""

    script: ClassVar[str] = "replay"
    receipt: ClassVar[bool] = True
    shard: ShardKeys
    batch_id: str = ""
    limit: int = 50  # a longer call blocks Redis longer (1,000 of 128 events: 40 to 80 ms)
    max_bytes: int = 0
    event_overhead: int = 0
    call: str = field(default_factory=call_id)  # the receipt's id: a resend replays nothing

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.dead, s.batches, s.retry, s.stats, s.payloads, s.quarantine, s.receipt(self.call))

    def args(self) -> Sequence[Any]:
        return (self.batch_id, self.limit, self.max_bytes, self.event_overhead)

    def parse(self, reply: Any) -> Replayed:
        return Replayed(int(reply[0]), int(reply[1]), int(reply[2]))


@dataclass(frozen=True, slots=True)
class Purge(ScriptCall[Moved]):
    """Delete the oldest ``limit`` dead letters for good."""

    script: ClassVar[str] = "purge"
    receipt: ClassVar[bool] = True
    shard: ShardKeys
    limit: int = 1000
    call: str = field(default_factory=call_id)  # the receipt's id: a resend purges nothing

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.dead, s.batches, s.payloads, s.stats, s.quarantine, s.receipt(self.call))

    def args(self) -> Sequence[Any]:
        return (self.limit,)

    def parse(self, reply: Any) -> Moved:
        return Moved(int(reply[0]), int(reply[1]))


@dataclass(frozen=True, slots=True)
class PurgeIds(ScriptCall[Moved]):
    """Delete the named dead letters for good (those still on the dead list); send a few
    hundred ids per call at most, each costs a scan of the dead list."""

    script: ClassVar[str] = "purge_ids"
    receipt: ClassVar[bool] = True
    shard: ShardKeys
    batch_ids: Sequence[str]
    call: str = field(default_factory=call_id)  # the receipt's id

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.dead, s.batches, s.payloads, s.stats, s.quarantine, s.receipt(self.call))

    def args(self) -> Sequence[Any]:
        return tuple(self.batch_ids)

    def parse(self, reply: Any) -> Moved:
        return Moved(int(reply[0]), int(reply[1]))
