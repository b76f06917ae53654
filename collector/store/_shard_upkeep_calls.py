"""Calls that keep shards in order: leases, the reporter heartbeat, a whole read, junk set aside."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from collector.store._keys import ShardKeys, sibling
from collector.store._results import LeaseAnswer, LiveReporters, text
from collector.store._script_call import ScriptCall


@dataclass(frozen=True, slots=True)
class ShardLease(ScriptCall[LeaseAnswer]):
    """Take or renew ``owner``'s lease on a shard (``lease_ms`` 0 gives it up).  A holder
    named ``missing`` (one the caller found missing from the live registry, twice in a row)
    is taken over, as is an owner key without expiry."""

    script: ClassVar[str] = "shard_lease"
    shard: ShardKeys
    owner: str
    lease_ms: int
    missing: str = ""

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.owner, s.stats, s.quarantine)

    def args(self) -> Sequence[Any]:
        return (self.owner, self.lease_ms, self.missing)

    def parse(self, reply: Any) -> LeaseAnswer:
        return LeaseAnswer(bool(int(reply[0])), text(reply[1]), text(reply[2]))


@dataclass(frozen=True, slots=True)
class Heartbeat(ScriptCall[LiveReporters]):
    """Note ``owner`` alive in the reporter registry (``key``) for ``lease_ms`` from now,
    by the server's clock; forget the expired reporters; who is live."""

    script: ClassVar[str] = "heartbeat"
    key: str
    owner: str
    lease_ms: int

    def keys(self) -> Sequence[str]:
        # the registry's shard (0): its counters and quarantine, for a registry set aside
        return (self.key, sibling(self.key, "stats"), sibling(self.key, "quarantine"))

    def args(self) -> Sequence[Any]:
        return (self.owner, self.lease_ms)

    def parse(self, reply: Any) -> LiveReporters:
        return LiveReporters(int(reply[0]), frozenset(text(member) for member in reply[1:]))


@dataclass(frozen=True, slots=True)
class ReadShard(ScriptCall[list[Any]]):
    """A shard's whole state in one atomic read, with the buffers of ``games``; the reply
    as the script returns it (``_shard_reads.read_shard`` reads it)."""

    script: ClassVar[str] = "read_shard"
    shard: ShardKeys
    games: Sequence[str]

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (
            s.ring,
            s.inflight,
            s.retry,
            s.dead,
            s.stats,
            s.owner,
            s.batches,
            *(s.queue(g) for g in self.games),
        )

    def args(self) -> Sequence[Any]:
        return ()

    def parse(self, reply: Any) -> list[Any]:
        return list(reply)


@dataclass(frozen=True, slots=True)
class SetAside(ScriptCall[int]):
    """Move to the quarantine what a sweep's reads of a shard met and cannot use: keys of its
    registry of another type than they must be, and ``members`` of its ring that are not game
    names; the result is the records set aside."""

    script: ClassVar[str] = "set_aside"
    shard: ShardKeys
    members: Sequence[bytes] = ()

    def keys(self) -> Sequence[str]:
        s = self.shard
        return (s.ring, s.active, s.retry, s.marker, s.stats, s.legacy_ring, s.quarantine)

    def args(self) -> Sequence[Any]:
        return tuple(self.members)

    def parse(self, reply: Any) -> int:
        return int(reply)
