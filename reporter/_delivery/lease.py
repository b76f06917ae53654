"""What a claim hands over (a ``Lease`` of batches) and what became of each batch (``Result``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from collector.store import ShardKeys


class Leased(NamedTuple):
    """One leased batch waiting to be sent."""

    game: str
    batch_id: str
    entries: list[bytes]
    attempts: int  # earlier failed attempts


@dataclass(frozen=True, slots=True)
class Lease:
    """Batches leased together under one token, from one shard."""

    keys: ShardKeys
    token: str
    batches: list[Leased] = field(default_factory=list)
    # Whether more work waits right behind it (a full batch, more due retries).
    more: bool = False


class Result(StrEnum):
    """What became of one batch sent."""

    DELIVERED = "delivered"  # accepted; acknowledged with the rest of its lease
    PARTIAL = "partial"  # answered item by item, settled in one call, nothing left to retry
    RETRY = "retry"  # waits in the retry set for its next attempt (whole, or the part left)
    DEAD = "dead"  # dead-lettered
    STALE = "stale"  # every event too old to send: dropped and counted
    LOST = "lost"  # answered after its lease ran out; another reporter may send it again
    RELEASED = "released"  # handed back unsent (stopping, or the endpoint started failing)


# What leaves nothing of a batch pending: its game's next batch may go (a sink in order).
SETTLED = frozenset({Result.DELIVERED, Result.PARTIAL, Result.DEAD, Result.STALE})
