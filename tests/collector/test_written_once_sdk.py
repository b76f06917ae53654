"""The SDK's writes, written once: a write whose reply was lost (a timeout) is sent again as
it is and stored once; and ``collect(..., dedup_key=...)`` / ``[buffer] dedup_fields``."""

from __future__ import annotations

import threading

import pytest
import redis

from collector import Collector
from collector.config import TelemetryConfig, build_config, raw_settings
from collector.store import KeySchema
from tests.support.fixtures import MakeCollector
from tests.support.polling import wait_until
from tests.support.relay import relay_to
from tests.support.servers import Server
from tests.support.stored import balanced, queue_events, stats_total

PREFIX = "once"
SCHEMA = KeySchema(PREFIX, 16)
GAMES = [f"g{i}" for i in range(6)]


def stored_in_redis(client: redis.Redis) -> tuple[int, int]:
    """The shards' ``stored`` counters added up, and the events in the games' lists."""
    return (
        stats_total(client, SCHEMA, "stored"),
        sum(len(queue_events(client, SCHEMA, g)) for g in GAMES),
    )


def test_writes_whose_replies_were_lost_are_stored_once(
    own_server: Server, make_collector: MakeCollector
) -> None:
    """A relay loses the reply of every script call for a while: each call runs, then its
    connection closes.  The client sends it again on a new connection ([redis] retries),
    whose reply is lost too; the writer keeps the call and sends it again in later rounds.
    Redis runs every copy it receives: each after the first is answered as a repeat."""
    with relay_to(("127.0.0.1", own_server.port)) as relay:
        c = make_collector(
            url=relay.url,
            key_prefix=PREFIX,
            socket_timeout_seconds=1.0,
            connect_timeout_seconds=0.5,
            flush_interval_ms=5,
            retry_max_delay_ms=50,
        )
        c.collect(GAMES[0], {"seq": -1})  # connections open, scripts loaded
        assert c.flush(timeout=10)
        relay.lose_replies()
        for seq in range(300):
            c.collect(GAMES[seq % len(GAMES)], {"seq": seq})
        wait_until(lambda: relay.lost >= 20, what="replies lost after their calls ran")
        assert c.stats()["unconfirmed_writes"] >= 1
        for seq in range(300, 600):  # more events meanwhile: they wait behind the unconfirmed
            c.collect(GAMES[seq % len(GAMES)], {"seq": seq})
        relay.lose_replies(False)
        assert c.flush(timeout=20)
    stats = c.stats()
    assert stats["stored"] == 601 and stats["unconfirmed_writes"] == 0 and balanced(stats)
    admin = own_server.client()
    assert stored_in_redis(admin) == (601, 601)  # each run several times, stored once
    for game in GAMES:  # in the order collected
        seqs = [e["seq"] for e in queue_events(admin, SCHEMA, game)]
        assert seqs == sorted(seqs)


def test_redis_paused_under_a_producer_stores_as_many_as_the_sdk_counts(
    own_server: Server, make_collector: MakeCollector
) -> None:
    """Redis hung (SIGSTOP) for about 6 s (three write rounds of a 1 s socket timeout and a
    resend each) under a steady producer: the timed-out writes had been received, and run
    when Redis goes on; the SDK sends them again as they are, and Redis stores them once."""
    c = make_collector(
        url=own_server.url,
        key_prefix=PREFIX,
        socket_timeout_seconds=1.0,
        connect_timeout_seconds=1.0,
        retry_max_delay_ms=500,
        max_events_per_game=100_000,
    )
    stop = threading.Event()
    sent = [0]

    def produce() -> None:  # about 2,000 events/s until stopped
        while not stop.wait(0.01):
            for _ in range(20):
                c.collect(GAMES[sent[0] % len(GAMES)], {"seq": sent[0]})
                sent[0] += 1

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        wait_until(lambda: c.stats()["stored"] >= 1000, what="writes before the pause")
        own_server.pause()
        try:
            wait_until(
                lambda: c.stats()["backend_errors"] >= 3,
                timeout=30,
                what="three write rounds timing out",
            )
        finally:
            own_server.resume()
        at_resume = sent[0]
        wait_until(lambda: sent[0] >= at_resume + 1000, what="more events after the pause")
    finally:
        stop.set()
        producer.join()
    assert c.flush(timeout=30)
    stats = c.stats()
    assert stats["accepted"] == stats["stored"] == sent[0] and balanced(stats)
    assert stored_in_redis(own_server.client()) == (sent[0], sent[0])


# -- dedup keys ---------------------------------------------------------------------------------


def test_a_second_event_with_the_same_key_is_merged(
    redis_url: str, make_collector: MakeCollector
) -> None:
    c = make_collector(url=redis_url, key_prefix=PREFIX)
    c.collect("g0", {"n": 1}, dedup_key="login:s1")
    c.collect("g0", {"n": 2}, dedup_key="login:s1")
    c.collect("g0", {"n": 3}, dedup_key="logout:s1")
    c.collect("g1", {"n": 4}, dedup_key="login:s1")  # keys are per game
    c.collect("g0", {"n": 5})  # no key: always stored
    assert c.flush(timeout=10)
    stats = c.stats()
    assert (stats["accepted"], stats["stored"], stats["merged"]) == (5, 5, 1)
    assert balanced(stats)
    client = redis.Redis.from_url(redis_url)
    assert queue_events(client, SCHEMA, "g0") == [{"n": 1}, {"n": 3}, {"n": 5}]
    assert queue_events(client, SCHEMA, "g1") == [{"n": 4}]
    assert stats_total(client, SCHEMA, "merged") == 1


def test_dedup_fields_make_the_key_per_game(redis_url: str) -> None:
    raw = raw_settings(TelemetryConfig())
    raw["redis"].update(url=redis_url, key_prefix=PREFIX)
    raw["buffer"]["dedup_fields"] = ["si", "bt"]
    raw["games"] = {"g1": {"dedup_fields": ["si"], "dedup_window_seconds": 60}}
    config = build_config(raw, "test", env={}, interpolate=False)
    assert (config.dedup_window_for("g0"), config.dedup_window_for("g1")) == (180, 60)
    with Collector(config=config, mode="sync") as c:
        for game in ("g0", "g1"):
            c.collect(game, {"si": "a", "bt": 1})
            c.collect(game, {"si": "a", "bt": 0})
            c.collect(game, {"si": "a", "bt": 1, "other": "ignored"})
            c.collect(game, {"x": 1})  # none of the fields: no key
            c.collect(game, {"x": 1})
            c.collect(game, {"si": "b", "bt": 1}, dedup_key="given")  # a given key wins
            c.collect(game, {"si": "c", "bt": 1}, dedup_key="given")
        assert c.stats()["merged"] == 2 + 3
    client = redis.Redis.from_url(redis_url)
    assert len(queue_events(client, SCHEMA, "g0")) == 5
    assert len(queue_events(client, SCHEMA, "g1")) == 4


@pytest.mark.parametrize(
    ("key", "error", "text"),
    [
        (b"k", TypeError, "dedup_key for game 'g0' must be a str, got bytes"),
        (7, TypeError, "must be a str, got int"),
        ("", ValueError, "dedup_key for game 'g0' is empty"),
    ],
)
def test_a_bad_dedup_key_is_refused_naming_it(
    make_collector: MakeCollector, key: object, error: type[Exception], text: str
) -> None:
    c = make_collector(disabled=True)
    with pytest.raises(error, match=text):
        c.collect("g0", {"n": 1}, dedup_key=key)  # type: ignore[arg-type]
    assert c.stats()["accepted"] == 0
