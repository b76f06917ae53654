"""The Collector in background and sync mode against real servers."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from types import MappingProxyType
from typing import Any

import pytest
import redis

import collector
from collector import Collector
from collector.store import ENTRY_TIME_DIGITS, KeySchema, SingleServer, Store, entry_time_ms
from tests.support.fixtures import FAST_FAILURE, MakeCollector
from tests.support.markers import secret
from tests.support.polling import wait_until
from tests.support.servers import Server
from tests.support.stored import balanced, queue_entries, queue_events, stats_of, stats_total

PW = secret("pw")

PREFIX = "tc"
SCHEMA = KeySchema(PREFIX, 16)


def test_flush_stores_events_grouped_by_game(make: MakeCollector, r: redis.Redis) -> None:
    c = make()
    games = ["g1", "g2", "g3"]
    before_ms = time.time_ns() // 1_000_000
    for i in range(30):
        assert c.collect(games[i % 3], {"seq": i, "game": games[i % 3]}) == 0
    after_ms = time.time_ns() // 1_000_000
    assert c.flush(timeout=10)

    for n, game in enumerate(games):
        assert queue_events(r, SCHEMA, game) == [{"seq": i, "game": game} for i in range(n, 30, 3)]
        for entry in queue_entries(r, SCHEMA, game):
            assert entry[:ENTRY_TIME_DIGITS].isdigit()
            assert before_ms <= entry_time_ms(entry) <= after_ms
    stats = c.stats()
    assert stats["accepted"] == stats["stored"] == 30
    assert stats["buffered"] == 0
    assert stats["flushes"] >= 1
    assert balanced(stats)
    assert stats_total(r, SCHEMA, "stored") == 30


def test_stats_start_at_zero(make: MakeCollector) -> None:
    stats = make().stats()
    assert set(stats) == {
        "accepted",
        "stored",
        "evicted",
        "dropped_too_large",
        "dropped_at_close",
        "dropped_closed",
        "dropped_disabled",
        "dropped_buffer_full",
        "backend_errors",
        "refused_oom",
        "flushes",
        "store_resets",
        "buffered",
        "unreplicated_writes",
        "merged",
        "unconfirmed_writes",
        "refused_writes",
        "refused_repeats",
    }
    assert set(stats.values()) == {0}


def test_flush_returns_once_everything_collected_is_stored(
    make: MakeCollector, r: redis.Redis
) -> None:
    c = make(flush_interval_ms=1)
    for i in range(300):
        c.collect("g", {"seq": i})
        assert c.flush(timeout=10)
        assert r.llen(SCHEMA.for_game("g").queue("g")) == i + 1


def test_flush_waits_for_events_taken_but_not_yet_written(
    make: MakeCollector, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flusher holds the event between taking it from the buffer and writing it: the
    buffer is empty then, but flush() must not report the event as stored."""
    c = make(flush_interval_ms=1)
    taken, release = threading.Event(), threading.Event()
    take = c._buffer.take

    def held_take() -> Any:
        queues, pending = take()
        if queues:
            taken.set()
            release.wait(30)
        return queues, pending

    monkeypatch.setattr(c._buffer, "take", held_take)
    try:
        c.collect("g", {"a": 1})
        assert taken.wait(10)
        assert c.flush(timeout=0.2) is False
        assert queue_events(r, SCHEMA, "g") == []
    finally:
        release.set()
    assert c.flush(timeout=10)
    assert queue_events(r, SCHEMA, "g") == [{"a": 1}]


def test_many_threads_collect_concurrently(make: MakeCollector, r: redis.Redis) -> None:
    c = make(max_events_per_game=100_000)
    threads, per_thread = 8, 1500
    games = [f"game-{n}" for n in range(5)]
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            start.wait()
            for i in range(per_thread):
                c.collect(games[(t + i) % len(games)], {"t": t, "i": i})
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    assert c.flush(timeout=30)

    total = threads * per_thread
    seen = [(e["t"], e["i"]) for g in games for e in queue_events(r, SCHEMA, g)]
    assert len(seen) == total
    assert set(seen) == {(t, i) for t in range(threads) for i in range(per_thread)}
    for g in games:  # each thread's events of one game stay in collect order
        events = queue_events(r, SCHEMA, g)
        for t in range(threads):
            mine = [e["i"] for e in events if e["t"] == t]
            assert mine == sorted(mine)
    stats = c.stats()
    assert stats["accepted"] == stats["stored"] == total
    assert balanced(stats)
    assert stats_total(r, SCHEMA, "stored") == total


