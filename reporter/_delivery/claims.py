"""Claiming: lease batches for sending, never more than the limiter allows requests now.

A claim takes a game's next batches (cut by count and bytes in ``claim.lua``); a take of
retries takes a shard's due retries.  Either hands over a ``Lease``, or None when no request
may go out.  A claim too few replicas confirmed (``[redis] wait_for_replicas``) is handed
back unsent: a failover could undo it.
"""

from __future__ import annotations

import contextlib
import logging
import threading

from collector.counters import Counter as C
from collector.logs import RateLimitedLog, counted
from collector.metrics import Metrics
from collector.store import BackendError, BackendUnreplicated, Claimed, RetryBatch, ShardKeys
from reporter._constants import RETRIES_PER_LOOP
from reporter._delivery.batches import Batches, new_id
from reporter._delivery.lease import Lease, Leased
from reporter._pacing.body_limit import BodyLimit
from reporter._pacing.permits import Permits

logger = logging.getLogger("reporter")
ratelog = RateLimitedLog(logger, interval=30.0)


class Claimer:
    def __init__(
        self,
        batches: Batches,
        permits: Permits,
        body_limit: BodyLimit,
        counts: Metrics,
        batch_size: int,
        max_batches_per_claim: int,
    ) -> None:
        self._batches = batches
        self._permits = permits
        self._body_limit = body_limit
        self._counts = counts
        self._batch_size = batch_size
        self._max_batches = max_batches_per_claim

    def claim(
        self, keys: ShardKeys, game: str, stop: threading.Event, wait: bool = True
    ) -> Lease | None:
        """The game's next batches, as many as requests may go out now.  ``wait``: wait for
        a token that is near (a full batch), else take only one that is there (a lingering
        game).  The lease's ``more`` says a full batch still waits."""
        grant = self._permits.take(self._max_batches, stop, wait, game)
        if not grant.granted:
            return None
        token = new_id()
        budget = self._body_limit.claim_budget() if self._body_limit.limit else (0, 0)
        try:
            claimed = self._batches.claim(keys, game, token, grant.granted, *budget)
        except BackendUnreplicated as exc:
            taken = exc.result if isinstance(exc.result, Claimed) else Claimed(0, 0, [], 0)
            self._hand_back(keys, token, [b.batch_id for b in taken.batches], exc)
            self._permits.refund(grant.granted)
            return None
        self._permits.refund(grant.granted - len(claimed.batches))
        if claimed.stale:
            self._counts.count(C.STALE, claimed.stale)
        if claimed.malformed:
            self._malformed(game, claimed.malformed)
        return Lease(
            keys,
            token,
            [Leased(game, b.batch_id, b.entries, 0) for b in claimed.batches],
            # An earlier batch of the game still pending (a sink in order): nothing more
            # until it is settled, whatever waits.
            more=claimed.remaining >= self._batch_size and not claimed.waiting,
        )

    def take_retries(self, keys: ShardKeys, stop: threading.Event, game: str = "") -> Lease | None:
        """The shard's due retries (of one game, or of any); the lease's ``more`` says more
        may be due."""
        grant = self._permits.take(RETRIES_PER_LOOP, stop, game=game)
        if not grant.granted:
            return None
        token = new_id()
        try:
            due = self._batches.take_retries(keys, token, grant.granted, game)
        except BackendUnreplicated as exc:
            taken: list[RetryBatch] = exc.result if isinstance(exc.result, list) else []
            self._hand_back(keys, token, [b.batch_id for b in taken], exc)
            self._permits.refund(grant.granted)
            return None
        self._permits.refund(grant.granted - len(due))
        return Lease(
            keys,
            token,
            [Leased(b.game, b.batch_id, b.entries, b.attempts) for b in due],
            more=len(due) == RETRIES_PER_LOOP,
        )

    def _hand_back(
        self, keys: ShardKeys, token: str, batch_ids: list[str], exc: BackendUnreplicated
    ) -> None:
        """Release batches whose claim too few replicas confirmed (a release charges no
        attempt; if it fails too, the lease runs out and the reaper returns them)."""
        released = 0
        for batch_id in batch_ids:
            with contextlib.suppress(BackendError):  # the reaper returns it after its lease
                released += self._batches.release(keys, batch_id, token)
        self._counts.add({C.BATCHES_UNREPLICATED: len(batch_ids), C.BATCHES_RELEASED: released})
        ratelog.log(
            logging.WARNING,
            "unreplicated",
            "claim of %s on shard %d handed back unsent: %s",
            counted(len(batch_ids), "batch", "batches"),
            keys.shard,
            exc,
        )

    def _malformed(self, game: str, count: int) -> None:
        self._counts.add({C.MALFORMED_ENTRIES: count, C.DEAD_EVENTS: count, C.DEAD_BATCHES: count})
        ratelog.log(
            logging.ERROR,
            "malformed",
            "%d malformed entries in the buffer of game %r (not a collect time and one "
            "line of event) were dead-lettered alone, reason 'malformed entry'; their "
            "neighbours go on (see: telemetry-reporter dead list)",
            count,
            game,
        )
