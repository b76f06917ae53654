"""Batches cut by bytes as well as by count: at claim time, on a 413 (halves, then a single
event dead-lettered alone), and again when dead letters are replayed."""

from __future__ import annotations

import logging
import time

import orjson
import pytest
import redis

from collector.store import KeySchema, encode_entry
from reporter._pacing.body_limit import JSON_BODY
from tests.support.fixtures import MakeEndpoint, StartService
from tests.support.polling import wait_until
from tests.support.scenarios import (
    assert_reconciled,
    drained,
    make_config,
    received_keys,
    schema_of,
)
from tests.support.scriptcalls import Scripts

GAME = "bytes"
NGINX_DEFAULT = 1024 * 1024  # client_max_body_size


def push_sized(
    client: redis.Redis, schema: KeySchema, game: str, sizes: list[int], first_seq: int = 0
) -> None:
    """Events of about the given JSON sizes, numbered from ``first_seq``."""
    now = time.time_ns() // 1_000_000
    entries = [
        encode_entry(
            now, orjson.dumps({"game": game, "seq": first_seq + i, "pad": "p" * max(0, size - 40)})
        )
        for i, size in enumerate(sizes)
    ]
    Scripts(client).collect(schema.for_game(game), game, 100_000, 3600, entries)


def test_the_claim_ends_a_batch_before_its_bytes_pass_the_limit(r: redis.Redis) -> None:
    schema = KeySchema("cut", 4)
    keys = schema.for_game(GAME)
    push_sized(r, schema, GAME, [1000] * 9 + [5000] + [1000] * 4)
    claimed = Scripts(r).claim(
        keys, GAME, "b", "t", 128, 4, 60_000, 0, 0, max_bytes=2500, event_overhead=1
    )

    counts = [len(b.entries) for b in claimed.batches]
    assert counts == [2, 2, 2, 2]  # 3 x 1,001 bytes would pass 2,500
    assert claimed.remaining == 6  # the 4th batch's limit reached: the rest stay queued
    claimed = Scripts(r).claim(
        keys, GAME, "c", "t", 128, 4, 60_000, 0, 0, max_bytes=2500, event_overhead=1
    )
    sizes = [[len(e) for e in b.entries] for b in claimed.batches]
    assert [len(s) for s in sizes] == [1, 1, 2, 2]  # the 5,000-byte event goes alone
    assert claimed.remaining == 0


def test_with_the_default_limit_no_body_passes_a_proxy_default(
    redis_url: str, r: redis.Redis, make_endpoint: MakeEndpoint, start_service: StartService
) -> None:
    """1,024 events of 10 KB in four games behind an nginx-like 1 MiB body limit: batches
    are cut under it, so nothing meets a 413 and everything is delivered."""
    endpoint = make_endpoint(max_body_bytes=NGINX_DEFAULT)
    config = make_config(redis_url, endpoint.url)
    schema = schema_of(config)
    games = [f"big-{n}" for n in range(4)]
    for game in games:
        push_sized(r, schema, game, [10_000] * 256)
    start_service(config)

    final = wait_until(lambda: drained(r, schema), timeout=60)
    assert_reconciled(final)
    assert final.summary()["delivered"] == 1024
    assert len(received_keys(endpoint)) == 1024
    sizes = [int(h["Content-Length"]) for h in endpoint.request_headers]
    assert max(sizes) <= NGINX_DEFAULT
    assert len(sizes) == len(endpoint.received)  # no request refused


