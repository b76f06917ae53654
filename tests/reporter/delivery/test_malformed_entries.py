"""Entry framing: the SDK never stores an entry that spans lines, and whatever malformed
entries a game's list holds (written by hand, by another tool, by an older version) are
dead-lettered alone while their neighbours are delivered, with every event accounted for."""

from __future__ import annotations

import time
from collections import Counter

import orjson
import pytest
import redis

from collector import Collector
from collector.counters import Counter as C
from collector.store import encode_entry
from reporter._delivery.attempt import malformed
from reporter._senders.outcome import MALFORMED
from tests.support.fixtures import MakeEndpoint, StartService
from tests.support.polling import wait_until
from tests.support.scenarios import (
    assert_reconciled,
    drained,
    make_config,
    received_keys,
    schema_of,
)
from tests.support.scriptcalls import Scripts, store_of

GAME = "framing"
GARBAGE = [b"not an entry", b"12345", b"1234567890123", b"12345678901x3{}", b""]


def test_garbage_in_a_games_list_is_dead_lettered_alone_and_its_neighbours_delivered(
    redis_url: str, r: redis.Redis, make_endpoint: MakeEndpoint, start_service: StartService
) -> None:
    endpoint = make_endpoint()
    config = make_config(redis_url, endpoint.url)
    schema = schema_of(config)
    keys = schema.for_game(GAME)
    now = time.time_ns() // 1_000_000
    good = [encode_entry(now + seq, orjson.dumps({"game": GAME, "seq": seq})) for seq in range(6)]
    # Garbage first (the head is what the sweeper reads), between and after good entries,
    # written through the store layer's collect call; one line with a newline inside can only
    # be written by hand.
    entries = [
        GARBAGE[0],
        good[0],
        GARBAGE[1],
        good[1],
        GARBAGE[4],
        good[2],
        GARBAGE[2],
        good[3],
        GARBAGE[3],
        good[4],
        good[5],
    ]
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
    redis_url: str, r: redis.Redis, make_endpoint: MakeEndpoint, start_service: StartService
) -> None:
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


# Raw JSON that would close the event early and forge the body's envelope (issue 20).
FORGED = b'1}],"game":"victim","batch_id":"forged","events":[{"f":1'


@pytest.mark.parametrize("raw", [FORGED, b'{"unclosed":', b"1 2", b"", b"[1]]"])
def test_raw_json_that_is_not_one_json_value_is_refused_by_the_sdk(raw: bytes) -> None:
    c = Collector(disabled=True)
    try:
        with pytest.raises(TypeError, match=r"raw JSON .* not exactly one JSON value"):
            c.collect("attacker", {"x": orjson.Fragment(raw)})
        with pytest.raises(TypeError, match=r"not exactly one JSON value"):  # at any depth
            c.collect("attacker", {"a": [1, {"b": (2, orjson.Fragment(raw))}]})
        c.collect("attacker", {"x": orjson.Fragment(b' {"a":[1,2]} '), "y": [1, {"z": None}]})
        assert c.stats()["accepted"] == 1
    finally:
        c.close()


def test_a_forged_envelope_written_to_redis_never_reaches_the_endpoint_as_another_games(
    redis_url: str, r: redis.Redis, make_endpoint: MakeEndpoint, start_service: StartService
) -> None:
    """The bytes the SDK refuses, pushed straight into an attacker's list: the reporter
    checks every event before it builds a body, dead-letters that one alone as a malformed
    entry (counted), and delivers its neighbours and the victim's own events as they are."""
    endpoint = make_endpoint()
    config = make_config(redis_url, endpoint.url)
    schema = schema_of(config)
    scripts = Scripts(store_of(r, schema))
    now = time.time_ns() // 1_000_000
    for game in ("attacker", "victim"):
        scripts.collect(
            schema.for_game(game),
            game,
            1000,
            3600,
            [encode_entry(now, orjson.dumps({"game": game, "seq": seq})) for seq in range(5)],
        )
    forged = encode_entry(now, b'{"game":"attacker","x":' + FORGED + b"}")
    keys = schema.for_game("attacker")
    r.rpush(keys.queue("attacker"), forged)
    r.hincrby(keys.stats, "stored", 1)  # as a hand-writer that keeps the books would
    scripts.collect(
        keys,
        "attacker",
        1000,
        3600,
        [encode_entry(now, orjson.dumps({"game": "attacker", "seq": seq})) for seq in range(5, 10)],
    )
    service = start_service(config)

    final = wait_until(lambda: drained(r, schema), timeout=30)
    assert_reconciled(final)
    with endpoint.lock:
        received = list(endpoint.received)
    assert all(req.batch_id != "forged" for req in received)
    assert all(event.get("game") == req.game for req in received for event in req.events)
    assert received_keys(endpoint) == Counter(
        [("victim", seq) for seq in range(5)] + [("attacker", seq) for seq in range(10)]
    )
    summary = final.summary()
    assert (summary["delivered"], summary["dead_events"]) == (15, 1)
    assert (summary["malformed_entries"], summary["rejected_items"]) == (1, 0)
    assert service.tally.snapshot().get(C.MALFORMED_ENTRIES) == 1
    [dead] = service.store.dead_batches(10)
    assert (dead.game, dead.events, dead.reason) == ("attacker", 1, MALFORMED)
    assert r.hget(keys.payloads, dead.batch_id) == forged


# Texts that are exactly one JSON value, and texts that are not, as the reporter meets them.
ONE_VALUE = [
    b'{"a":1}',
    b' {"a":[1,{"b":null}]} ',
    b'"\xe4\xb8\x80"',
    b"-0",
    b"true",
    b"123456789012345678901234567890",
    b'{"a":1,"a":2}',
    b"[" * 200 + b"]" * 200,
]
NOT_ONE_VALUE = [
    FORGED,
    b"1,2",
    b'{"a":1}{"b":2}',
    b"",
    b" ",
    b'{"a":1,}',
    b'"\\ud800"',
    b'"\xff"',
    b'"\xed\xa0\x80"',
    b'{"a":"\x01"}',
    b"\xef\xbb\xbf{}",
    b"nul",
    b"[" * 100_000,
]


def test_the_reporter_finds_exactly_the_events_that_are_not_one_json_value() -> None:
    events = [e for pair in zip(ONE_VALUE, NOT_ONE_VALUE, strict=False) for e in pair]
    events += NOT_ONE_VALUE[len(ONE_VALUE) :]
    expected = [i for i, e in enumerate(events) if e in NOT_ONE_VALUE]
    assert malformed(events) == expected
    assert malformed(ONE_VALUE) == []
    for bad in NOT_ONE_VALUE:  # alone, and among well-formed neighbours
        assert malformed([bad]) == [0]
        assert malformed([*ONE_VALUE, bad, *ONE_VALUE]) == [len(ONE_VALUE)]


@pytest.mark.parametrize("raw", [b'"\xff"', b'{"a":"\xed\xa0\x80"}'])
def test_raw_json_that_is_not_utf8_is_refused_by_the_sdk(raw: bytes) -> None:
    c = Collector(disabled=True)
    try:
        with pytest.raises(TypeError, match=r"raw JSON .* not UTF-8"):
            c.collect("attacker", {"x": orjson.Fragment(raw)})
        c.collect("attacker", {"x": orjson.Fragment('"玩家一"'.encode()), "名字": "🎮"})
        assert c.stats()["accepted"] == 1
    finally:
        c.close()
