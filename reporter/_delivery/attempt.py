"""One attempt at a batch: send it, and when the endpoint refuses the body as a whole for what
a few events do to it, find those events and send the rest.

- An event that is not exactly one JSON value (written to Redis by hand or by another tool):
  placed in a body it would break it, or close the ``events`` array early and forge the
  envelope (another game, another batch id).  Every event is checked before the first
  request; those that fail are refused, "malformed entry", and the rest is sent.
- HTTP 413 (too large): the events are sent again in halves, each half halved again while it
  is refused, down to a single event, which alone is refused: "too large for the endpoint".
  Only bodies of more than one event lower ``BodyLimit``: to the largest body taken then
  (never below one event of ``[buffer] max_event_bytes``); a larger body taken later (a
  probe) raises it again.

Each part is a request of its own, with an Idempotency-Key derived from the batch id
(``<id>.a``/``<id>.b`` for halves) and a permit of the rate limiter.  What became of every
event is one partial ``Outcome``, which the settler settles in one store call.  Without a
413 or a malformed event the endpoint's answer is returned as it is.  Every answer heard on
the way comes back too (``Sent.answers``), with its seconds and events, for the caller's
histograms, gate and limiter.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import msgspec

from collector.counters import Counter as C
from collector.counters import Histogram
from collector.metrics import NO_METRICS, Metrics
from reporter._pacing.body_limit import BodyLimit
from reporter._senders.outcome import (
    DELIVERED,
    MALFORMED,
    REJECTED,
    MovedItem,
    Outcome,
    Refusal,
    SendErrors,
)
from reporter._sinks.registry import Sender

TOO_LARGE = "too large for the endpoint (HTTP 413)"
# Checks that a text is one JSON value (RFC 8259) without building it: about a fifth of the
# CPU of orjson.loads, which made Python objects of every event only to drop them.  It skips
# strings without checking their UTF-8, which a decode does.  Nesting deeper than the
# interpreter's recursion limit is refused too.
_ONE_VALUE = msgspec.json.Decoder(msgspec.Raw)
_NOT_ONE_VALUE = (msgspec.DecodeError, RecursionError, UnicodeDecodeError)


class Answer(NamedTuple):
    """One answer of the endpoint: to a POST of ``events`` that took ``seconds``."""

    outcome: Outcome
    seconds: float
    events: int


class Sent(NamedTuple):
    """What an attempt came to, and every answer heard on the way."""

    outcome: Outcome
    answers: list[Answer]


@dataclass
class _Parts:
    """What became of a batch's events (by index) as its parts were answered."""

    refused: dict[int, str] = field(default_factory=dict)
    retry: list[int] = field(default_factory=list)
    reason: str = ""
    retry_after: float = 0.0
    pause_all: float = 0.0
    alert: Refusal | None = None
    refused_bytes: int = 0  # the smallest body refused as too large (0: none yet)
    accepted_bytes: int = 0  # the largest body taken
    moved: list[MovedItem] = field(default_factory=list)  # by index in the whole batch

    def outcome(self) -> Outcome:
        return Outcome(
            DELIVERED,
            self.reason,
            self.retry_after,
            tuple(sorted(self.refused.items())),
            tuple(sorted(self.retry)),
            self.pause_all,
            self.alert,
            moved=tuple(self.moved),
        )


@dataclass(frozen=True, slots=True)
class _Batch:
    """One attempt at a batch that goes out in parts, and the answers heard so far."""

    game: str
    batch_id: str
    events: Sequence[bytes]
    attempt: int
    permit: Callable[[], bool]
    answers: list[Answer]