def test_a_413_splits_the_batch_and_the_limit_taken_is_used_after(
    redis_url: str,
    r: redis.Redis,
    make_endpoint: MakeEndpoint,
    start_service: StartService,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Configured above the endpoint's limit: the first batches meet a 413, are sent again in
    halves, and later batches are cut at the size the endpoint took; none is dead-lettered."""
    caplog.set_level(logging.WARNING, "reporter")
    endpoint = make_endpoint(max_body_bytes=NGINX_DEFAULT)
    config = make_config(redis_url, endpoint.url, sink={"max_batch_bytes": 8 * NGINX_DEFAULT})
    schema = schema_of(config)
    games = [f"big-{n}" for n in range(4)]
    for game in games:
        push_sized(r, schema, game, [10_000] * 256)
    service = start_service(config)

    final = wait_until(lambda: drained(r, schema), timeout=60)
    assert_reconciled(final)
    summary = final.summary()
    assert (summary["delivered"], summary["dead_events"]) == (1024, 0)
    assert set(received_keys(endpoint)) == {(g, s) for g in games for s in range(256)}
    refused = [h for h in endpoint.request_headers if int(h["Content-Length"]) > NGINX_DEFAULT]
    assert refused  # the first batches met the limit
    assert len(refused) <= 8  # ... and only the first ones: the limit was learned
    assert service.body_limit.limit <= NGINX_DEFAULT
    learned = [m for m in caplog.messages if "as too large (HTTP 413)" in m]
    assert 1 <= len(learned) <= 2, learned


def test_a_single_event_over_the_endpoint_limit_is_dead_lettered_alone(
    redis_url: str, r: redis.Redis, make_endpoint: MakeEndpoint, start_service: StartService
) -> None:
    endpoint = make_endpoint(max_body_bytes=20_000)
    config = make_config(redis_url, endpoint.url)
    schema = schema_of(config)
    push_sized(r, schema, GAME, [200] * 10 + [30_000] + [200] * 10)
    service = start_service(config)

    final = wait_until(lambda: drained(r, schema), timeout=30)
    assert_reconciled(final)
    assert (final.summary()["delivered"], final.summary()["dead_events"]) == (20, 1)
    [dead] = service.store.dead_batches(10)
    assert (dead.events, dead.reason) == (1, "too large for the endpoint (HTTP 413)")
    assert set(received_keys(endpoint)) == {(GAME, s) for s in range(21) if s != 10}


def test_replay_cuts_a_dead_letter_again_by_the_byte_limit(r: redis.Redis) -> None:
    schema = KeySchema("recut", 4)
    keys = schema.for_game(GAME)
    scripts = Scripts(r)
    push_sized(r, schema, GAME, [1000] * 6)
    [batch] = scripts.claim(keys, GAME, "b", "t", 128, 1, 60_000, 0, 0).batches
    scripts.nack(
        keys,
        batch.batch_id,
        "t",
        permanent=True,
        min_delay_ms=0,
        initial_ms=1,
        max_ms=1,
        max_attempts=5,
        jitter=0.0,
        dead_max=100,
        reason="HTTP 400",
    )

    budget = JSON_BODY.event_budget(2500 + JSON_BODY.fixed)
    replayed = scripts.replay(keys, "", 10, budget, JSON_BODY.per_event)

    assert replayed == (3, 6, 0)
    parts = sorted(i.decode() for i in r.zrange(keys.retry, 0, -1))
    assert parts == [f"{batch.batch_id}.s{k}" for k in (1, 2, 3)]
    assert [len(r.hget(keys.payloads, p).split(b"\n")) for p in parts] == [2, 2, 2]
    assert r.hget(keys.payloads, batch.batch_id) is None


def test_one_oversized_event_does_not_stop_the_small_ones_after_it_going_in_full_batches(
    redis_url: str,
    r: redis.Redis,
    make_endpoint: MakeEndpoint,
    start_service: StartService,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Behind a 20,000-byte limit, a 30 KB event at the head of 5,000 small ones: its batch is
    halved down to the event alone, which is dead-lettered; the limit learned from the bodies
    of several events refused stays at one event of max_event_bytes in its envelope, so every
    later batch is a full one."""
    caplog.set_level(logging.INFO, "reporter")
    endpoint = make_endpoint(max_body_bytes=20_000)
    config = make_config(redis_url, endpoint.url)
    schema = schema_of(config)
    push_sized(r, schema, GAME, [30_000])
    for first in range(1, 5001, 1000):
        push_sized(r, schema, GAME, [100] * 1000, first_seq=first)
    service = start_service(config)

    final = wait_until(lambda: drained(r, schema), timeout=60)
    assert_reconciled(final)
    assert (final.summary()["delivered"], final.summary()["dead_events"]) == (5000, 1)
    [dead] = service.store.dead_batches(10)
    assert (dead.events, dead.reason) == (1, "too large for the endpoint (HTTP 413)")
    assert received_keys(endpoint) == {(GAME, s): 1 for s in range(1, 5001)}
    floor = JSON_BODY.body_bytes_of(config.buffer.max_event_bytes)
    assert service.body_limit.limit == floor
    with endpoint.lock:
        # The first batch (the big event and 127 small ones) went in halves (<id>.a, .b, ...).
        whole = [
            len(req.events)
            for req in endpoint.received
            if not req.idempotency_key.endswith((".a", ".b"))
        ]
    tail = (5000 - 127) % 128
    assert sorted(whole, reverse=True) == [128] * ((5000 - 127) // 128) + [tail]
    learned = [m for m in caplog.messages if "batches are now cut at" in m]
    assert len(learned) == 1 and f"cut at {floor} bytes" in learned[0], learned


def test_the_limit_grows_back_once_the_endpoint_takes_larger_bodies_again(
    redis_url: str,
    r: redis.Redis,
    make_endpoint: MakeEndpoint,
    start_service: StartService,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An endpoint that refuses bodies over 20,000 bytes, then takes up to 1 MiB again (its
    proxy reconfigured): the probes raise the limit, doubling, back to max_batch_bytes, and
    later batches are cut at it again; every change is logged once."""
    caplog.set_level(logging.INFO, "reporter")
    endpoint = make_endpoint(max_body_bytes=20_000)
    config = make_config(redis_url, endpoint.url, buffer={"max_event_bytes": 16_384})
    schema = schema_of(config)
    push_sized(r, schema, GAME, [1000] * 256)
    service = start_service(config)
    wait_until(lambda: drained(r, schema), timeout=30)
    assert service.body_limit.limit <= 20_000

    endpoint.max_body_bytes = NGINX_DEFAULT
    # Every claim may probe from now on: a test does not wait out the minute.
    service.body_limit._probe_seconds = service.body_limit._next_probe = 0.0
    seq = 256
    while service.body_limit.limit < config.sink.max_batch_bytes:
        assert seq < 256 * 8, service.body_limit.limit  # doubling: a few rounds at most
        push_sized(r, schema, GAME, [10_000] * 128, first_seq=seq)
        seq += 128
        wait_until(lambda: drained(r, schema), timeout=30)
    with endpoint.lock:
        before = len(endpoint.request_headers)
    push_sized(r, schema, GAME, [10_000] * 256, first_seq=seq)
    seq += 256
    final = wait_until(lambda: drained(r, schema), timeout=30)
    assert_reconciled(final)
    assert (final.summary()["delivered"], final.summary()["dead_events"]) == (seq, 0)
    with endpoint.lock:
        sizes = [int(h["Content-Length"]) for h in endpoint.request_headers[before:]]
    assert len(sizes) == 3 and min(sizes[:2]) > 1_000_000 and max(sizes) <= NGINX_DEFAULT, sizes
    changes = [m for m in caplog.messages if "batches are now cut at" in m]
    assert 3 <= len(changes) <= 8, changes  # one lowering, then a few doublings
    assert len(changes) == len(set(changes))  # each change once
    assert f"cut at {config.sink.max_batch_bytes} bytes" in changes[-1]