def test_close_flushes(make: MakeCollector, r: redis.Redis) -> None:
    c = make(flush_interval_ms=60_000)  # nothing is written before close()
    for i in range(100):
        c.collect("g", {"seq": i})
    c.close()
    assert [e["seq"] for e in queue_events(r, SCHEMA, "g")] == list(range(100))
    stats = c.stats()
    assert stats["stored"] == 100
    assert stats["dropped_at_close"] == 0
    assert balanced(stats)
    c.close()  # twice is fine


def test_context_manager_closes(redis_url: str, r: redis.Redis) -> None:
    with Collector(url=redis_url, key_prefix=PREFIX, flush_interval_ms=60_000) as c:
        c.collect("g", {"a": 1})
    assert queue_events(r, SCHEMA, "g") == [{"a": 1}]
    assert c.collect("g", {"a": 2}) == 0
    assert c.stats()["dropped_closed"] == 1


def test_collect_after_close_is_counted_not_raised(make: MakeCollector, r: redis.Redis) -> None:
    c = make()
    c.collect("g", {"a": 1})
    c.close()
    for _ in range(3):
        assert c.collect("g", {"a": 2}) == 0
    assert c.flush(timeout=1)
    stats = c.stats()
    assert stats["dropped_closed"] == 3
    assert stats["accepted"] == stats["stored"] == 1
    assert balanced(stats)
    assert queue_events(r, SCHEMA, "g") == [{"a": 1}]


def test_sync_mode_returns_evicted_counts(make: MakeCollector, r: redis.Redis) -> None:
    c = make(mode="sync", max_events_per_game=3)
    assert [c.collect("g", {"seq": i}) for i in range(5)] == [0, 0, 0, 1, 1]
    assert [e["seq"] for e in queue_events(r, SCHEMA, "g")] == [2, 3, 4]
    stats = c.stats()
    assert stats["accepted"] == stats["stored"] == 5
    assert stats["evicted"] == 2
    assert stats["buffered"] == 0
    assert stats_of(r, SCHEMA, "g") == {"stored": 5, "evicted": 2}
    assert c.flush()


def test_sync_mode_raises_backend_error_when_redis_is_down(
    own_server: Server, make_collector: MakeCollector
) -> None:
    c = make_collector(url=own_server.url, key_prefix=PREFIX, mode="sync", **FAST_FAILURE)
    assert c.collect("g", {"seq": 0}) == 0
    own_server.stop()
    with pytest.raises(collector.BackendError) as info:
        c.collect("g", {"seq": 1})
    assert not isinstance(info.value, redis.RedisError)
    assert isinstance(info.value, collector.TelemetryError)
    assert "'g'" in str(info.value)
    stats = c.stats()
    assert stats["backend_errors"] == 1
    assert stats["accepted"] == stats["stored"] == 1

    own_server.start()  # an empty server again: nothing is persisted
    assert c.collect("g", {"seq": 2}) == 0
    client = own_server.client()
    assert [e["seq"] for e in queue_events(client, SCHEMA, "g")] == [2]
    client.close()


def test_sync_mode_reports_earlier_too_large_drops(make: MakeCollector, r: redis.Redis) -> None:
    c = make(mode="sync", max_event_bytes=64)
    c.collect("g", {"blob": "x" * 100})
    assert c.collect("g", {"a": 1}) == 0
    assert stats_of(r, SCHEMA, "g")["dropped_too_large"] == 1


