"""Deliver one claimed batch: drop what is stale, send the rest, record the outcome."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from collector.counters import Counter as C
from collector.counters import Histogram
from collector.logs import RateLimitedLog
from collector.metrics import Metrics
from collector.store import (
    Ack,
    BackendError,
    BackendUnreplicated,
    Claimed,
    RetryBatch,
    Settled,
    ShardKeys,
)
from reporter._config import ReporterSettings
from reporter._constants import CONTENDED_SECONDS, LIMITER_WAIT_SECONDS, RETRIES_PER_LOOP
from reporter._delivery.attempt import Attempt
from reporter._delivery.batches import Batches, new_id
from reporter._delivery.body_limit import JSON_BODY, BodyLimit
from reporter._delivery.freshness import Fresh, Freshness, split_fresh
from reporter._delivery.gate import SinkGate
from reporter._delivery.limiter import ClaimLimiter, Permit, Unlimited
from reporter._logging import batch_fields
from reporter._senders.outcome import DELIVERED, REJECTED, Outcome
from reporter._senders.sender import Sender

logger = logging.getLogger("reporter")
ratelog = RateLimitedLog(logger, interval=30.0)

Clock = Callable[[], float]  # wall-clock seconds, injectable for tests
# One leased batch waiting to be sent: (game, batch id, entries, earlier failed attempts).
Leased = tuple[str, str, list[bytes], int]


@dataclass(frozen=True, slots=True)
class Delivered:
    """A batch the endpoint accepted, waiting to be acknowledged in Redis."""

    game: str
    stale: int


# A held batch taken out for its ack: (batch id, shard, lease token, what was delivered).
ToAck = tuple[str, ShardKeys, str, Delivered]


@dataclass
class Held:
    """Batches this process holds a lease on, so they can be extended, released or, once
    delivered, acknowledged.  Whoever takes a batch out (its worker or ``stop()``) finishes
    it, so it is never both released and acknowledged."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    batches: dict[str, tuple[ShardKeys, str]] = field(default_factory=dict)
    delivered: dict[str, Delivered] = field(default_factory=dict)
    # Taken out by their worker for the ack, until it is done: what a stop that cannot wait
    # for a hung Redis leaves to lease expiry.
    acking: set[str] = field(default_factory=set)

    def add(self, keys: ShardKeys, batch_id: str, token: str) -> None:
        with self.lock:
            self.batches[batch_id] = (keys, token)

    def drop(self, batch_id: str) -> None:
        with self.lock:
            self.batches.pop(batch_id, None)
            self.delivered.pop(batch_id, None)
            self.acking.discard(batch_id)

    def mark_delivered(self, batch_id: str, delivered: Delivered) -> bool:
        """Note a delivered batch for a later ack; False if it is no longer held."""
        with self.lock:
            if batch_id not in self.batches:
                return False
            self.delivered[batch_id] = delivered
            return True

    def take_delivered(self, batch_ids: Sequence[str]) -> list[ToAck]:
        with self.lock:
            out = []
            for batch_id in batch_ids:
                delivered = self.delivered.pop(batch_id, None)
                if delivered is not None:
                    keys, token = self.batches.pop(batch_id)
                    self.acking.add(batch_id)
                    out.append((batch_id, keys, token, delivered))
            return out

    def being_acked(self) -> list[str]:
        with self.lock:
            return sorted(self.acking)

    def take_all(self) -> tuple[list[tuple[str, ShardKeys, str]], list[ToAck]]:
        """Everything held: (to release, to acknowledge)."""
        with self.lock:
            batches, self.batches = self.batches, {}
            delivered, self.delivered = self.delivered, {}
        to_ack = [(b, keys, token, delivered[b]) for b, (keys, token) in batches.items()
                  if b in delivered]
        to_release = [(b, keys, token) for b, (keys, token) in batches.items()
                      if b not in delivered]
        return to_release, to_ack

    def snapshot(self) -> list[tuple[str, ShardKeys, str]]:
        with self.lock:
            return [(b, k, t) for b, (k, t) in self.batches.items()]

    def __len__(self) -> int:
        return len(self.batches)


