"""A bounded stop: the Redis calls a stopping reporter makes, and what it leaves behind.

After the grace period the store switches to a client with short timeouts and no retries,
and once one call fails the rest are skipped: a Redis that hangs costs one timeout, not one
per batch and shard.  Whatever could not be acknowledged or released is left to its lease
(the reaper of a running reporter brings it back once the lease expires, and the endpoint
sees the same Idempotency-Key) and named in the ``stopped:`` line.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from collector.config import RedisSettings
from collector.logs import counted
from collector.store import Backend, ShardKeys, Store, open_backend
from reporter._constants import STOP_REDIS_TIMEOUT_SECONDS
from reporter._delivery.batches import Batches
from reporter._delivery.in_flight import ToAck
from reporter._delivery.settling import Settler
from reporter._service.ownership import ShardOwnership

logger = logging.getLogger("reporter")
T = TypeVar("T")

# Batch ids a stopped: line names at most; the count is always whole.
LISTED_BATCHES = 10


@dataclass(frozen=True)
class Stopped:
    """What ``ReporterService.stop`` returns: this process's counters, the batches left to
    lease expiry, and the jobs still blocked (on Redis or the endpoint) at its deadline."""

    counts: dict[str, int]
    left_to_lease: tuple[str, ...] = ()
    blocked_jobs: tuple[str, ...] = ()

    def summary(self) -> str:
        """The part of the stopped: line after the counters ("" when nothing was left)."""
        parts = []
        if self.left_to_lease:
            shown = ", ".join(self.left_to_lease[:LISTED_BATCHES])
            more = len(self.left_to_lease) - LISTED_BATCHES
            parts.append(
                f"left to lease expiry: "
                f"{counted(len(self.left_to_lease), 'batch', 'batches')} ({shown}"
                + (f", and {more} more" if more > 0 else "")
                + ")"
            )
        if self.blocked_jobs:
            parts.append(
                f"still blocked: {counted(len(self.blocked_jobs), 'job')} "
                f"({', '.join(self.blocked_jobs[:LISTED_BATCHES])})"
            )
        return "; ".join(parts)


def stopping_settings(settings: RedisSettings) -> RedisSettings:
    """``settings`` with the short timeouts and no retries of a stopping reporter (a WAIT
    after its acks given half the socket timeout, so that its answer comes first)."""
    socket_timeout = min(settings.socket_timeout_seconds, STOP_REDIS_TIMEOUT_SECONDS)
    return dataclasses.replace(
        settings,
        retries=0,
        socket_timeout_seconds=socket_timeout,
        connect_timeout_seconds=min(settings.connect_timeout_seconds, STOP_REDIS_TIMEOUT_SECONDS),
        wait_timeout_ms=max(1, min(settings.wait_timeout_ms, int(socket_timeout * 500))),
    )


class StopCalls:
    """The Redis calls of one stop, through a short-timeout client; after the first failure
    the rest are skipped."""

    def __init__(self, store: Store, settings: RedisSettings) -> None:
        self.failed = False
        self.left: list[str] = []
        self.released = 0
        self._replaced: Backend | None = None
        try:  # a cluster client reads the slot map here: it may find Redis gone already
            self._replaced = store.use_backend(open_backend(stopping_settings(settings)))
        except Exception as exc:
            self._fail("open a connection", exc)

    def acknowledge(self, settler: Settler, to_ack: Sequence[ToAck]) -> None:
        ids = [batch_id for batch_id, _, _, _ in to_ack]
        not_acked = self._attempt(
            "acknowledge delivered batches", ids, lambda: settler.acknowledge(to_ack)
        )
        if not_acked:
            self.left += not_acked
            self.failed = True

    def release(self, batches: Batches, to_release: Sequence[tuple[str, ShardKeys, str]]) -> None:
        if not to_release:
            return
        ids = [batch_id for batch_id, _, _ in to_release]
        replies = self._attempt("release batches", ids, lambda: batches.release_many(to_release))
        for batch_id, reply in zip(ids, replies or [], strict=False):
            if reply is True:
                self.released += 1
            elif reply is not False:  # an error: the lease is still ours, and will expire
                self.left.append(batch_id)
                self._fail(f"release batch {batch_id}", reply)

    def give_up(self, ownership: ShardOwnership) -> None:
        self._attempt("give up shard leases", [], ownership.give_up)

    def close_replaced(self) -> None:
        """Close the client the store used before the stop (once no job is using it)."""
        if self._replaced is not None:
            self._replaced.close()
            self._replaced = None

    def _attempt(self, what: str, ids: list[str], call: Callable[[], T]) -> T | None:
        if self.failed:
            self.left += ids
            return None
        try:
            return call()
        except Exception as exc:
            self.left += ids
            self._fail(what, exc)
            return None

    def _fail(self, what: str, exc: object) -> None:
        if not self.failed:
            logger.warning(
                "while stopping: could not %s (%s); skipping the other Redis calls, "
                "leases will expire",
                what,
                exc,
            )
        self.failed = True