@pytest.mark.parametrize("mode", ["background", "sync"])
def test_event_over_max_event_bytes_is_dropped_and_counted(
    make: MakeCollector, r: redis.Redis, mode: str
) -> None:
    c = make(max_event_bytes=64, mode=mode)
    assert c.collect("big", {"blob": "x" * 100}) == 0
    assert c.collect("big", {"blob": "y" * 51}) == 0  # exactly 64 bytes of JSON: kept
    stats = c.stats()
    assert stats["dropped_too_large"] == 1
    assert stats["accepted"] == 1
    assert c.flush(timeout=10)
    assert stats_of(r, SCHEMA, "big").get("dropped_too_large") == 1
    assert queue_events(r, SCHEMA, "big") == [{"blob": "y" * 51}]


def test_too_large_drop_alone_reaches_redis_after_flush(
    make: MakeCollector, r: redis.Redis
) -> None:
    c = make(max_event_bytes=64, flush_interval_ms=60_000)
    c.collect("big", {"blob": "x" * 100})
    assert c.flush(timeout=10)
    assert stats_of(r, SCHEMA, "big") == {"dropped_too_large": 1}
    assert not r.exists(SCHEMA.for_game("big").queue("big"))


class Opaque:
    def __repr__(self) -> str:  # the same in every process, so test ids are too
        return "Opaque()"


@pytest.mark.parametrize(
    "event",
    [
        None,
        5,
        "a string",
        b"bytes",
        [("a", 1)],
        ["a"],
        {"a"},
        Opaque(),
    ],
    ids=repr,
)
def test_event_that_is_not_a_mapping_raises_type_error(make: MakeCollector, event: Any) -> None:
    c = make()
    with pytest.raises(TypeError, match="mapping"):
        c.collect("g", event)
    assert c.stats()["accepted"] == 0


@pytest.mark.parametrize(
    "event",
    [
        {"a": Opaque()},
        {"a": {1, 2}},
        {"a": b"bytes"},
        {"a": 2**70},
        {1: "int key"},
        {("t",): 1},
        {"nested": {2: "x"}},
    ],
    ids=repr,
)
def test_event_that_is_not_serialisable_raises_type_error(make: MakeCollector, event: Any) -> None:
    c = make()
    with pytest.raises(TypeError, match="JSON-serialisable"):
        c.collect("g", event)
    assert c.stats()["accepted"] == 0


class Record(dict[str, Any]):
    pass


@pytest.mark.parametrize(
    "event",
    [
        MappingProxyType({"a": 1, "b": [1, 2]}),
        OrderedDict([("a", 1), ("b", [1, 2])]),
        Record(a=1, b=[1, 2]),
    ],
    ids=lambda e: type(e).__name__,
)
def test_any_mapping_is_accepted(make: MakeCollector, r: redis.Redis, event: Any) -> None:
    c = make()
    c.collect("g", event)
    assert c.flush(timeout=10)
    assert queue_events(r, SCHEMA, "g") == [{"a": 1, "b": [1, 2]}]


@pytest.mark.parametrize("game", ["a{b", "", "x" * 129], ids=repr)  # not a str: test_slots.py
@pytest.mark.parametrize("mode", ["background", "sync"])
def test_bad_game_name_raises_value_error(make: MakeCollector, game: Any, mode: str) -> None:
    c = make(mode=mode)
    with pytest.raises(ValueError, match="game name"):
        c.collect(game, {"a": 1})
    assert c.stats()["accepted"] == 0


def test_game_name_is_checked_before_the_event(make: MakeCollector) -> None:
    with pytest.raises(ValueError, match="game name"):
        make().collect("a b", None)  # type: ignore[arg-type]


def test_junk_at_a_games_list_is_set_aside_and_each_event_stored_once(
    make: MakeCollector, r: redis.Redis
) -> None:
    """A string at one game's list (a WRONGTYPE for every write once): collect.lua moves it to
    the shard's quarantine before writing anything, and both games are stored, each event
    once."""
    keys = SCHEMA.for_game("bad")
    r.set(keys.queue("bad"), "not a list")
    c = make(flush_interval_ms=5, retry_max_delay_ms=10)
    for i in range(10):
        c.collect("good", {"seq": i})
        c.collect("bad", {"seq": i})
    assert c.flush(timeout=10)
    assert [e["seq"] for e in queue_events(r, SCHEMA, "good")] == list(range(10))
    assert [e["seq"] for e in queue_events(r, SCHEMA, "bad")] == list(range(10))
    stats = c.stats()
    assert (stats["stored"], stats["backend_errors"]) == (20, 0)
    assert balanced(stats)
    [record] = Store(SingleServer(r), SCHEMA).quarantined(keys, 10)
    assert (record.key, record.found, record.sample, record.script) == (
        keys.queue("bad"),
        "string",
        "not a list",
        "collect",
    )
    assert stats_of(r, SCHEMA, "bad")["quarantined_records"] == 1


