"""Workers: each an object whose ``loop()`` does one bounded unit of work and returns.

``loop()`` returns True when it stopped early with work left, so the runner calls it again
at once instead of waiting a poll interval.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial

from collector.logs import RateLimitedLog
from collector.store import (
    BackendRefused,
    BackendUnavailable,
    GameState,
    KeySchema,
    RingSlice,
    ShardKeys,
)
from reporter._config import ReporterConfig
from reporter._constants import REAP_PER_CALL
from reporter._delivery.batches import Batches
from reporter._delivery.in_flight import InFlight
from reporter._delivery.pipeline import Pipeline
from reporter._pacing.slots import CLAIM_NEAR_SECONDS
from reporter._service.ownership import ShardOwnership
from reporter._service.store_watch import StoreWatch

logger = logging.getLogger("reporter")
# The longest a claim may wait for its request once the sweep has come to it.
NEXT_REQUEST_MS = round(CLAIM_NEAR_SECONDS * 1000)
# Sweeps of a busy shard (each game left a full batch) at most between two reads of its ring.
BUSY_SWEEPS = 3
ratelog = RateLimitedLog(logger, interval=30.0)


def log_unavailable(where: str, exc: Exception) -> None:
    ratelog.log(
        logging.WARNING,
        f"redis:{where}",
        "Redis unavailable in %s (%s: %s); backing off",
        where,
        type(exc).__name__,
        exc,
        extra={"job": where},
    )


class ShardSweeper:
    """Sweeps one shard: due retries first, then ready games in round-robin order.

    A game is ready when a full batch waits, or its oldest event has waited ``linger_ms``.
    Each game gets at most one claim per sweep, so a flooding game cannot starve the rest.

    When requests may be scarce (a rate limit), a sweep serves its games in a deliberate
    order (``rank``): first a game whose oldest event would go stale before its next chance
    (the next sweep of this shard, plus a wait for a request), then higher ``[games."x"]
    priority``, then the fullest.  While requests are scarce a game short of a full batch
    waits up to a quarter of its freshness window to fill more of a request (not beyond:
    ``patience``); then, like a full or urgent one, it waits for its request.
    """

    def __init__(
        self,
        keys: ShardKeys,
        store: Batches,
        pipeline: Pipeline,
        ownership: ShardOwnership,
        config: ReporterConfig,
        watch: StoreWatch | None = None,
    ) -> None:
        self.keys = keys
        self._watch = watch
        self._store = store
        self._pipeline = pipeline
        self._pace = pipeline.pace
        self._r = config.reporter
        self._hot = frozenset(config.reporter.hot_games)
        self._ownership = ownership
        self._stop = pipeline.stop
        self._clock = pipeline.clock
        self._cursor = ""  # the last game name looked at; '' = start from the first
        self._patience = max(self._r.linger_ms, store.freshness.max_age_ms // 4)
        self._max_age_ms = store.freshness.max_age_ms
        self._priority = config.priority
        self._round_started_ms: int | None = None
        self._round_ms = self._r.poll_interval_ms  # how long the last round of the ring took
        self._quarantined: int | None = None  # the shard's quarantined_records, last seen
        # The games each page of the ring held (by the cursor it was read after), this round
        # and the last: their states are read with the page, so a busy shard's sweep costs
        # one round trip before its claims instead of two.
        self._pages: dict[str, list[str]] = {}
        self._last_round_pages: dict[str, list[str]] = {}
        # A shard whose every game was left with a full batch by the last sweep: its games
        # are swept again without reading the ring (BUSY_SWEEPS at most in a row, within
        # poll_interval_ms of the last read of the ring).
        self._busy: list[str] = []
        self._busy_sweeps = 0
        self._ring_read_ms = 0

    def loop(self) -> bool:
        if not self._pipeline.running() or not self._ownership.owns(self.keys.shard):
            return False
        if self._busy:
            return self._sweep_busy()
        cursor = self._cursor
        known = self._pages.get(cursor, self._last_round_pages.get(cursor, []))
        ring = self._store.ring(self.keys, cursor, self._r.games_per_sweep, known)
        if self._watch is not None:
            self._watch.seen(self.keys, ring.marker, ring.outstanding)
        self._note_quarantine(ring)
        more = False
        if ring.retries:
            more = self._isolated(None, self._send_retries)
        page_full = len(ring.games) == self._r.games_per_sweep  # else the round is over
        first_page = cursor == ""
        self._cursor = ring.games[-1] if page_full else ""
        candidates = [g for g in ring.games if g not in self._hot]
        now_ms = int(self._clock() * 1000)
        if first_page:
            self._new_round(now_ms)
        self._pages[cursor] = candidates
        states = self._states(ring, candidates)
        limited = self._pace.limited
        if limited:  # few requests: a deliberate order
            states.sort(key=lambda s: self.rank(s, now_ms))
        drained = self._drain_ready(states, now_ms, limited)
        if drained is None:
            return False
        left, full = drained
        # The whole ring in one page, no retry due, and every game left with a full batch.
        if full and states and first_page and not page_full and not ring.retries:
            self._busy, self._busy_sweeps, self._ring_read_ms = candidates, 0, now_ms
        return more or left or self._cursor != ""

    def _drain_ready(
        self, states: list[GameState], now_ms: int, limited: bool
    ) -> tuple[bool, bool] | None:
        """Claim and send each ready game's batches; whether work was left, and whether
        every game was left with a full batch (None: stopping)."""
        more, full = False, not limited
        for state in states:
            if not self._pipeline.running():
                return None
            urgent = limited and self._urgent(state, now_ms)  # unlimited: nobody waits
            if urgent or self._is_ready(state, now_ms):
                wait = (
                    urgent or state.length >= self._r.batch_size or self._pace.contended
                )  # else only a request that is there
                left = self._isolated(state.game, partial(self._drain, state.game, wait))
                more |= left
                full &= left
            else:
                full = False
        return more, full

    def _sweep_busy(self) -> bool:
        """Sweep the games the last sweep left each with a full batch, in the same order,
        without reading the ring: none could have waited less.  Due retries, a game new to
        the ring and a reset store are seen at the next read of the ring, at most
        BUSY_SWEEPS sweeps and poll_interval_ms later."""
        games, self._busy = self._busy, []
        self._busy_sweeps += 1
        if int(self._clock() * 1000) - self._ring_read_ms >= self._r.poll_interval_ms:
            return True  # the ring is read at once
        full = True
        for game in games:
            if not self._pipeline.running():
                return False
            full &= self._isolated(game, partial(self._drain, game, True))
        if full and self._busy_sweeps < BUSY_SWEEPS and not self._pace.limited:
            self._busy = games
        return True

    def rank(self, state: GameState, now_ms: int) -> tuple[int, int, int]:
        """Sort key of a game when requests are scarce: would-go-stale first, then higher
        priority, then the fullest."""
        return (0 if self._urgent(state, now_ms) else 1, -self._priority(state.game), -state.length)

    def _urgent(self, state: GameState, now_ms: int) -> bool:
        """Whether the game's oldest event would go stale before its next chance: the next
        round of this shard's sweep, plus the longest a claim may wait for a request."""
        if not state.length or state.oldest_ms is None:
            return False
        next_chance_ms = self._round_ms + NEXT_REQUEST_MS
        return state.oldest_ms + self._max_age_ms <= now_ms + next_chance_ms

    def _new_round(self, now_ms: int) -> None:
        """A round of the ring starts (a sweep from its first game): time the last one."""
        if self._round_started_ms is not None:
            self._round_ms = max(self._r.poll_interval_ms, now_ms - self._round_started_ms)
        self._round_started_ms = now_ms
        self._last_round_pages, self._pages = self._pages, {}

    def _states(self, ring: RingSlice, candidates: list[str]) -> list[GameState]:
        """The candidates' states: those read with the page, the rest (games new to it) in
        one more round trip."""
        read = {state.game: state for state in ring.states}
        missing = [game for game in candidates if game not in read]
        if missing:
            read.update(
                (state.game, state) for state in self._store.game_states(self.keys, missing)
            )
        return [read[game] for game in candidates]

    def _send_retries(self) -> bool:
        return self._pipeline.retries(self.keys)

    def _drain(self, game: str, wait: bool) -> bool:
        return self._pipeline.drain(self.keys, game, wait)

    def _isolated(self, game: str | None, work: Callable[[], bool]) -> bool:
        """Run one game's work (None: the shard's due retries); a script Redis refused for
        it is logged and the sweep goes on with the rest of the shard (Redis not answering
        still ends the sweep)."""
        try:
            return work()
        except BackendRefused as exc:
            ratelog.log(
                logging.ERROR,
                f"refused:{self.keys.shard}",
                "shard %d: %s failed (%s: %s); the rest of the shard goes on",
                self.keys.shard,
                "its due retries" if game is None else f"game {game!r}",
                type(exc).__name__,
                exc,
                extra={"shard": self.keys.shard},
            )
            return False

    def _note_quarantine(self, ring: RingSlice) -> None:
        """Log once what the scripts set aside in this shard since the last sweep."""
        seen, self._quarantined = self._quarantined, ring.quarantined
        new = ring.quarantined - (seen or 0)
        if new <= 0 or (seen is None and not ring.quarantined):
            return
        newest = self._store.store.quarantined(self.keys, min(new, 3))
        logger.warning(
            "shard %d: %d records set aside in its quarantine (newest: %s); see "
            "telemetry-reporter status",
            self.keys.shard,
            new,
            "; ".join(f"{q.reason} at {q.key}" + (f" {q.field}" if q.field else "") for q in newest)
            or "none kept",
            extra={"shard": self.keys.shard, "quarantined": new},
        )

    def _is_ready(self, state: GameState, now_ms: int) -> bool:
        if state.length >= self._r.batch_size or state.length == 0:
            return True  # an empty buffer is claimed to unregister the game
        # While requests are scarce, a game short of a full batch waits longer (up to a
        # quarter of its freshness window), so the requests carry fuller batches.
        linger = self._patience if self._pace.contended else self._r.linger_ms
        return state.oldest_ms is not None and now_ms - state.oldest_ms >= linger


