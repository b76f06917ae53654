"""Settling: what became of a batch, in one store call, counted and logged once.

An outcome comes in (from an attempt, or "every event was stale"); out go one store call
(ack, settle item by item, nack into the retry set or the dead letters, release unsent), the
counters, and at most one log line.  A delivered batch is not acked at once: it waits in
``InFlight`` for the rest of its lease, and ``acknowledge`` acks them together in one round trip.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence

import orjson

from collector.counters import Counter as C
from collector.logs import RateLimitedLog, counted
from collector.metrics import Metrics
from collector.store import Ack, BackendError, BackendUnreplicated, RetryState, Settled, ShardKeys
from reporter._constants import HELD_BATCH_DELAY_SECONDS
from reporter._delivery.batches import Batches, Partial
from reporter._delivery.freshness import Fresh
from reporter._delivery.in_flight import Delivered, InFlight, ToAck
from reporter._delivery.lease import Leased, Result
from reporter._logging import batch_fields
from reporter._senders.outcome import DELIVERED, MALFORMED, REJECTED, Outcome, Refusal
from reporter._sinks.base import LateDrop

logger = logging.getLogger("reporter")
ratelog = RateLimitedLog(logger, interval=30.0)
# "HTTP 503", "nppa 1011": the code at the start of a reason that has no ``code`` field.
_REASON_CODE = re.compile(r"(?:HTTP|nppa) \d{1,5}\b")


def log_kind(outcome: Outcome) -> str:
    """What a log line about a failed batch is rate-limited by: the outcome's code (the HTTP
    status or the transport error's type) or the code its alert or reason starts with; never
    the endpoint's own text, which may differ at every answer (a request id), nor a game's
    name, which whoever writes to Redis chooses."""
    if outcome.code:
        return outcome.code[:40]
    for text in (outcome.alert.cause if outcome.alert else "", outcome.reason):
        if code := _REASON_CODE.match(text):
            return code.group()
    return "other"


class Settler:
    def __init__(self, batches: Batches, in_flight: InFlight, counts: Metrics) -> None:
        self._batches = batches
        self._in_flight = in_flight
        self._counts = counts

    def track(self, keys: ShardKeys, batch_ids: Sequence[str], token: str) -> None:
        """Every batch of a lease is in flight from the start, so the lease keeper renews the
        leases of those still waiting behind a slow request."""
        for batch_id in batch_ids:
            self._in_flight.add(keys, batch_id, token)

    def settle(
        self, keys: ShardKeys, token: str, batch: Leased, fresh: Fresh, outcome: Outcome
    ) -> Result:
        """Finish a batch the endpoint answered (``fresh``: what was sent of it)."""
        if outcome.hold:
            return self._held_back(keys, token, batch, outcome.hold)
        if outcome.alert:
            self._alert(batch, outcome, outcome.alert)
        if outcome.moved:
            self._note_late(keys, batch, outcome)
        if outcome.partial:
            return self._partial(keys, token, batch, fresh, outcome)
        if outcome.kind == DELIVERED:
            # Acked with the rest of its lease (one round trip); stop() acks it if it must.
            done = Delivered(batch.game, fresh.stale)
            if not self._in_flight.mark_delivered(batch.batch_id, done):  # stop() gave it back
                self.acknowledge([(batch.batch_id, keys, token, done)])
            return Result.DELIVERED
        return self._nack(keys, token, batch, outcome)

    def all_stale(self, keys: ShardKeys, token: str, batch_id: str, stale: int) -> Result:
        """A batch none of whose events is fresh enough to send: acked, counted stale."""
        try:
            self._batches.ack(keys, batch_id, token, stale=stale)
        except BackendUnreplicated as exc:
            self._unconfirmed(exc)
        self._counts.add({C.STALE: stale, C.BATCHES_STALE: 1})
        return Result.STALE

    def renew(self, keys: ShardKeys, batch_id: str, token: str) -> bool:
        """Renew a batch's lease right before its request; False if it was lost (counted)."""
        if self._batches.extend(keys, batch_id, token):
            return True
        self._counts.count(C.LEASE_LOST)
        return False

    def release_unsent(self, keys: ShardKeys, token: str, batch_ids: Sequence[str]) -> None:
        """Hand back batches not sent (stopping, or the endpoint started failing): no attempt
        is charged."""
        released = sum(self._batches.release(keys, batch_id, token) for batch_id in batch_ids)
        self._counts.count(C.BATCHES_RELEASED, released)

    def finish(self, batch_ids: Sequence[str]) -> None:
        """The lease is over: ack its delivered batches together, let go of the rest."""
        try:
            self.acknowledge(self._in_flight.take_delivered(batch_ids))
        finally:
            for batch_id in batch_ids:
                self._in_flight.drop(batch_id)

    def acknowledge(self, delivered: Sequence[ToAck]) -> list[str]:
        """Ack delivered batches in one round trip (one per node on a cluster) and count
        them; returns the ids of those whose ack failed.

        A batch whose ack fails stays in flight and is sent again when its lease runs out."""
        if not delivered:
            return []
        replies = self._batches.ack_many(
            [Ack(keys, batch_id, token, d.stale) for batch_id, keys, token, d in delivered]
        )
        replies = [self._ack_reply(reply) for reply in replies]
        for (batch_id, _, _, d), reply in zip(delivered, replies, strict=True):
            self._count_ack(batch_id, d, reply)
        return [
            batch_id
            for (batch_id, _, _, _), reply in zip(delivered, replies, strict=True)
            if isinstance(reply, BackendError)
        ]

    def _ack_reply(self, reply: int | BackendError) -> int | BackendError:
        if isinstance(reply, BackendUnreplicated) and isinstance(reply.result, int):
            self._unconfirmed(reply)
            return reply.result
        return reply

    def _count_ack(self, batch_id: str, d: Delivered, reply: int | BackendError) -> None:
        if isinstance(reply, BackendError):
            ratelog.log(
                logging.WARNING,
                "ack",
                "could not acknowledge delivered batch %s of game %r (%s: %s); it will "
                "be sent again when its lease runs out",
                batch_id,
                d.game,
                type(reply).__name__,
                reply,
                extra=batch_fields(d.game, batch_id),
            )
            self._counts.count(C.ACK_FAILED)
        elif reply < 0:
            logger.warning(
                "batch %s of game %r was delivered after its lease ran out; it may be sent again",
                batch_id,
                d.game,
                extra=batch_fields(d.game, batch_id),
            )
            self._counts.count(C.LEASE_LOST)
        else:
            self._counts.add({C.DELIVERED: reply, C.STALE: d.stale, C.BATCHES_DELIVERED: 1})

    def _held_back(self, keys: ShardKeys, token: str, batch: Leased, hold: Refusal) -> Result:
        """The endpoint refused our identity or configuration: sending is held in a scope
        (``Holds``) and the batch goes back to wait for the fix, no attempt charged, never
        a dead letter."""
        self._counts.count(C.CONFIG_ERRORS)
        try:
            self._batches.note_alert(hold.cause, str(hold))
        except Exception as exc:  # status misses one line; the log and the count have it
            logger.warning("could not record the alert for status (%s)", exc)
        return self.hold_back(keys, token, batch)

    def hold_back(self, keys: ShardKeys, token: str, batch: Leased) -> Result:
        """A batch of a held game goes back, no attempt charged, due again a moment later
        (not at once: while the hold lasts it would come straight back)."""
        delay_ms = int(HELD_BATCH_DELAY_SECONDS * 1000)
        if self._batches.release(keys, batch.batch_id, token, delay_ms):
            self._counts.count(C.BATCHES_RELEASED)
        return Result.RELEASED

    def _note_late(self, keys: ShardKeys, batch: Leased, outcome: Outcome) -> None:
        """Items were sent with their behaviour time moved into the window: those the
        endpoint took are counted (``late_sent``) and their original times kept in the
        shard's audit list."""
        skipped = {i for i, _ in outcome.refused} | set(outcome.retry_items)
        moved = [m for m in outcome.moved if m.position not in skipped]
        if not moved:
            return
        record = orjson.dumps(
            {
                "at": int(time.time()),
                "game": batch.game,
                "batch_id": batch.batch_id,
                "items": [[m.si, m.bt, m.ot, m.sent] for m in moved],
            }
        ).decode()
        self._counts.count(C.LATE_SENT, len(moved))
        try:
            self._batches.note_late(keys, len(moved), record)
        except BackendError as exc:
            ratelog.log(
                logging.ERROR,
                "late",
                "could not keep the audit record of %d late "
                "items of game %r sent with their time moved (%s): %s",
                len(moved),
                batch.game,
                exc,
                record,
            )

    def note_stale(
        self,
        keys: ShardKeys,
        batch: Leased,
        fresh: Fresh,
        note: Callable[[str, str, Sequence[bytes]], LateDrop],
    ) -> None:
        """Events of the batch dropped as stale that the sink has a word on (the
        anti-addiction sink: logins and logouts, counted apart, each one's session and time
        kept in the shard's late list)."""
        drop = note(batch.game, batch.batch_id, fresh.stale_events(batch.entries))
        if drop.audit_lost:
            self._counts.count(C.AUDIT_LINES_LOST, drop.audit_lost)
        if not drop.items:
            return
        self._counts.add({C.STALE_LOGINS: drop.logins, C.STALE_LOGOUTS: drop.logouts})
        record = orjson.dumps(
            {
                "at": int(time.time()),
                "game": batch.game,
                "batch_id": batch.batch_id,
                "dropped": drop.items,
            }
        ).decode()
        try:
            self._batches.note_late(keys, 0, record, drop.logins, drop.logouts)
        except BackendError as exc:
            ratelog.log(
                logging.ERROR,
                "late",
                "could not keep the record of %d stale items of game %r (%s): %s",
                len(drop.items),
                batch.game,
                exc,
                record,
            )

    def _unconfirmed(self, exc: BackendUnreplicated) -> None:
        """An ack or settle too few replicas confirmed: it stands (a failover may undo it,
        and the batch would be sent again); counted, and its result used."""
        self._counts.count(C.ACKS_UNREPLICATED)
        ratelog.log(logging.WARNING, "unreplicated-ack", "ack not confirmed by replicas: %s", exc)

    def _nack(self, keys: ShardKeys, token: str, batch: Leased, outcome: Outcome) -> Result:
        """The whole batch failed: into the retry set, or the dead letters."""
        game, batch_id, attempt = batch.game, batch.batch_id, batch.attempts + 1
        result = self._batches.nack(
            keys,
            batch_id,
            token,
            permanent=outcome.kind == REJECTED,
            min_delay_ms=int(outcome.retry_after * 1000),
            reason=outcome.reason,
        )
        if result.state == RetryState.DEAD:
            ratelog.log(
                logging.ERROR,
                f"dead:{log_kind(outcome)}",
                "batch %s of game %r dead-lettered (%s) after %s: %s",
                batch_id,
                game,
                counted(len(batch.entries), "event"),
                counted(attempt, "attempt"),
                outcome.reason,
                extra=batch_fields(
                    game, batch_id, keys.shard, attempt, outcome.reason, events=len(batch.entries)
                ),
            )
            self._counts.add({C.DEAD_BATCHES: 1, C.DEAD_EVENTS: len(batch.entries)})
            return Result.DEAD
        if result.state == RetryState.RETRY:
            ratelog.log(
                logging.WARNING,
                "retry",
                "endpoint failed (%s); batch %s of game %r retries in %.1fs, new claims paused",
                outcome.reason,
                batch_id,
                game,
                result.delay_ms / 1000,
                extra=batch_fields(
                    game,
                    batch_id,
                    keys.shard,
                    attempt,
                    outcome.reason,
                    retry_in=result.delay_ms / 1000,
                ),
            )
            self._counts.count(C.BATCHES_RETRIED)
            return Result.RETRY
        return Result.LOST

    def _alert(self, batch: Leased, outcome: Outcome, alert: Refusal) -> None:
        """The endpoint refused what only the operator can fix: say so loudly, count it, and
        leave it for ``status``."""
        self._counts.count(C.CONFIG_ERRORS)
        ratelog.log(
            logging.ERROR,
            f"alert:{log_kind(outcome)}",
            "batch %s of game %r refused (%s): %s; it is dead-lettered: replay it once fixed",
            batch.batch_id,
            batch.game,
            outcome.reason,
            alert,
            extra=batch_fields(
                batch.game, batch.batch_id, reason=outcome.reason, alert=alert.cause
            ),
        )
        try:
            self._batches.note_alert(alert.cause, str(alert))
        except Exception as exc:  # status misses one line; the log and the count have it
            logger.warning("could not record the alert for status (%s)", exc)

    def _partial(
        self, keys: ShardKeys, token: str, batch: Leased, fresh: Fresh, outcome: Outcome
    ) -> Result:
        """Finish a batch the endpoint answered item by item, in one store call."""
        game, batch_id = batch.game, batch.batch_id
        try:
            part = Partial(
                stale=fresh.stale,
                retry=[fresh.position(i) for i in outcome.retry_items],
                refused=[(fresh.position(i), reason) for i, reason in outcome.refused],
                min_delay_ms=int(outcome.retry_after * 1000),
                reason=outcome.reason,
            )
            settled = self._batches.settle(keys, batch_id, token, part)
        except BackendUnreplicated as exc:
            if not isinstance(exc.result, Settled):
                raise
            self._unconfirmed(exc)
            settled = exc.result
        if settled.delivered < 0:
            logger.warning(
                "batch %s of game %r was answered after its lease ran out; it may be sent again",
                batch_id,
                game,
                extra=batch_fields(game, batch_id, keys.shard),
            )
            self._counts.count(C.LEASE_LOST)
            return Result.LOST
        amounts = {
            C.DELIVERED: settled.delivered,
            C.STALE: fresh.stale,
            C.BATCHES_DELIVERED: int(settled.delivered > 0),
        }
        if outcome.refused:
            refused = len(outcome.refused)
            malformed = sum(reason == MALFORMED for _, reason in outcome.refused)
            amounts.update(
                {
                    C.REJECTED_ITEMS: refused - malformed,
                    C.MALFORMED_ENTRIES: malformed,
                    C.DEAD_EVENTS: refused,
                    C.DEAD_BATCHES: 1,
                }
            )
            if malformed:
                ratelog.log(
                    logging.ERROR,
                    "malformed",
                    "%d of %d events of batch %s of game %r are not one JSON value "
                    "each (written to Redis by something else than the SDK); never "
                    "sent, dead-lettered as %s, reason 'malformed entry'",
                    malformed,
                    len(fresh.events),
                    batch_id,
                    game,
                    settled.refused_id,
                    extra=batch_fields(
                        game,
                        batch_id,
                        keys.shard,
                        reason=MALFORMED,
                        refused=malformed,
                        dead_letter=settled.refused_id,
                    ),
                )
            if refused > malformed:
                first = next(r for _, r in outcome.refused if r != MALFORMED)
                ratelog.log(
                    logging.ERROR,
                    "refused",
                    "endpoint refused %d of %d events of batch %s of game %r (first: "
                    "%s); dead-lettered as %s",
                    refused - malformed,
                    len(fresh.events),
                    batch_id,
                    game,
                    first,
                    settled.refused_id,
                    extra=batch_fields(
                        game,
                        batch_id,
                        keys.shard,
                        reason=outcome.reason,
                        refused=refused,
                        dead_letter=settled.refused_id,
                    ),
                )
        if settled.retry_state == RetryState.RETRY:
            amounts[C.BATCHES_RETRIED] = 1
        elif settled.retry_state == RetryState.DEAD:
            amounts[C.DEAD_BATCHES] = amounts.get(C.DEAD_BATCHES, 0) + 1
            amounts[C.DEAD_EVENTS] = amounts.get(C.DEAD_EVENTS, 0) + len(outcome.retry_items)
        self._counts.add(amounts)
        return Result.RETRY if settled.retry_state == RetryState.RETRY else Result.PARTIAL