class Attempt:
    """Sends batches through ``sender``, each answer counted (``counts``: its duration and
    events; ``errors``: a failure by its code).  Shared by the workers: the state of one
    batch stays in its call."""

    def __init__(
        self,
        sender: Sender,
        limit: BodyLimit,
        counts: Metrics = NO_METRICS,
        errors: SendErrors | None = None,
    ) -> None:
        self._sender = sender
        self._limit = limit
        self._counts = counts
        self._errors = errors if errors is not None else SendErrors()

    def send(
        self,
        game: str,
        batch_id: str,
        events: Sequence[bytes],
        attempt: int,
        permit: Callable[[], bool],
    ) -> Sent:
        """The outcome for the batch; ``permit`` is asked before every request beyond the
        first (False: the rest waits for the batch's next attempt)."""
        answers: list[Answer] = []
        bad = malformed(events)
        if bad:
            batch = _Batch(game, batch_id, events, attempt, permit, answers)
            return Sent(self._well_formed(batch, bad), answers)
        outcome = self._post(answers, game, batch_id, events, attempt)
        if outcome.kind == DELIVERED and self._limit.limit < self._limit.configured:
            self._limit.learn(0, self._limit.model.body_bytes(events))  # a probe, maybe
        if outcome.kind != REJECTED or outcome.alert or not outcome.too_large:
            return Sent(outcome, answers)
        if len(events) == 1:  # says nothing about the limit: dead-lettered alone
            return Sent(Outcome(REJECTED, TOO_LARGE), answers)
        return Sent(self._halves(_Batch(game, batch_id, events, attempt, permit, answers)), answers)

    def _well_formed(self, batch: _Batch, bad: list[int]) -> Outcome:
        """Refuse the malformed events and send the rest under the batch's own id (the same
        rest on every attempt), with the permit the batch was claimed with."""
        parts = _Parts(refused=dict.fromkeys(bad, MALFORMED))
        rest = [i for i in range(len(batch.events)) if i not in parts.refused]
        if not rest:
            return parts.outcome()  # nothing to send: settled as refused, no request
        self._run(batch, parts, [(batch.batch_id, rest)], permitted=True)
        self._limit.learn(parts.refused_bytes, parts.accepted_bytes)
        return parts.outcome()

    def _post(
        self, answers: list[Answer], game: str, batch_id: str, events: Sequence[bytes], attempt: int
    ) -> Outcome:
        started = time.perf_counter()
        outcome = self._sender.send(game, batch_id, events, attempt)
        if outcome.audit_lost:
            self._counts.count(C.AUDIT_LINES_LOST, outcome.audit_lost)
        if outcome.unsent:  # no request went out: nothing was answered
            return outcome
        seconds = time.perf_counter() - started
        answers.append(Answer(outcome, seconds, len(events)))
        self._counts.observe(Histogram.POST_DURATION_SECONDS, seconds)
        self._counts.observe(Histogram.BATCH_SIZE_EVENTS, len(events))
        self._errors.record(outcome)
        return outcome

    def _halves(self, batch: _Batch) -> Outcome:
        parts = _Parts(refused_bytes=self._limit.model.body_bytes(batch.events))
        self._run(batch, parts, _split(batch.batch_id, list(range(len(batch.events)))))
        self._limit.learn(parts.refused_bytes, parts.accepted_bytes)
        return parts.outcome()

    def _run(
        self,
        batch: _Batch,
        parts: _Parts,
        todo: list[tuple[str, list[int]]],
        permitted: bool = False,
    ) -> None:
        """Send the parts in order (a refused half puts its own halves first); once a part
        fails for a reason that would fail the rest too, they are not sent.  ``permitted``:
        the first part goes out on the permit the batch was claimed with."""
        events = batch.events
        while todo:
            part_id, indices = todo.pop(0)
            if permitted:
                permitted = False
            elif not batch.permit():  # stopping, or the rate limit is spent
                parts.retry += indices + [i for _, rest in todo for i in rest]
                parts.reason = parts.reason or "not sent yet: no request left under the limit"
                return
            sent = [events[i] for i in indices]
            outcome = self._post(batch.answers, batch.game, part_id, sent, batch.attempt)
            size = self._limit.model.body_bytes(sent)
            if outcome.kind == DELIVERED:
                parts.accepted_bytes = max(parts.accepted_bytes, size)
                parts.refused.update((indices[i], reason) for i, reason in outcome.refused)
                parts.retry += [indices[i] for i in outcome.retry_items]
                parts.moved += [m._replace(position=indices[m.position]) for m in outcome.moved]
                if outcome.retry_items:
                    parts.reason = outcome.reason
                    parts.retry_after = max(parts.retry_after, outcome.retry_after)
            elif outcome.kind == REJECTED and outcome.too_large and not outcome.alert:
                if len(indices) == 1:
                    parts.refused[indices[0]] = TOO_LARGE
                else:  # a body of one event says nothing about the limit: only these do
                    parts.refused_bytes = min(parts.refused_bytes or size, size)
                    todo[:0] = _split(part_id, indices)
            elif outcome.kind == REJECTED:
                parts.refused.update((i, outcome.reason) for i in indices)
                if outcome.alert:  # the rest would meet the same refusal
                    parts.alert = outcome.alert
                    parts.refused.update((i, outcome.reason) for _, rest in todo for i in rest)
                    todo.clear()
            else:  # a retry: the endpoint is failing; the rest waits for the next attempt
                parts.retry += indices + [i for _, rest in todo for i in rest]
                parts.reason = outcome.reason
                parts.retry_after = max(parts.retry_after, outcome.retry_after)
                parts.pause_all = max(parts.pause_all, outcome.pause_all)
                todo.clear()


def _split(batch_id: str, indices: list[int]) -> list[tuple[str, list[int]]]:
    middle = len(indices) // 2
    return [(f"{batch_id}.a", indices[:middle]), (f"{batch_id}.b", indices[middle:])]


def malformed(events: Sequence[bytes]) -> list[int]:
    """The positions of the events that are not exactly one JSON value each."""
    try:
        deque(map(_ONE_VALUE.decode, events), maxlen=0)  # the usual case: every one is
        # No multi-byte sequence spans two events: each one ends in an ASCII byte.
        joined = b"".join(events)
        if not joined.isascii():
            joined.decode()
    except _NOT_ONE_VALUE:
        return [i for i, event in enumerate(events) if not _is_one_value(event)]
    return []


def _is_one_value(event: bytes) -> bool:
    try:
        _ONE_VALUE.decode(event)
        event.decode()
    except _NOT_ONE_VALUE:
        return False
    return True
