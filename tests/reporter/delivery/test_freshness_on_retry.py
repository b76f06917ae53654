"""Freshness on retry: events that grow older than max_age while their batch waits for a
retry are finished as stale when the batch is taken again, and never sent."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import redis

from collector.store import KeySchema
from reporter._delivery.batches import Batches, new_id
from reporter._monitoring.accounting import read_totals
from reporter._sinks.registry import make_sender
from tests.support.clock import Clock
from tests.support.fixtures import MakeEndpoint, StartService
from tests.support.polling import wait_until
from tests.support.scenarios import (
    Script,
    assert_reconciled,
    drained,
    make_config,
    push_events,
    received_keys,
    schema_of,
)
from tests.support.scriptcalls import store_of, store_on
from tests.support.servers import Server
from tests.support.wiring import Delivery, delivery_for

MAX_AGE = 180.0
GAME = "fresh"


class Ingest:
    """An httpx.MockTransport handler answering from a list of statuses (then 200)."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(orjson.loads(request.content))
        status = self.statuses.pop(0) if self.statuses else 200
        return httpx.Response(status, json={})


def deliverer_for(
    r: redis.Redis, ingest: Ingest, clock: Callable[[], float]
) -> tuple[Batches, Delivery, KeySchema]:
    config = make_config(
        "redis://unused",
        "http://ingest.test/ingest",
        reporter={"max_age_seconds": MAX_AGE, "linger_ms": 0},
    )
    store = Batches(store_on(r, config), config)
    sender = make_sender(config, httpx.MockTransport(ingest))
    deliverer = delivery_for(store, sender, config, clock)
    return store, deliverer, schema_of(config)


def fail_once_then_retry(
    r: redis.Redis,
    store: Batches,
    deliverer: Delivery,
    schema: KeySchema,
    clock: Clock,
    wait: float,
) -> tuple[str, str]:
    """Claim the game's events, fail the first POST, let ``wait`` seconds pass (on the
    injected clock) and deliver the batch again; returns (batch id, second outcome)."""
    keys = schema.for_game(GAME)
    token = new_id()
    claimed = store.claim(keys, GAME, token, 1)
    [(batch_id, entries)] = claimed.batches
    assert deliverer.deliver_all(
        keys, token, [(GAME, batch_id, entries, 0)], threading.Event()
    ) == ["retry"]
    clock.now += wait
    r.zadd(keys.retry, {batch_id: 0})  # due now, whatever the backoff drew
    token = new_id()
    [again] = store.take_retries(keys, token, 10)
    assert (again.batch_id, again.attempts) == (batch_id, 1)
    wait_until(deliverer.gate.is_open, what="the gate the failure closed (10 ms)")
    [outcome] = deliverer.deliver_all(
        keys, token, [(GAME, batch_id, again.entries, again.attempts)], threading.Event()
    )
    return batch_id, outcome


def test_batch_gone_stale_while_waiting_for_retry_is_never_sent(r: redis.Redis) -> None:
    clock, ingest = Clock(time.time()), Ingest(503)
    store, deliverer, schema = deliverer_for(r, ingest, clock)
    push_events(r, schema, GAME, range(10), collected_ms=int(clock.now * 1000))

    _, outcome = fail_once_then_retry(r, store, deliverer, schema, clock, MAX_AGE + 1)

    assert outcome == "stale"
    assert len(ingest.bodies) == 1  # the failed first attempt only
    totals = read_totals(store_of(r, schema))
    assert (totals.counter("stale"), totals.counter("delivered")) == (10, 0)
    assert totals.pending_events == 0
    assert totals.unaccounted == 0
    assert deliverer.counts.snapshot()["stale"] == 10


def test_partly_stale_batch_sends_only_the_fresh_events(r: redis.Redis) -> None:
    clock, ingest = Clock(time.time()), Ingest(503)
    store, deliverer, schema = deliverer_for(r, ingest, clock)
    now_ms = int(clock.now * 1000)
    push_events(r, schema, GAME, range(5), collected_ms=now_ms - 170_000)
    push_events(r, schema, GAME, range(5, 12), collected_ms=now_ms)

    _, outcome = fail_once_then_retry(r, store, deliverer, schema, clock, 20)

    assert outcome == "delivered"
    assert [e["seq"] for e in ingest.bodies[0]["events"]] == list(range(12))
    assert [e["seq"] for e in ingest.bodies[1]["events"]] == list(range(5, 12))
    totals = read_totals(store_of(r, schema))
    assert (totals.counter("stale"), totals.counter("delivered")) == (5, 7)
    assert totals.unaccounted == 0


def test_events_already_stale_when_claimed_are_dropped_in_redis(r: redis.Redis) -> None:
    clock, ingest = Clock(time.time()), Ingest()
    store, _, schema = deliverer_for(r, ingest, clock)
    now_ms = int(clock.now * 1000)
    push_events(r, schema, GAME, range(4), collected_ms=now_ms - int(MAX_AGE * 1000) - 5000)
    push_events(r, schema, GAME, range(4, 6))
    claimed = store.claim(schema.for_game(GAME), GAME, new_id(), 1)
    assert claimed.stale == 4
    assert [len(entries) for _, entries in claimed.batches] == [2]
    totals = read_totals(store_of(r, schema))
    assert (totals.counter("stale"), totals.pending_events, totals.unaccounted) == (4, 2, 0)


def test_service_drops_a_batch_that_went_stale_during_retry_after(
    own_server: Server, make_endpoint: MakeEndpoint, start_service: StartService
) -> None:
    """max_age 2 s; the first POST gets 429 with Retry-After: 3, so by the time the batch is
    due again its events are too old: they are counted stale and never sent again."""
    script = Script(lambda n, body: (429, {"Retry-After": "3"}) if n == 1 else (200, {}))
    endpoint = make_endpoint(script)
    config = make_config(own_server.url, endpoint.url, reporter={"max_age_seconds": 2.0})
    schema = schema_of(config)
    client = own_server.client()
    service = start_service(config)
    wait_until(service.ownership.owned, what="shards owned")

    push_events(client, schema, GAME, range(50))
    wait_until(lambda: endpoint.requests >= 1, what="the first POST")
    totals = wait_until(lambda: drained(client, schema), what="the batch finished")

    assert_reconciled(totals)
    assert (totals.counter("stale"), totals.counter("delivered")) == (50, 0)
    assert endpoint.requests == 1
    assert received_keys(endpoint) == {}
    assert service.tally.snapshot().get("stale") == 50
