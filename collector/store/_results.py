"""What the scripts answer, as typed values (the retry policy some of them apply is
``collector.retry.RetryPolicy``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

# -- results -----------------------------------------------------------------------------------


class Stored(NamedTuple):
    """What a collect call did: events the cap evicted, the shard's identity marker (a
    different one than before means the shard's data vanished in between), events merged
    into an earlier one with the same dedup key, and whether the call was a repeat of a write
    the shard had applied (nothing stored; the numbers are the first answer's)."""

    evicted: int
    marker: str
    merged: int = 0
    repeat: bool = False


class ClaimedBatch(NamedTuple):
    batch_id: str
    entries: list[bytes]


@dataclass(frozen=True, slots=True)
class Claimed:
    """What one claim took: its batches, the stale events it dropped, the events left, and
    the malformed entries it dead-lettered.  ``waiting``: nothing was claimed because an
    earlier batch of the game is pending (a claim in order)."""

    stale: int
    remaining: int
    batches: list[ClaimedBatch]
    malformed: int = 0
    waiting: bool = False


@dataclass(frozen=True, slots=True)
class RetryBatch:
    batch_id: str
    game: str
    attempts: int
    entries: list[bytes]


class RetryState(StrEnum):
    """What a failed batch (or the part of one to retry) became, as nack.lua and settle.lua
    answer it."""

    RETRY = "retry"  # waits in the retry set until its delay has passed
    DEAD = "dead"  # dead-lettered: rejected for good, or out of attempts
    LOST = "lost"  # nothing done: the caller no longer held the lease (nack)
    NONE = ""  # no part to retry (settle)


@dataclass(frozen=True, slots=True)
class NackResult:
    """What a nack did: RETRY (due in ``delay_ms``), DEAD or LOST."""

    state: RetryState
    delay_ms: int


@dataclass(frozen=True, slots=True)
class Settled:
    """How a settle split the batch: events delivered (-1 if the lease was lost), the batch
    the retry part became (``retry_state`` RETRY, or DEAD when out of attempts; NONE if no
    part was retried) and when it is due, and the dead letter of the refused part ("" if
    none)."""

    delivered: int
    retry_id: str
    retry_state: RetryState
    delay_ms: int
    refused_id: str


class Moved(NamedTuple):
    """Batches and events a purge deleted."""

    batches: int
    events: int


class Replayed(NamedTuple):
    """Batches and events a replay moved back to retry, and the dead letters of malformed
    entries it left in place (they can never be sent)."""

    batches: int
    events: int
    malformed: int


class Reaped(NamedTuple):
    """Expired batches sent back to retry, and those dead-lettered instead."""

    retried: int
    dead: int


class Tokens(NamedTuple):
    """Tokens a bucket granted, microseconds until it may grant one more, and whether tokens
    are scarce (a caller who would have waited was refused in the last second)."""

    granted: int
    wait_us: int
    scarce: bool = False


class LiveReporters(NamedTuple):
    """The reporter registry after a heartbeat (``heartbeat.lua``, server time): how many
    processes are live, and their ids (the first thousand: ``complete`` says whether that is
    all of them)."""

    live: int
    ids: frozenset[str]

    @property
    def complete(self) -> bool:
        return len(self.ids) == self.live


class LeaseAnswer(NamedTuple):
    """A shard lease call (``shard_lease.lua``): whether the caller holds the shard now, the
    holder it found ('' for none), and why it took the shard over from that holder ('' if it
    did not: a free shard, or its own)."""

    held: bool
    holder: str
    taken_over: str = ""


class Slot(NamedTuple):
    """A slot of a shared request rate (``reserve_slot.lua``): whether it was reserved,
    microseconds from now until it (or until the next free one), how many slots others
    reserved ahead of it, microseconds a pause still runs, when the rate's state was first
    written (``born``, to pass back as ``known``), and whether this call found it lost."""

    reserved: bool
    wait_us: int
    ahead: int
    paused_us: int = 0
    born: str = ""
    lost: bool = False


@dataclass(frozen=True, slots=True)
class HoldState:
    """Sending held for every reporter, as Redis says (``hold.lua``): since when (ms), who
    probes next and when, why (``cause``, ``check``: what the operator should check) and
    the game whose request met it.  ``mine``: this call started the hold, or has the turn
    to probe (``lift``: it ended one).  ``poison`` (``hold``): nothing is held, because the
    batch met the same cause again after a probe lifted the hold it had drawn."""

    held: bool
    now_ms: int = 0
    since_ms: int = 0
    probe_at_ms: int = 0
    probes: int = 0
    cause: str = ""
    check: str = ""
    game: str = ""
    mine: bool = False
    poison: bool = False

    @property
    def age_seconds(self) -> float:
        """Seconds held (0 when not)."""
        return max(0.0, (self.now_ms - self.since_ms) / 1000) if self.held else 0.0


def text(value: bytes | str) -> str:
    """A reply string as text (replies are bytes: clients never decode responses)."""
    return value.decode() if isinstance(value, bytes) else value