class HotGameWorker:
    """One of a hot game's dedicated threads: claims and sends that game only.

    Only while this process owns the game's shard: every reporter may list the game as hot,
    but one at a time serves it, so N reporters never run N pools against one game."""

    def __init__(
        self, game: str, keys: ShardKeys, pipeline: Pipeline, ownership: ShardOwnership
    ) -> None:
        self.game = game
        self.keys = keys
        self._pipeline = pipeline
        self._ownership = ownership

    def loop(self) -> bool:
        if not self._serving():
            return False
        self._pipeline.retries(self.keys, self.game)
        if not self._serving():
            return False
        return self._pipeline.drain(self.keys, self.game)

    def _serving(self) -> bool:
        return self._pipeline.running() and self._ownership.owns(self.keys.shard)


class Reaper:
    """Returns batches whose lease expired (a crashed reporter's) to retry, per owned shard."""

    def __init__(
        self, schema: KeySchema, store: Batches, ownership: ShardOwnership, stop: threading.Event
    ) -> None:
        self._schema = schema
        self._store = store
        self._ownership = ownership
        self._stop = stop

    def loop(self) -> bool:
        more = False
        for keys in self._schema.all_shards():
            if self._stop.is_set():
                return False
            if self._ownership.owns(keys.shard):
                reaped = self._store.reap(keys, REAP_PER_CALL)
                if reaped.retried or reaped.dead:
                    logger.info(
                        "reaped %d expired leases in shard %d (%d dead-lettered)",
                        reaped.retried + reaped.dead,
                        keys.shard,
                        reaped.dead,
                        extra={
                            "shard": keys.shard,
                            "reaped": reaped.retried + reaped.dead,
                            "dead": reaped.dead,
                        },
                    )
                more |= reaped.retried + reaped.dead == REAP_PER_CALL
        return more


class LeaseKeeper:
    """Extends the leases of batches this process is still sending (slow endpoints)."""

    def __init__(self, in_flight: InFlight, store: Batches) -> None:
        self._in_flight = in_flight
        self._store = store

    def loop(self) -> bool:
        for batch_id, keys, token in self._in_flight.snapshot():
            self._store.extend(keys, batch_id, token)
        return False


def guarded(name: str, work: Callable[[], bool]) -> Callable[[], bool | None]:
    """Run ``work``; Redis outages and bugs are logged (rate-limited), never raised.

    Returns what ``work`` returned, or None if it failed."""

    def run() -> bool | None:
        try:
            return work()
        except BackendUnavailable as exc:
            log_unavailable(name, exc)
            return None
        except Exception:
            ratelog.log(
                logging.ERROR,
                f"bug:{name}",
                "%s failed; it will run again",
                name,
                exc_info=True,
                extra={"job": name},
            )
            return None

    return run
