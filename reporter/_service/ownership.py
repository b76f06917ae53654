"""Shard leases: which reporter process sweeps which shard.

Each process keeps a heartbeat in a registry (in shard 0's hash tag) and aims for an equal
share of the shards: ceil(shards / live processes).  It takes free shards while below its
share and gives up the excess above it, so work spreads when processes join and a dead
process's shards are taken over once its leases expire.

Every time here is the Redis server's (the scripts read TIME): a process whose clock runs
fast or slow holds its heartbeat and leases exactly as long as any other.  A shard whose
owner key nobody can be renewing is taken over at once when the key has no expiry (or one
longer than any lease), and when its holder is missing from the live registry two rounds in
a row (a round apart, so that a process that registered a moment ago is never mistaken for a
dead one); each takeover is logged, counted (``owners_taken_over``) and noted in the shard's
quarantine, which ``status`` shows.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import uuid
from itertools import islice

from collector.logs import counted
from collector.store import BackendError, LiveReporters, ShardLease, Store

logger = logging.getLogger("reporter")


def process_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class ShardOwnership:
    def __init__(self, store: Store, lease_seconds: float, owner: str | None = None) -> None:
        self.owner = owner or process_id()
        self._schema = store.schema
        self._store = store
        self._lease_ms = int(lease_seconds * 1000)
        self._owned: set[int] = set()
        self._lock = threading.Lock()
        # shard -> its holder, missing from the live registry at the last round
        self._missing: dict[int, str] = {}
        self._stepped_back = False

    def owns(self, shard: int) -> bool:
        return shard in self._owned

    def owned(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._owned)

    def loop(self, step_back: bool = False) -> bool:
        """Renew what is held, then move towards this process's fair share: one round trip
        for the heartbeat, one for the renewals, one per try at free shards, one to give up
        any excess.  ``step_back``: this process can send nothing (its key, its clock): while
        another reporter is live it gives every shard up and leaves the live registry, so that
        the others' shares cover them, until it can again (with nobody else to take them, it
        keeps them: nothing would be sent either way, and it stays visible as live)."""
        if step_back and self._others_live():
            self._step_back()
            return False
        if self._stepped_back:
            self._stepped_back = False
            logger.info("can send again: taking a share of the shards")
        registry = self._store.heartbeat(self.owner, self._lease_ms)
        live = max(1, registry.live)
        share = math.ceil(self._schema.shards / live)
        mine = self.owned()
        missing, self._missing = self._missing, {}
        held = set(self._leases(sorted(mine), self._lease_ms))
        free = (shard for shard in range(self._schema.shards) if shard not in mine)
        while len(held) < share:
            tries = list(islice(free, share - len(held)))
            if not tries:
                break
            held.update(self._leases(tries, self._lease_ms, registry, missing))
        excess = sorted(held)[share:]
        self._leases(excess, 0)
        held.difference_update(excess)
        with self._lock:
            if held != self._owned:
                logger.info(
                    "now sweeping shards %s (%s live)",
                    _ranges(sorted(held)) or "none",
                    counted(live, "reporter"),
                    extra={"owned_shards": len(held), "live_reporters": live},
                )
            self._owned = held
        return False

    def _others_live(self) -> bool:
        """Whether another reporter is live (one round trip)."""
        live = self._store.live_reporters()
        return live > (0 if self._stepped_back else 1)

    def _step_back(self) -> None:
        with self._lock:
            owned, self._owned = self._owned, set()
        if not self._stepped_back:
            self._stepped_back = True
            logger.warning(
                "this reporter cannot send with its key (or its clock): it leaves its shards "
                "(%s) to reporters that can, until it can again",
                _ranges(sorted(owned)) or "none",
                extra={"owned_shards": 0},
            )
        self._leases(sorted(owned), 0)
        self._store.leave(self.owner)

    def give_up(self) -> None:
        """On shutdown: hand every shard back so another process can take it at once, in few
        round trips.  Raises the first ``BackendError`` met (the leases left expire)."""
        with self._lock:
            owned, self._owned = self._owned, set()
        self._leases(sorted(owned), 0)
        self._store.leave(self.owner)

    def _leases(
        self,
        shards: list[int],
        lease_ms: int,
        registry: LiveReporters | None = None,
        missing: dict[int, str] | None = None,
    ) -> list[int]:
        """Take or renew these shards' leases (0 gives them up) in few round trips; those
        this process holds now.  With the ``registry`` of this round, a holder it does not
        hold is remembered for the next round, and one ``missing`` from the last round and
        still not live is taken over.  Raises the first ``BackendError`` met."""
        if not shards:
            return []
        # An incomplete list of live ids cannot tell who is missing.
        known = registry.ids if registry is not None and registry.complete else None
        gone = {
            shard: holder
            for shard, holder in (missing or {}).items()
            if known is not None and holder not in known
        }
        replies = self._store.call_many(
            [
                ShardLease(self._schema.shard(shard), self.owner, lease_ms, gone.get(shard, ""))
                for shard in shards
            ]
        )
        held = []
        for shard, reply in zip(shards, replies, strict=True):
            if isinstance(reply, BackendError):
                raise reply
            if reply.held:
                held.append(shard)
                if reply.taken_over:
                    logger.warning(
                        "took shard %d over from %s: %s",
                        shard,
                        reply.holder,
                        reply.taken_over,
                        extra={"shard": shard},
                    )
            elif known is not None and reply.holder and reply.holder not in known:
                self._missing[shard] = reply.holder
        return held


def _ranges(numbers: list[int]) -> str:
    parts: list[str] = []
    for n in numbers:
        if parts and parts[-1].split("-")[-1] == str(n - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{n}"
        else:
            parts.append(str(n))
    return ",".join(parts)
