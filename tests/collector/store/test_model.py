"""Random interleavings of the life cycle scripts against a Python model of every event.

Operations: collect (with a small cap, so the cap evicts), claim (some events already too
old, so the claim drops them as stale), ack (some events stale), settle (a partial outcome:
some events stale, each other one delivered, refused or to be retried), nack (retryable or
permanent), release, extend, take retries, expire a lease and reap, "crash"
(forget a held batch without finishing it), use a stale token, replay and purge the dead
list.  After every step the model and Redis agree on where each event is and on every
counter, and ``read_totals(...).unaccounted == 0``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field

import orjson
import redis
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from collector.store import encode_entry
from reporter._monitoring.accounting import read_totals
from tests.support.lifecycle import Shard
from tests.support.scriptcalls import store_of

GAMES = ("a", "b")
CAP = 6
BATCH = 3
MOST = 2
LEASE_MS = 60_000
MAX_AGE_MS = 60_000
MAX_ATTEMPTS = 2
OLD_MS = 10 * 60_000  # how old a stale event is when collected
# How much likelier an operation is than the others when it is possible.
WEIGHTS = {"hold": 4, "claim": 2, "collect": 2}


@dataclass
class Batch:
    game: str
    entries: list[bytes]
    attempts: int = 0
    where: str = "inflight"  # inflight, retry or dead
    token: str | None = None  # None: the holder crashed, or the batch is not leased
    expired: bool = False


@dataclass
class Model:
    queues: dict[str, list[bytes]] = field(default_factory=lambda: {g: [] for g in GAMES})
    batches: dict[str, Batch] = field(default_factory=dict)
    dead: list[str] = field(default_factory=list)  # newest first, as in Redis
    # where finished events went: delivered, evicted, stale, dead (dead-lettered)
    done: dict[str, list[bytes]] = field(
        default_factory=lambda: {k: [] for k in ("delivered", "evicted", "stale", "dead")}
    )
    collected: list[bytes] = field(default_factory=list)
    counters: Counter[str] = field(default_factory=Counter)
    stale_tokens: list[tuple[str, str]] = field(default_factory=list)
    # batch id -> (script, token, answer) of the last receipt kept under it: the same call
    # sent again is answered from it (lua/_guard.lua)
    receipts: dict[str, tuple[str, str, object]] = field(default_factory=dict)

    def held(self) -> list[str]:
        return sorted(
            b for b, v in self.batches.items() if v.where == "inflight" and v.token is not None
        )

    def in_state(self, where: str) -> list[str]:
        return sorted(b for b, v in self.batches.items() if v.where == where)

    def dead_letter(self, batch_id: str, batch: Batch | None = None) -> None:
        """Dead-letter a known batch, or add ``batch`` as a new dead letter."""
        if batch is not None:
            self.batches[batch_id] = batch
        batch = self.batches[batch_id]
        batch.where, batch.token = "dead", None
        self.counters["dead_events"] += len(batch.entries)
        self.counters["dead_batches"] += 1
        self.done["dead"] += batch.entries
        self.dead.insert(0, batch_id)

    def trim_dead(self, dead_max: int) -> None:
        if len(self.dead) > dead_max:
            event("the dead list overflowed")
        for gone in self.dead[dead_max:]:
            self.counters["dead_dropped"] += len(self.batches.pop(gone).entries)
        del self.dead[dead_max:]


class LifeCycle(RuleBasedStateMachine):
    client: redis.Redis  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.shard = Shard(self.client, prefix="model")
        self.shard.clear()
        self.keys = self.shard.keys
        self.scripts = self.shard.scripts
        self.model = Model()
        self.seq = 0
        self.names = 0
        self.dead_max = 1

    def token(self) -> str:
        """A new token or batch id; sequential, so each example runs the same way again."""
        self.names += 1
        return f"t{self.names:05d}"

    @initialize(dead_max=st.integers(1, 3))
    def start(self, dead_max: int) -> None:
        """Most dead-lettered batches kept: small, so the list overflows often."""
        assert self.shard.snapshot() == {}
        self.dead_max = dead_max

    # -- producing and claiming -------------------------------------------------------------

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        """One operation, chosen among those possible now.

        A single rule rather than one per operation: hypothesis switches rules off at random
        per example ("swarm testing"), and a run without claims or without finishing
        actions would test little here."""
        m = self.model
        possible = {
            "claim": any(m.queues.values()),
            "hold": bool(m.held()),
            "reap": any(b.expired for b in m.batches.values()),
            "take_retries": bool(m.in_state("retry")),
            "stale_token": bool(m.stale_tokens),
            "dead_list": bool(m.dead),
            "collect": True,
        }
        ops = [op for op, ok in possible.items() if ok for _ in range(WEIGHTS.get(op, 1))]
        getattr(self, data.draw(st.sampled_from(ops), label="operation"))(data)

    def collect(self, data: st.DataObject) -> None:
        game = data.draw(st.sampled_from(GAMES), label="game")
        count = data.draw(st.integers(1, 4), label="count")
        old = data.draw(st.booleans(), label="old")
        born = int(time.time() * 1000) - (OLD_MS if old else 0)
        entries = []
        for _ in range(count):
            entries.append(encode_entry(born, orjson.dumps({"game": game, "seq": self.seq})))
            self.seq += 1
        evicted = self.scripts.collect(self.keys, game, CAP, 3600, entries)
        m = self.model
        queue = m.queues[game]
        queue += entries
        m.collected += entries
        gone = queue[: max(0, len(queue) - CAP)]
        del queue[: len(gone)]
        m.done["evicted"] += gone
        m.counters["stored"] += count
        m.counters["evicted"] += len(gone)
        assert evicted == len(gone)

    def claim(self, data: st.DataObject) -> None:
        game = data.draw(st.sampled_from([g for g in GAMES if self.model.queues[g]]), label="game")
        t, base = self.token(), self.token()
        claimed = self.scripts.claim(self.keys, game, base, t, BATCH, MOST, LEASE_MS, MAX_AGE_MS, 0)
        m = self.model
        queue = m.queues[game]
        taken = queue[: BATCH * MOST]
        del queue[: len(taken)]
        now = int(time.time() * 1000)
        stale = [e for e in taken if now - int(e[:13]) > MAX_AGE_MS]
        fresh = [e for e in taken if e not in stale]
        expected = [
            (f"{base}.{i // BATCH}", fresh[i : i + BATCH]) for i in range(0, len(fresh), BATCH)
        ]
        assert (claimed.stale, claimed.remaining, claimed.batches) == (
            len(stale),
            len(queue),
            expected,
        )
        for batch_id, entries in expected:
            m.batches[batch_id] = Batch(game, entries, token=t)
        if stale:
            event("claim dropped stale events")
        m.done["stale"] += stale
        m.counters["stale"] += len(stale)
        m.counters["claimed"] += len(fresh)
        m.counters["batches_claimed"] += len(expected)

    # -- what the holder of a batch does with it ------------------------------------------------

    def hold(self, data: st.DataObject) -> None:
        """What the worker holding a batch does with it."""
        action = data.draw(
            st.sampled_from(
                ("ack", "settle", "nack", "reject", "release", "extend", "crash", "expire")
            ),
            label="action",
        )
        batch_id = data.draw(st.sampled_from(self.model.held()), label="batch")
        batch = self.model.batches[batch_id]
        assert batch.token is not None
        if action == "ack":
            n = len(batch.entries)
            self.ack(batch_id, batch, data.draw(st.integers(0, n), label="stale"))
        elif action == "settle":
            n = len(batch.entries)
            stale = data.draw(st.integers(0, n), label="stale")
            fates = data.draw(
                st.lists(
                    st.sampled_from(("delivered", "retry", "refused")),
                    min_size=n - stale,
                    max_size=n - stale,
                ),
                label="fates",
            )
            self.settle(batch_id, batch, stale, fates)
        elif action in ("nack", "reject"):
            self.nack(
                batch_id,
                batch,
                action == "reject",
                data.draw(st.floats(0, 1, exclude_max=True), label="jitter"),
            )
        elif action == "release":
            assert self.scripts.release(self.keys, batch_id, batch.token) is True
            self.model.stale_tokens.append((batch_id, batch.token))
            self.model.receipts[batch_id] = ("release", batch.token, True)
            self.model.counters["batches_released"] += 1
            batch.where, batch.token, batch.expired = "retry", None, False
        elif action == "extend":
            assert self.scripts.extend(self.keys, batch_id, batch.token, LEASE_MS) is True
            batch.expired = False
        else:
            # "expire": the holder is slow and its lease runs out; it still has the token.
            # "crash": the holder dies, its lease runs out and nobody has the token.
            self.shard.expire(batch_id)
            batch.expired = True
            if action == "crash":
                batch.token = None

    def ack(self, batch_id: str, batch: Batch, stale: int) -> None:
        assert batch.token is not None
        n = len(batch.entries)
        done = self.scripts.ack(self.keys, batch_id, batch.token, stale)
        m = self.model
        assert done == n - stale
        del m.batches[batch_id]
        m.done["stale"] += batch.entries[:stale]
        m.done["delivered"] += batch.entries[stale:]
        m.counters.update(stale=stale, delivered=done, batches_delivered=1)
        m.stale_tokens.append((batch_id, batch.token))
        m.receipts[batch_id] = ("ack", batch.token, done)

    def settle(self, batch_id: str, batch: Batch, stale: int, fates: list[str]) -> None:
        """A partial outcome: the first ``stale`` events were not sent; each other one is
        delivered, refused or to be retried, by ``fates``."""
        assert batch.token is not None
        sent = list(enumerate(batch.entries))[stale:]
        retry = [p for (p, _), fate in zip(sent, fates, strict=True) if fate == "retry"]
        refused = [
            (p, f"no {p}") for (p, _), fate in zip(sent, fates, strict=True) if fate == "refused"
        ]
        settled = self.scripts.settle(
            self.keys,
            batch_id,
            batch.token,
            stale=stale,
            retry=retry,
            refused=refused,
            initial_ms=1,
            max_ms=2,
            max_attempts=MAX_ATTEMPTS,
            dead_max=self.dead_max,
        )
        m = self.model
        del m.batches[batch_id]
        m.stale_tokens.append((batch_id, batch.token))
        m.receipts[batch_id] = ("settle", batch.token, settled.delivered)
        delivered = [e for (_, e), fate in zip(sent, fates, strict=True) if fate == "delivered"]
        m.done["stale"] += batch.entries[:stale]
        m.done["delivered"] += delivered
        m.counters.update(
            stale=stale, delivered=len(delivered), batches_delivered=int(bool(delivered))
        )
        attempt = batch.attempts + 1
        expected = {
            "delivered": len(delivered),
            "retry_id": "",
            "retry_state": "",
            "refused_id": "",
        }
        if refused:
            event("settle refused items")
            expected["refused_id"] = f"{batch_id}.x{attempt}"
            m.dead_letter(
                expected["refused_id"],
                Batch(batch.game, [batch.entries[p] for p, _ in refused], attempts=attempt),
            )
            m.counters["rejected_items"] += len(refused)
        if retry:
            event("settle retried items")
            retry_id = expected["retry_id"] = f"{batch_id}.r{attempt}"
            part = Batch(
                batch.game, [batch.entries[p] for p in retry], attempts=attempt, where="retry"
            )
            if attempt >= MAX_ATTEMPTS:
                expected["retry_state"] = "dead"
                m.dead_letter(retry_id, part)
            else:
                expected["retry_state"] = "retry"
                m.batches[retry_id] = part
                m.counters["batches_retried"] += 1
        if refused or expected["retry_state"] == "dead":
            m.trim_dead(self.dead_max)
        assert {k: getattr(settled, k) for k in expected} == expected

    def nack(self, batch_id: str, batch: Batch, permanent: bool, jitter: float) -> None:
        assert batch.token is not None
        result = self.shard.nack(
            batch_id,
            batch.token,
            permanent=permanent,
            initial_ms=1,
            max_ms=2,
            max_attempts=MAX_ATTEMPTS,
            jitter=jitter,
            dead_max=self.dead_max,
        )
        m = self.model
        m.stale_tokens.append((batch_id, batch.token))
        m.receipts[batch_id] = ("nack", batch.token, result.state)
        batch.attempts += 1
        batch.expired = False
        if permanent or batch.attempts >= MAX_ATTEMPTS:
            assert (result.state, result.delay_ms) == ("dead", 0)
            m.dead_letter(batch_id)
            m.trim_dead(self.dead_max)
        else:
            assert result.state == "retry"
            assert 0 <= result.delay_ms <= min(2, 2 ** (batch.attempts - 1))
            batch.where, batch.token = "retry", None
            m.counters["batches_retried"] += 1

    # -- leases running out, retries ------------------------------------------------------------

    def reap(self, data: st.DataObject) -> None:
        limit = data.draw(st.integers(1, 3), label="limit")
        m = self.model
        expired = sorted(b for b, v in m.batches.items() if v.where == "inflight" and v.expired)
        reaped = expired[:limit]
        retried = dead = 0
        for batch_id in reaped:
            batch = m.batches[batch_id]
            if batch.token is not None:
                m.stale_tokens.append((batch_id, batch.token))
            batch.attempts += 1
            batch.expired = False
            if batch.attempts >= MAX_ATTEMPTS:
                m.dead_letter(batch_id)
                dead += 1
            else:
                batch.where, batch.token = "retry", None
                retried += 1
        if dead:
            event("reap dead-lettered a batch")
            m.trim_dead(self.dead_max)
        m.counters["batches_reaped"] += retried + dead
        assert self.scripts.reap(self.keys, limit, MAX_ATTEMPTS, self.dead_max) == (retried, dead)

    def take_retries(self, data: st.DataObject) -> None:
        limit = data.draw(st.integers(1, 4), label="limit")
        m = self.model
        waiting = m.in_state("retry")
        if waiting:  # due now, whatever the backoff drew
            self.client.zadd(self.keys.retry, dict.fromkeys(waiting, 0))
        t = self.token()
        taken = self.scripts.take_retries(self.keys, t, LEASE_MS, limit)
        assert [b.batch_id for b in taken] == waiting[:limit]
        for b in taken:
            batch = m.batches[b.batch_id]
            assert (b.game, b.attempts, b.entries) == (batch.game, batch.attempts, batch.entries)
            batch.where, batch.token = "inflight", t

    def stale_token(self, data: st.DataObject) -> None:
        """A late worker whose lease was lost: every transition refuses and changes nothing;
        the call that finished the batch under that token, sent again, is answered what it
        was answered (its receipt), changing nothing either."""
        batch_id, old = data.draw(st.sampled_from(self.model.stale_tokens), label="stale")
        event(f"stale token on a batch that is {self.where(batch_id)}")
        receipt = self.model.receipts.get(batch_id)

        def answer(script: str, lost: object) -> object:
            if receipt is not None and receipt[:2] == (script, old):
                event("a finishing call sent again")
                return receipt[2]
            return lost

        before = self.shard.snapshot()
        assert self.scripts.ack(self.keys, batch_id, old) == answer("ack", -1)
        assert self.scripts.settle(self.keys, batch_id, old, refused=[(0, "x")]).delivered == (
            answer("settle", -1)
        )
        assert self.shard.nack(
            batch_id, old, max_attempts=MAX_ATTEMPTS, dead_max=self.dead_max
        ).state == answer("nack", "lost")
        assert self.scripts.release(self.keys, batch_id, old) is answer("release", False)
        assert self.scripts.extend(self.keys, batch_id, old, LEASE_MS) is False
        assert self.shard.snapshot() == before

    def where(self, batch_id: str) -> str:
        batch = self.model.batches.get(batch_id)
        return "gone" if batch is None else batch.where

    # -- the dead list ------------------------------------------------------------------------

    def dead_list(self, data: st.DataObject) -> None:
        """Replay (back to retry, attempts reset) or purge the oldest dead batches."""
        action = data.draw(st.sampled_from(("replay", "purge")), label="action")
        limit = data.draw(st.integers(1, 3), label="limit")
        m = self.model
        ids = list(reversed(m.dead[-limit:]))  # oldest first
        del m.dead[len(m.dead) - len(ids) :]
        events = sum(len(m.batches[b].entries) for b in ids)
        event(f"{action} {len(ids)} dead batches")
        if action == "purge":
            for batch_id in ids:
                del m.batches[batch_id]
            m.counters["purged"] += events
            assert self.scripts.purge(self.keys, limit) == (len(ids), events)
            return
        for batch_id in ids:
            batch = m.batches[batch_id]
            batch.where, batch.attempts = "retry", 0
            for e in batch.entries:
                m.done["dead"].remove(e)
        m.counters["replayed"] += events
        assert self.scripts.replay(self.keys, "", limit) == (len(ids), events, 0)

    # -- what must hold after every step ------------------------------------------------------

    @invariant()
    def every_event_is_in_exactly_one_place(self) -> None:
        m = self.model
        places = [
            *m.queues.values(),
            *m.done.values(),
            *(b.entries for b in m.batches.values() if b.where != "dead"),
        ]
        dropped_dead = len(m.done["dead"]) - sum(
            len(b.entries) for b in m.batches.values() if b.where == "dead"
        )
        flat = [e for place in places for e in place]
        assert len(flat) == len(set(flat))
        assert Counter(flat) == Counter(e for e in m.collected)
        assert dropped_dead >= 0

    @invariant()
    def redis_agrees_with_the_model(self) -> None:
        m, keys = self.model, self.keys
        with self.client.pipeline(transaction=False) as pipe:
            for game in GAMES:
                pipe.lrange(keys.queue(game), 0, -1)
            pipe.zrange(keys.inflight, 0, -1)
            pipe.zrange(keys.retry, 0, -1)
            pipe.lrange(keys.dead, 0, -1)
            pipe.hgetall(keys.payloads)
            pipe.hgetall(keys.batches)
            pipe.hgetall(keys.stats)
            *queues, inflight, retry, dead, payloads, metas, stats = pipe.execute()
        assert queues == [m.queues[g] for g in GAMES]
        assert sorted(b.decode() for b in inflight) == m.in_state("inflight")
        assert sorted(b.decode() for b in retry) == m.in_state("retry")
        assert [b.decode() for b in dead] == m.dead
        assert {k.decode(): v for k, v in payloads.items()} == {
            b: b"\n".join(v.entries) for b, v in m.batches.items()
        }
        assert len(metas) == len(m.batches)
        for batch_id, raw in metas.items():
            meta = json.loads(raw)
            batch = m.batches[batch_id.decode()]
            assert (meta["g"], meta["n"], meta["a"]) == (
                batch.game,
                len(batch.entries),
                batch.attempts,
            )
        assert {k.decode(): int(v) for k, v in stats.items()} == {
            k: v for k, v in m.counters.items() if v
        }

    @invariant()
    def the_counters_add_up(self) -> None:
        m = self.model
        totals = read_totals(store_of(self.client, self.shard.schema))
        assert totals.unaccounted == 0
        assert totals.buffered == sum(len(q) for q in m.queues.values())
        assert totals.pending_events == sum(
            len(b.entries) for b in m.batches.values() if b.where != "dead"
        )
        assert totals.dead_now == len(m.done["dead"])
        assert totals.counter("delivered") == len(m.done["delivered"])
        assert totals.counter("stale") == len(m.done["stale"])
        assert totals.counter("evicted") == len(m.done["evicted"])
        assert totals.counter("stored") == len(m.collected)


def test_random_interleavings_keep_every_event_accounted_for(r: redis.Redis) -> None:
    LifeCycle.client = r
    run_state_machine_as_test(
        LifeCycle,
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
