"""Calls that decide when reporters may send: rate tokens, send slots, the shared hold."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from collector.store._keys import receipt_key, sibling
from collector.store._results import (
    HoldState,
    Slot,
    Tokens,
    text,
)
from collector.store._script_call import ScriptCall, call_id


@dataclass(frozen=True, slots=True)
class TakeTokens(ScriptCall[Tokens]):
    """Take up to ``wanted`` tokens from the bucket at ``key`` (``KeySchema.limiter``):
    ``rate`` per second, at most ``capacity`` held.  ``wanted`` < 0 gives tokens back;
    ``pause_ms`` > 0 grants nothing for that long; a ``spare`` caller gets none while tokens
    are scarce.  ``now_us`` replaces Redis TIME (tests)."""

    script: ClassVar[str] = "take_tokens"
    receipt: ClassVar[bool] = True
    key: str
    rate: float
    capacity: int
    wanted: int
    pause_ms: int = 0
    now_us: int | None = None
    spare: bool = False
    call: str = field(default_factory=call_id)  # the receipt's id: a resend takes no more

    def keys(self) -> Sequence[str]:
        # the receipt, and the limiter's own quarantine and counters (its hash tag is not a
        # shard's), for a bucket of another type set aside
        return (
            self.key,
            receipt_key(self.key, self.call),
            sibling(self.key, "quarantine"),
            sibling(self.key, "stats"),
        )

    def args(self) -> Sequence[Any]:
        return (
            repr(self.rate),
            self.capacity,
            self.wanted,
            self.pause_ms,
            "" if self.now_us is None else self.now_us,
            "1" if self.spare else "",
        )

    def parse(self, reply: Any) -> Tokens:
        return Tokens(int(reply[0]), int(reply[1]), bool(reply[2]))


@dataclass(frozen=True, slots=True)
class ReserveSlot(ScriptCall[Slot]):
    """Reserve the next free slot of ``scope`` ('' for the whole key, or a game's bizId) in
    the slots at ``key`` (``KeySchema.limiter``), slots ``interval_us`` apart, if it is at
    most ``horizon_us`` ahead (-1: only look); ``pause_ms`` > 0 puts every scope's next slot
    that far from now.  ``known``: the state's born time the caller saw last ('' none): a
    state absent or born at another time was lost, and pauses every scope for
    ``lost_pause_us``.  ``now_us`` replaces Redis TIME (tests)."""

    script: ClassVar[str] = "reserve_slot"
    receipt: ClassVar[bool] = True
    key: str
    interval_us: int
    scope: str = ""
    horizon_us: int = 0
    pause_ms: int = 0
    now_us: int | None = None
    known: str = ""
    lost_pause_us: int = 0
    call: str = field(default_factory=call_id)  # the receipt's id: a resend takes no more

    def keys(self) -> Sequence[str]:
        # the receipt, and the limiter's own quarantine and counters (its hash tag is not a
        # shard's), for a hash of another type set aside
        return (
            self.key,
            receipt_key(self.key, self.call),
            sibling(self.key, "quarantine"),
            sibling(self.key, "stats"),
        )

    def args(self) -> Sequence[Any]:
        return (
            self.interval_us,
            self.scope,
            self.horizon_us,
            self.pause_ms,
            "" if self.now_us is None else self.now_us,
            self.known,
            self.lost_pause_us,
        )

    def parse(self, reply: Any) -> Slot:
        return Slot(
            bool(int(reply[0])),
            int(reply[1]),
            int(reply[2]),
            int(reply[3]),
            text(reply[4]),
            bool(int(reply[5])),
        )


class HoldOp(StrEnum):
    """What a ``Hold`` call does (``lua/hold.lua``, ARGV[1])."""

    HOLD = "hold"  # start the hold, or note the latest cause
    PROBE = "probe"  # take the turn to probe if it has come
    TURN = "turn"  # take the turn now (this caller's key just changed)
    KICK = "kick"  # make the next probe due now, whoever takes it
    LIFT = "lift"  # end the hold
    READ = "read"  # only read it


@dataclass(frozen=True, slots=True)
class Hold(ScriptCall[HoldState]):
    """Sending held for every reporter in one scope (at ``key``, ``KeySchema.hold``, listed
    as ``scope`` in its group's index while held): ``what`` says which of ``HoldOp`` (the
    next probe turn is ``interval_ms`` after one is taken; ``cause``, ``check``, ``game``
    and ``batch``, the batch whose request met it, go with ``HOLD``).  A hold nobody
    touches for ``keep_ms`` is forgotten; a lifted one keeps its batches for ``window_ms``
    (one of them that meets the same cause again is ``HoldState.poison``).  The first probe
    is due ``first_ms`` after the start, a probe interval at most.  ``now_ms`` replaces Redis
    TIME (tests)."""

    script: ClassVar[str] = "hold"
    receipt: ClassVar[bool] = True
    key: str
    what: HoldOp
    interval_ms: int = 0
    cause: str = ""
    check: str = ""
    game: str = ""
    keep_ms: int = 86_400_000
    now_ms: int | None = None
    scope: str = ""
    batch: str = ""
    window_ms: int = 0
    first_ms: int = 3_600_000  # at most interval_ms: by default the first is a probe interval
    call: str = field(default_factory=call_id)  # the receipt's id: a resend does nothing more

    def __post_init__(self) -> None:
        # the name of one (a str) is taken too; anything else fails here, named, not in Lua
        object.__setattr__(self, "what", HoldOp(self.what))

    def keys(self) -> Sequence[str]:
        # the receipt, and the hold's own quarantine and counters (its hash tag is not a
        # shard's), for a hold key of another type set aside; the index of its group
        return (
            self.key,
            receipt_key(self.key, self.call),
            sibling(self.key, "quarantine"),
            sibling(self.key, "stats"),
            sibling(self.key, "holds"),  # held_index
        )

    def args(self) -> Sequence[Any]:
        return (
            str(self.what),
            self.interval_ms,
            self.cause[:200],
            self.check[:500],
            self.game,
            self.keep_ms,
            "" if self.now_ms is None else self.now_ms,
            self.scope,
            self.batch,
            self.window_ms,
            self.first_ms,
        )

    def parse(self, reply: Any) -> HoldState:
        state = int(reply[0])
        return HoldState(
            state in (1, 2),
            int(reply[1]),
            int(reply[2]),
            int(reply[3]),
            int(reply[4]),
            text(reply[5]),
            text(reply[6]),
            text(reply[7]),
            state == 2,
            state == 3,
        )