def test_cap_thins_a_burst_before_sending(make: MakeCollector, r: redis.Redis) -> None:
    c = make(max_events_per_game=5, flush_interval_ms=60_000)
    for i in range(20):
        c.collect("g", {"seq": i})
    assert c.flush(timeout=10)
    assert [e["seq"] for e in queue_events(r, SCHEMA, "g")] == list(range(15, 20))
    stats = c.stats()
    assert stats["stored"] == 20
    assert stats["evicted"] == 15
    assert balanced(stats)
    assert stats_of(r, SCHEMA, "g") == {"stored": 20, "evicted": 15}


def test_repr_masks_the_password(make_collector: MakeCollector) -> None:
    c = make_collector(url=f"redis://user:{PW}@127.0.0.1:1/0")
    assert PW not in repr(c)
    assert "127.0.0.1:1" in repr(c)


@pytest.fixture
def no_thread_leak() -> Iterator[None]:
    before = {t.ident for t in threading.enumerate()}
    yield
    wait_until(
        lambda: (
            not [
                t for t in threading.enumerate() if t.ident not in before and "telemetry" in t.name
            ]
        ),
        what="flusher threads to end",
    )


def test_close_ends_the_flusher_thread(make: MakeCollector, no_thread_leak: None) -> None:
    c = make()
    c.collect("g", {"a": 1})
    c.close()


def test_burst_larger_than_one_flush_round(make: MakeCollector, r: redis.Redis) -> None:
    """More than one round (20000 events) and more than one call per game (1000 events)."""
    c = make(max_events_per_game=20_000)
    games = {"big": 25_000, "mid": 9_000, "small": 3}
    for game, count in games.items():
        for i in range(count):
            c.collect(game, {"seq": i})
    assert c.flush(timeout=60)

    assert [e["seq"] for e in queue_events(r, SCHEMA, "big")] == list(range(5_000, 25_000))
    assert [e["seq"] for e in queue_events(r, SCHEMA, "mid")] == list(range(9_000))
    assert [e["seq"] for e in queue_events(r, SCHEMA, "small")] == list(range(3))
    stats = c.stats()
    assert stats["accepted"] == stats["stored"] == sum(games.values())
    assert stats["evicted"] == 5_000
    assert balanced(stats)
    assert stats_total(r, SCHEMA, "evicted") == 5_000
    assert stats_total(r, SCHEMA, "stored") == sum(games.values())


def test_sync_mode_from_many_threads(make: MakeCollector, r: redis.Redis) -> None:
    c = make(mode="sync")
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(100):
                assert c.collect(f"game-{t % 2}", {"t": t, "i": i}) == 0
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    got = [(e["t"], e["i"]) for g in ("game-0", "game-1") for e in queue_events(r, SCHEMA, g)]
    assert sorted(got) == [(t, i) for t in range(4) for i in range(100)]
    stats = c.stats()
    assert stats["accepted"] == stats["stored"] == 400
    assert balanced(stats)


def test_a_given_store_is_used(
    redis_url: str, r: redis.Redis, make_collector: MakeCollector
) -> None:
    client = redis.Redis.from_url(redis_url)
    store = Store(SingleServer(client), SCHEMA)
    c = make_collector(store=store, key_prefix=PREFIX, url="redis://127.0.0.1:1/0")
    c.collect("g", {"a": 1})
    assert c.flush(timeout=10)  # stored through the given store, not the (unreachable) url
    assert queue_events(r, SCHEMA, "g") == [{"a": 1}]
    c.close()
    assert client.ping()
    client.close()
