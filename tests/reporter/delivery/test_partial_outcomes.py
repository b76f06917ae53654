"""Partial outcomes through the Deliverer: a sender that answers item by item gets its
refused items dead-lettered with their reasons, its retry items re-queued, the rest counted
as delivered; positions are mapped back past the events that went stale before sending."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import orjson
import redis

from collector.store import KeySchema, encode_entry, entry_event
from reporter._delivery.batches import Batches
from reporter._monitoring.accounting import read_totals
from reporter._senders.outcome import DELIVERED, Outcome
from tests.support.scenarios import make_config, schema_of
from tests.support.scriptcalls import Scripts, store_of, store_on
from tests.support.wiring import Delivery, delivery_for

GAME = "partial"


class ItemSender:
    """A sender whose answer refuses and retries chosen items of what it was sent."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.sent: list[list[int]] = []

    def send(self, game: str, batch_id: str, events: Sequence[bytes], attempt: int = 1) -> Outcome:
        self.sent.append([orjson.loads(e)["seq"] for e in events])
        return self.outcome

    def describe(self) -> str:
        return "item sender"

    def close(self) -> None:
        pass


def setup(r: redis.Redis, outcome: Outcome) -> tuple[Batches, Delivery, KeySchema, ItemSender]:
    config = make_config(
        "redis://unused",
        reporter={"event_time_field": "ot", "event_time_unit": "s", "linger_ms": 0},
    )
    batches = Batches(store_on(r, config), config)
    sender = ItemSender(outcome)
    deliverer = delivery_for(batches, sender, config, time.time)
    return batches, deliverer, schema_of(config), sender


def push(r: redis.Redis, schema: KeySchema, stale_seqs: set[int], count: int) -> None:
    now = int(time.time())
    entries = [
        encode_entry(
            now * 1000, orjson.dumps({"seq": s, "ot": now - 600 if s in stale_seqs else now})
        )
        for s in range(count)
    ]
    Scripts(r).collect(schema.for_game(GAME), GAME, 10_000, 3600, entries)


def seqs_of(r: redis.Redis, schema: KeySchema, batch_id: str) -> list[int]:
    blob = r.hget(schema.for_game(GAME).payloads, batch_id) or b""
    return [orjson.loads(entry_event(e))["seq"] for e in blob.split(b"\n") if e]


def test_items_refused_and_retried_past_stale_events(r: redis.Redis) -> None:
    # sent: seqs 0 1 3 4 6 7 8 9 (2 and 5 are stale); refuse sent #0 and #7, retry sent #3
    outcome = Outcome(
        DELIVERED,
        "items to retry",
        2.0,
        refused=((0, "3005 bad ot"), (7, "3010 invalid pi")),
        retry_items=(3,),
    )
    batches, deliverer, schema, sender = setup(r, outcome)
    push(r, schema, {2, 5}, 10)
    keys = schema.for_game(GAME)

    deliverer.drain(keys, GAME, threading.Event())

    assert sender.sent == [[0, 1, 3, 4, 6, 7, 8, 9]]
    [dead] = batches.store.dead_batches(10)
    assert dead.events == 2 and dead.reason.startswith("2 items refused; first: 3005")
    detail = batches.store.batch(keys, dead.batch_id)
    assert detail is not None
    assert detail.item_reasons == ["3005 bad ot", "3010 invalid pi"]
    assert seqs_of(r, schema, dead.batch_id) == [0, 9]
    [retry_id] = [b.decode() for b in r.zrange(keys.retry, 0, -1)]
    assert retry_id.endswith(".r1")
    assert seqs_of(r, schema, retry_id) == [4]
    due = r.zscore(keys.retry, retry_id)
    assert due is not None and due >= time.time() * 1000 + 1500  # Retry-After honoured

    totals = read_totals(store_of(r, schema))
    c = totals.counter
    assert (c("delivered"), c("stale"), c("rejected_items"), c("dead_events")) == (5, 2, 2, 2)
    assert (totals.pending_events, totals.unaccounted) == (1, 0)
    tally = deliverer.counts.snapshot()
    assert {
        k: tally.get(k)
        for k in (
            "delivered",
            "stale",
            "rejected_items",
            "dead_events",
            "dead_batches",
            "batches_retried",
        )
    } == {
        "delivered": 5,
        "stale": 2,
        "rejected_items": 2,
        "dead_events": 2,
        "dead_batches": 1,
        "batches_retried": 1,
    }
    assert deliverer.gate.is_open()  # the endpoint answered: no pause


def test_a_retried_part_goes_out_under_its_own_id(r: redis.Redis) -> None:
    _, deliverer, schema, sender = setup(r, Outcome(DELIVERED, "busy", retry_items=(1,)))
    push(r, schema, set(), 3)
    keys = schema.for_game(GAME)
    deliverer.drain(keys, GAME, threading.Event())
    [retry_id] = [b.decode() for b in r.zrange(keys.retry, 0, -1)]
    r.zadd(keys.retry, {retry_id: 0})

    sender.outcome = Outcome(DELIVERED)
    assert deliverer.send_retries(keys, threading.Event()) is False

    assert sender.sent == [[0, 1, 2], [1]]
    totals = read_totals(store_of(r, schema))
    assert (totals.counter("delivered"), totals.pending_events, totals.unaccounted) == (3, 0, 0)