class Deliverer:
    def __init__(self, store: Batches, sender: Sender, settings: ReporterSettings,
                 clock: Clock, held: Held, counts: Metrics, gate: SinkGate,
                 limiter: ClaimLimiter | None = None, freshness: Freshness | None = None,
                 body_limit: BodyLimit | None = None) -> None:
        self._store = store
        self._sender = sender
        self.body_limit = body_limit or BodyLimit(0, JSON_BODY)
        self._attempt = Attempt(sender, self.body_limit, self._answered)
        self._settings = settings
        self._clock = clock
        self.held = held
        self.counts = counts
        self.gate = gate
        self.limiter = limiter or Unlimited()
        self._scarce_at = float("-inf")
        self.freshness = freshness or Freshness.of(settings)

    def drain(self, keys: ShardKeys, game: str, stop: threading.Event, wait: bool = True
              ) -> bool:
        """Claim the game's next batches, as many as the limiter allows requests now, and
        send them; True if a full batch still waits.  ``wait``: wait for a token that is
        near (a full batch), else take only one that is there (a lingering game)."""
        permit = self._permit(self._settings.max_batches_per_claim, stop, wait)
        if not permit.granted:
            return False
        token = new_id()
        budget = self.body_limit.claim_budget() if self.body_limit.limit else (0, 0)
        try:
            claimed = self._store.claim(keys, game, token, permit.granted, *budget)
        except BackendUnreplicated as exc:
            claimed = exc.result if isinstance(exc.result, Claimed) else Claimed(0, 0, [], 0)
            self._hand_back(keys, token, [b.batch_id for b in claimed.batches], exc)
            self.limiter.refund(permit.granted)
            return False
        if len(claimed.batches) < permit.granted:
            self.limiter.refund(permit.granted - len(claimed.batches))
        if claimed.stale:
            self.counts.count(C.STALE, claimed.stale)
        if claimed.malformed:
            self._malformed(game, claimed.malformed)
        self.deliver_all(keys, token, [(game, b.batch_id, b.entries, 0) for b in claimed.batches],
                         stop)
        return claimed.remaining >= self._settings.batch_size

    def _permit(self, requests: int, stop: threading.Event, wait: bool = True) -> Permit:
        """Permission for up to ``requests`` requests.  With ``wait`` (a full batch), a
        refusal marks the requests as scarce, and a token that is near is waited for (a
        sweep's poll interval would leave the limit unused that long); without, only a token
        that is there is taken."""
        permit = self.limiter.acquire(requests, spare=not wait)
        if permit.scarce:
            self._scarce_at = time.monotonic()
        if permit.granted or not wait:
            return permit
        if permit.wait <= LIMITER_WAIT_SECONDS and not stop.wait(permit.wait):
            permit = self.limiter.acquire(requests)
        return permit

    @property
    def contended(self) -> bool:
        """Whether the limiter said lately that requests are scarce (in any process)."""
        return time.monotonic() - self._scarce_at < CONTENDED_SECONDS

    def send_retries(self, keys: ShardKeys, stop: threading.Event, game: str = "") -> bool:
        """Take the shard's due retries (of one game, or of any) and send them; True if there
        may be more."""
        permit = self._permit(RETRIES_PER_LOOP, stop)
        if not permit.granted:
            return False
        token = new_id()
        try:
            due = self._store.take_retries(keys, token, permit.granted, game)
        except BackendUnreplicated as exc:
            taken: list[RetryBatch] = exc.result if isinstance(exc.result, list) else []
            self._hand_back(keys, token, [b.batch_id for b in taken], exc)
            self.limiter.refund(permit.granted)
            return False
        if len(due) < permit.granted:
            self.limiter.refund(permit.granted - len(due))
        self.deliver_all(keys, token, [(b.game, b.batch_id, b.entries, b.attempts) for b in due],
                         stop)
        return len(due) == RETRIES_PER_LOOP

    def _hand_back(self, keys: ShardKeys, token: str, batch_ids: list[str],
                   exc: BackendUnreplicated) -> None:
        """Release batches whose claim too few replicas confirmed: a failover could undo the
        claim, so they are not sent (a release charges no attempt; if it fails too, the
        lease runs out and the reaper returns them)."""
        released = 0
        for batch_id in batch_ids:
            with contextlib.suppress(BackendError):  # the reaper returns it after its lease
                released += self._store.release(keys, batch_id, token)
        self.counts.add({C.BATCHES_UNREPLICATED: len(batch_ids), C.BATCHES_RELEASED: released})
        ratelog.log(logging.WARNING, "unreplicated",
                    "claim of %d batches on shard %d handed back unsent: %s", len(batch_ids),
                    keys.shard, exc)

    def _unconfirmed(self, exc: BackendUnreplicated) -> None:
        """An ack or settle too few replicas confirmed: it stands (a failover may undo it,
        and the batch would be sent again); counted, and its result used."""
        self.counts.count(C.ACKS_UNREPLICATED)
        ratelog.log(logging.WARNING, "unreplicated-ack", "ack not confirmed by replicas: %s",
                    exc)

    def _ack_reply(self, reply: int | BackendError) -> int | BackendError:
        if isinstance(reply, BackendUnreplicated) and isinstance(reply.result, int):
            self._unconfirmed(reply)
            return reply.result
        return reply

    def deliver_all(self, keys: ShardKeys, token: str, batches: Sequence[Leased],
                    stop: threading.Event) -> list[str]:
        """Send batches leased together, one after another, then ack the delivered ones in
        one round trip; what became of each batch sent ("delivered", "retry", "dead",
        "stale", "partial" or "lost").

        All of them are held from the start, so the LeaseKeeper renews the leases of those
        still waiting behind a slow POST.  Once the process is stopping or the endpoint has
        started failing, the ones not yet sent are released without charging an attempt."""
        results: list[str] = []
        for _, batch_id, _, _ in batches:
            self.held.add(keys, batch_id, token)
        try:
            for i, (game, batch_id, entries, attempts) in enumerate(batches):
                if stop.is_set() or not self.gate.is_open():
                    released = sum(self._store.release(keys, rest, token)
                                   for _, rest, _, _ in batches[i:])
                    self.counts.count(C.BATCHES_RELEASED, released)
                    break
                results.append(self._deliver(keys, game, batch_id, token, entries, attempts,
                                             stop))
        finally:
            self._finish([batch_id for _, batch_id, _, _ in batches])
        return results

    def _finish(self, batch_ids: list[str]) -> None:
        try:
            self.acknowledge(self.held.take_delivered(batch_ids))
        finally:
            for batch_id in batch_ids:
                self.held.drop(batch_id)

    def acknowledge(self, delivered: Sequence[ToAck]) -> list[str]:
        """Ack delivered batches in one round trip (one per node on a cluster) and count them;
        returns the ids of those whose ack failed.

        A batch whose ack fails stays in flight and is sent again when its lease runs out."""
        if not delivered:
            return []
        replies = self._store.ack_many([Ack(keys, batch_id, token, d.stale)
                                        for batch_id, keys, token, d in delivered])
        replies = [self._ack_reply(reply) for reply in replies]
        for (batch_id, _, _, d), reply in zip(delivered, replies, strict=True):
            self._count_ack(batch_id, d, reply)
        return [batch_id for (batch_id, _, _, _), reply in zip(delivered, replies, strict=True)
                if isinstance(reply, BackendError)]

    def _count_ack(self, batch_id: str, d: Delivered, reply: int | BackendError) -> None:
        if isinstance(reply, BackendError):
            ratelog.log(logging.WARNING, "ack",
                        "could not acknowledge delivered batch %s of game %r (%s: %s); it will "
                        "be sent again when its lease runs out", batch_id, d.game,
                        type(reply).__name__, reply, extra=batch_fields(d.game, batch_id))
            self.counts.count(C.ACK_FAILED)
        elif reply < 0:
            logger.warning("batch %s of game %r was delivered after its lease ran out; "
                           "it may be sent again", batch_id, d.game,
                           extra=batch_fields(d.game, batch_id))
            self.counts.count(C.LEASE_LOST)
        else:
            self.counts.add({C.DELIVERED: reply, C.STALE: d.stale, C.BATCHES_DELIVERED: 1})

    def _malformed(self, game: str, count: int) -> None:
        self.counts.add({C.MALFORMED_ENTRIES: count, C.DEAD_EVENTS: count,
                         C.DEAD_BATCHES: count})
        ratelog.log(logging.ERROR, f"malformed:{game}",
                    "%d malformed entries in the buffer of game %r (not a collect time and one "
                    "line of event) were dead-lettered alone, reason 'malformed entry'; their "
                    "neighbours go on (see: telemetry-reporter dead list)", count, game)

    def _answered(self, outcome: Outcome, seconds: float, events: int) -> None:
        """Every answer of the endpoint (a POST of ``events`` that took ``seconds``): the
        gate learns whether it is failing, and its own rate limit pauses every reporter."""
        self.counts.observe(Histogram.POST_DURATION_SECONDS, seconds)
        self.counts.observe(Histogram.BATCH_SIZE_EVENTS, events)
        self.gate.record(outcome)
        if outcome.pause_all:
            self.limiter.pause(outcome.pause_all)

    def _deliver(self, keys: ShardKeys, game: str, batch_id: str, token: str,
                 entries: list[bytes], attempts: int, stop: threading.Event) -> str:
        fresh = split_fresh(entries, int(self._clock() * 1000), self.freshness)
        stale = fresh.stale
        if not fresh.events:
            try:
                self._store.ack(keys, batch_id, token, stale=stale)
            except BackendUnreplicated as exc:
                self._unconfirmed(exc)
            self.counts.add({C.STALE: stale, C.BATCHES_STALE: 1})
            return "stale"
        outcome = self._attempt.send(game, batch_id, fresh.events, attempts + 1,
                                     lambda: self._permit(1, stop).granted > 0)
        if outcome.alert:
            self._alert(game, batch_id, outcome)
        if outcome.partial:
            return self._settle(keys, game, batch_id, token, fresh, outcome)
        if outcome.kind == DELIVERED:
            # Acked with the rest of its claim (one round trip); stop() acks it if it must.
            done = Delivered(game, stale)
            if not self.held.mark_delivered(batch_id, done):  # stop() has given it back
                self.acknowledge([(batch_id, keys, token, done)])
            return DELIVERED
        permanent = outcome.kind == REJECTED
        result = self._store.nack(keys, batch_id, token, permanent=permanent,
                                  min_delay_ms=int(outcome.retry_after * 1000),
                                  reason=outcome.reason)
        if result.state == "dead":
            ratelog.log(logging.ERROR, f"dead:{outcome.reason[:40]}",
                        "batch %s of game %r dead-lettered (%d events) after %d attempts: %s",
                        batch_id, game, len(entries), attempts + 1, outcome.reason,
                        extra=batch_fields(game, batch_id, keys.shard, attempts + 1,
                                           outcome.reason, events=len(entries)))
            self.counts.add({C.DEAD_BATCHES: 1, C.DEAD_EVENTS: len(entries)})
        elif result.state == "retry":
            ratelog.log(logging.WARNING, "retry",
                        "endpoint failed (%s); batch %s of game %r retries in %.1fs, "
                        "new claims paused", outcome.reason, batch_id, game,
                        result.delay_ms / 1000,
                        extra=batch_fields(game, batch_id, keys.shard, attempts + 1,
                                           outcome.reason, retry_in=result.delay_ms / 1000))
            self.counts.count(C.BATCHES_RETRIED)
        return result.state

    def _alert(self, game: str, batch_id: str, outcome: Outcome) -> None:
        """The endpoint refused what only the operator can fix: say so loudly, count it, and
        leave it for ``status``."""
        self.counts.count(C.CONFIG_ERRORS)
        name = outcome.alert.partition(":")[0]
        ratelog.log(logging.ERROR, f"alert:{name}", "batch %s of game %r refused (%s): %s; it is "
                    "dead-lettered: replay it once fixed", batch_id, game, outcome.reason,
                    outcome.alert, extra=batch_fields(game, batch_id, reason=outcome.reason,
                                                      alert=name))
        try:
            self._store.note_alert(name, outcome.alert)
        except Exception as exc:  # status misses one line; the log and the count have it
            logger.warning("could not record the alert for status (%s)", exc)

    def _settle(self, keys: ShardKeys, game: str, batch_id: str, token: str, fresh: Fresh,
                outcome: Outcome) -> str:
        """Finish a batch the endpoint answered item by item, in one store call."""
        try:
            settled = self._store.settle(
                keys, batch_id, token, stale=fresh.stale,
                retry=[fresh.position(i) for i in outcome.retry_items],
                refused=[(fresh.position(i), reason) for i, reason in outcome.refused],
                min_delay_ms=int(outcome.retry_after * 1000), reason=outcome.reason)
        except BackendUnreplicated as exc:
            if not isinstance(exc.result, Settled):
                raise
            self._unconfirmed(exc)
            settled = exc.result
        if settled.delivered < 0:
            logger.warning("batch %s of game %r was answered after its lease ran out; "
                           "it may be sent again", batch_id, game,
                           extra=batch_fields(game, batch_id, keys.shard))
            self.counts.count(C.LEASE_LOST)
            return "lost"
        amounts = {C.DELIVERED: settled.delivered, C.STALE: fresh.stale,
                   C.BATCHES_DELIVERED: int(settled.delivered > 0)}
        if outcome.refused:
            refused = len(outcome.refused)
            amounts.update({C.REJECTED_ITEMS: refused, C.DEAD_EVENTS: refused,
                            C.DEAD_BATCHES: 1})
            ratelog.log(logging.ERROR, f"refused:{game}",
                        "endpoint refused %d of %d events of batch %s of game %r (first: %s); "
                        "dead-lettered as %s", refused, len(fresh.events), batch_id, game,
                        outcome.refused[0][1], settled.refused_id,
                        extra=batch_fields(game, batch_id, keys.shard, reason=outcome.reason,
                                           refused=refused, dead_letter=settled.refused_id))
        if settled.retry_state == "retry":
            amounts[C.BATCHES_RETRIED] = 1
        elif settled.retry_state == "dead":
            amounts[C.DEAD_BATCHES] = amounts.get(C.DEAD_BATCHES, 0) + 1
            amounts[C.DEAD_EVENTS] = (amounts.get(C.DEAD_EVENTS, 0)
                                      + len(outcome.retry_items))
        self.counts.add(amounts)
        return "partial"
