"""Entry framing: the SDK never stores an entry that spans lines, and whatever malformed
entries a game's list holds (written by hand, by another tool, by an older version) are
dead-lettered alone while their neighbours are delivered, with every event accounted for."""

from __future__ import annotations

import time

import orjson
import pytest
import redis

from collector import Collector
from collector.store import encode_entry
from reporter._delivery.attempt import MALFORMED
from tests.delivery.conftest import MakeEndpoint, StartService
from tests.delivery.helpers import (
    assert_reconciled,
    drained,
    make_config,
    received_keys,
    schema_of,
    wait_until,
)
from tests.scriptcalls import Scripts, store_of

GAME = "framing"
GARBAGE = [b"not an entry", b"12345", b"1234567890123", b"12345678901x3{}", b""]


def test_garbage_in_a_games_list_is_dead_lettered_alone_and_its_neighbours_delivered(
        redis_url: str, r: redis.Redis, make_endpoint: MakeEndpoint,
        start_service: StartService) -> None:
    endpoint = make_endpoint()
    config = make_config(redis_url, endpoint.url)
    schema = schema_of(config)
    keys = schema.for_game(GAME)
    now = time.time_ns() // 1_000_000
    good = [encode_entry(now + seq, orjson.dumps({"game": GAME, "seq": seq}))
            for seq in range(6)]
    # Garbage first (the head is what the sweeper reads), between and after good entries,
    # written through the store layer's collect call; one line with a newline inside can only
    # be written by hand.
    entries = [GARBAGE[0], good[0], GARBAGE[1], good[1], GARBAGE[4], good[2], GARBAGE[2],
               good[3], GARBAGE[3], good[4], good[5]]
    Scripts(store_of(r, schema)).collect(keys, GAME, 1000, 3600, entries)
    r.rpush(keys.queue(GAME), encode_entry(now, b'{"game":"framing",\n"seq":99}'))
    r.hincrby(keys.stats, "stored", 1)  # as a hand-writer that keeps the books would
    service = start_service(config)

    final = wait_until(lambda: drained(r, schema), timeout=30)
    assert_reconciled(final)
    summary = final.summary()
    malformed = len(GARBAGE) + 1
    assert (summary["delivered"], summary["dead_events"]) == (6, malformed)
    assert summary["malformed_entries"] == malformed
    assert set(received_keys(endpoint)) == {(GAME, seq) for seq in range(6)}
    dead = service.store.dead_batches(100)
    assert len(dead) == malformed
    assert {(d.events, d.reason) for d in dead} == {(1, "malformed entry")}


def test_replay_leaves_the_dead_letters_of_malformed_entries_in_place(r: redis.Redis) -> None:
    schema = store_of(r).schema
    keys = schema.for_game(GAME)
    scripts = Scripts(r)
    scripts.collect(keys, GAME, 1000, 3600, [b"garbage", encode_entry(1, b"{}")])
    claimed = scripts.claim(keys, GAME, "b", "t", 128, 4, 60_000, 0, 0)
    assert claimed.malformed == 1 and len(claimed.batches) == 1

    assert scripts.replay(keys) == (0, 0, 1)
    assert scripts.replay(keys, "b.m1") == (0, 0, 1)
    assert r.lrange(keys.dead, 0, -1) == [b"b.m1"]


def test_raw_json_with_a_newline_is_refused_and_forges_nothing(
        redis_url: str, r: redis.Redis, make_endpoint: MakeEndpoint,
        start_service: StartService) -> None:
    endpoint = make_endpoint()
    config = make_config(redis_url, endpoint.url)
    schema = schema_of(config)
    forged = orjson.Fragment(b'1}\n9999999999999{"game":"framing","seq":-1')
    c = Collector(config=config)
    try:
        for seq in range(50):
            c.collect(GAME, {"game": GAME, "seq": seq})
            if seq == 25:
                with pytest.raises(TypeError, match=r"raw JSON .* newline"):
                    c.collect(GAME, {"game": GAME, "raw": forged})
        assert c.flush(timeout=10)
    finally:
        c.close()
    start_service(config)

    final = wait_until(lambda: drained(r, schema), timeout=30)
    assert_reconciled(final)
    assert final.summary()["delivered"] == 50
    assert set(received_keys(endpoint)) == {(GAME, seq) for seq in range(50)}


def test_raw_json_that_is_not_json_is_set_aside_when_the_endpoint_refuses_it(
        redis_url: str, r: redis.Redis, make_endpoint: MakeEndpoint,
        start_service: StartService) -> None:
    """One line but not JSON: the endpoint answers 400 to the batch; the reporter finds the
    event, dead-letters it alone and sends its neighbours again under a derived key."""
    endpoint = make_endpoint()
    config = make_config(redis_url, endpoint.url)
    schema = schema_of(config)
    c = Collector(config=config)
    try:
        for seq in range(20):
            c.collect(GAME, {"game": GAME, "seq": seq})
        c.collect(GAME, {"game": GAME, "raw": orjson.Fragment(b'{"unclosed":')})
        for seq in range(20, 40):
            c.collect(GAME, {"game": GAME, "seq": seq})
        assert c.flush(timeout=10)
    finally:
        c.close()
    service = start_service(config)

    final = wait_until(lambda: drained(r, schema), timeout=30)
    assert_reconciled(final)
    assert (final.summary()["delivered"], final.summary()["dead_events"]) == (40, 1)
    assert set(received_keys(endpoint)) == {(GAME, seq) for seq in range(40)}
    [dead] = service.store.dead_batches(10)
    assert (dead.events, dead.reason) == (1, MALFORMED)
    assert all(r.idempotency_key.endswith(".v") for r in endpoint.received
               if any(e["seq"] in (19, 20) for e in r.events))
