"""collect.lua, written once: a write with a writer id and a sequence number is applied once
however often it is sent, and entries with a dedup key are merged within the window.  On
real servers, the calls sent by hand as the SDK would send them."""

from __future__ import annotations

import orjson
import pytest
import redis

from collector._constants import WRITES_PER_WRITER
from collector.store import Collect
from tests.support.stored import stats_of
from tests.support.written_once import (
    GAME,
    HORIZON,
    KEYS,
    SCHEMA,
    entry,
    keyed,
    queue,
    send,
    write,
)


def test_a_write_replayed_by_hand_is_applied_once_and_answered_as_the_first_time(
    r: redis.Redis,
) -> None:
    call = write([entry(i) for i in range(5)], cap=3, seq=1)
    first = send(r, call)
    again = send(r, call)  # as after a lost reply: the very same call
    third = send(r, call)
    assert (first.evicted, first.repeat) == (2, False)
    assert (again.evicted, again.repeat) == (third.evicted, third.repeat) == (2, True)
    assert again.marker == first.marker
    assert queue(r) == [entry(i) for i in range(2, 5)]
    assert stats_of(r, SCHEMA, GAME) == {"stored": 5, "evicted": 2}


def test_other_sequence_numbers_and_other_writers_are_other_writes(r: redis.Redis) -> None:
    send(r, write([entry(1)], "w1", seq=1))
    send(r, write([entry(2)], "w1", seq=2, low=1))
    send(r, write([entry(3)], "w2", seq=1))
    assert send(r, write([entry(2)], "w1", seq=2, low=1)).repeat
    assert queue(r) == [entry(1), entry(2), entry(3)]
    assert stats_of(r, SCHEMA, GAME)["stored"] == 3


def test_a_write_without_a_writer_is_applied_every_time(r: redis.Redis) -> None:
    call = Collect(KEYS, GAME, [entry(1)], 100, 3600)
    send(r, call)
    send(r, call)
    assert queue(r) == [entry(1), entry(1)]


def test_the_memory_of_answered_writes_is_let_go(r: redis.Redis) -> None:
    """Each write says the writer's lowest number still without an answer; the shard lets go
    of the writes below it, sixteen at a time, and a repeat of one of those stores nothing."""
    for seq in range(1, 51):
        send(r, write([entry(seq)], seq=seq, low=max(1, seq - 2)))
    # Let go of 1-16 at the write that said 17, of 17-32 at the one that said 33: kept are
    # the writer's range and 33-50 (the three unanswered, and fifteen answered).
    assert r.hlen(KEYS.writes) == 1 + 18
    meta = r.hget(KEYS.writes, "w1")
    assert meta is not None and meta.startswith(b"33 50 ")  # and when it was renewed
    # A number below the range kept is none this writer can still send: another process
    # uses its id.  Refused, counted, not stored (and not answered as a repeat: that other
    # process's events would be lost).
    with pytest.raises(redis.ResponseError, match=r"WRITECONFLICT.*below the range 33-50"):
        send(r, write([entry(10)], seq=10, low=10))
    assert len(queue(r)) == 50
    assert stats_of(r, SCHEMA, GAME)["refused_repeats"] == 1
    horizon = Collect.args(write([]))[HORIZON]
    assert 0 < r.pttl(KEYS.writes) <= horizon and 0 < r.pttl(KEYS.writers) <= horizon


@pytest.mark.parametrize(
    ("writer", "seq", "low", "problem"),
    [
        ("w1", 3, 4, "sequence number 3 with lowest unanswered 4"),
        ("w1", 0, 0, "sequence number 0"),
        ("w1", WRITES_PER_WRITER + 1, 1, f"sequence < lowest \\+ {WRITES_PER_WRITER}"),
        ("w1", 2**40, 2**40 - 5000, "at most 4096"),
        ("w 1", 1, 1, "writer id"),
        ("w" * 65, 1, 1, "writer id"),
    ],
)
def test_bad_write_numbers_are_refused_naming_the_problem(
    r: redis.Redis, writer: str, seq: int, low: int, problem: str
) -> None:
    with pytest.raises(redis.ResponseError, match=problem):
        send(r, write([entry(1)], writer, seq=seq, low=low))
    assert queue(r) == [] and not r.exists(KEYS.stats)


def test_idle_writers_and_the_least_recent_beyond_the_most_are_forgotten(r: redis.Redis) -> None:
    for writer in ("a", "b", "c"):
        send(r, write([entry(1)], writer), most_writers=2)
    assert sorted(r.zrange(KEYS.writers, 0, -1)) == [b"b", b"c"]
    assert not r.hexists(KEYS.writes, "a") and not r.hexists(KEYS.writes, "a:1")
    r.zadd(KEYS.writers, {"b": 0})  # as if b had not written for a long time
    send(r, write([entry(2)], "d"), most_writers=10)
    assert sorted(r.zrange(KEYS.writers, 0, -1)) == [b"c", b"d"]
    assert sorted(r.hkeys(KEYS.writes)) == [b"c", b"c:1", b"d", b"d:1"]
    # A forgotten writer's repeat is applied again: a duplicate, never a loss.
    assert not send(r, write([entry(1)], "a")).repeat


def test_a_second_event_with_the_same_key_is_merged_and_the_first_wins(r: redis.Redis) -> None:
    first = send(r, write([keyed("s1", 1), keyed("s2", 2), keyed("s1", 3), entry(4)]))
    assert (first.merged, first.repeat) == (1, False)
    second = send(r, write([keyed("s2", 5), keyed("s3", 6)], "w2"))  # another process
    assert second.merged == 1
    assert queue(r) == [entry(1), entry(2), entry(4), entry(6)]
    assert stats_of(r, SCHEMA, GAME) == {"stored": 6, "merged": 2}
    # Keys are per game.
    other = "game-2"
    send(r, write([keyed("s1", 7)], "w3", game=other))
    assert queue(r, other) == [entry(7)]


def test_a_repeat_of_a_write_with_keys_answers_its_merged_count_again(r: redis.Redis) -> None:
    call = write([keyed("s1", 1), keyed("s1", 2)])
    assert send(r, call).merged == 1
    again = send(r, call)
    assert (again.merged, again.repeat) == (1, True)
    assert stats_of(r, SCHEMA, GAME) == {"stored": 2, "merged": 1}


def test_after_the_window_a_key_is_stored_again(r: redis.Redis) -> None:
    send(r, write([keyed("s1", 1)], window_ms=60_000))
    seen = KEYS.seen(GAME)
    assert 0 < r.pttl(seen) <= 60_000
    score = r.zscore(seen, orjson.dumps("s1"))
    assert score is not None
    r.zadd(seen, {orjson.dumps("s1"): score - 60_000})  # as if a minute had passed
    assert send(r, write([keyed("s1", 2)], seq=2, window_ms=60_000)).merged == 0
    assert queue(r) == [entry(1), entry(2)]


def test_the_keys_of_a_game_are_bounded_the_oldest_forgotten_first(r: redis.Redis) -> None:
    send(r, write([keyed(f"s{i}", i) for i in range(10)]), dedup_most=4)
    seen = KEYS.seen(GAME)
    assert r.zcard(seen) == 4
    assert send(r, write([keyed("s9", 20), keyed("s0", 21)], seq=2), dedup_most=4).merged == 1
    assert queue(r)[-1] == entry(21)  # s0 was forgotten: stored again


def test_keys_are_ignored_without_a_window_and_long_keys_travel_as_digests(r: redis.Redis) -> None:
    send(r, write([keyed("s1", 1), keyed("s1", 2)], window_ms=0))
    assert queue(r) == [entry(1), entry(2)]
    long_key = "k" * 500
    wire = keyed(long_key, 3)
    assert len(wire) < len(entry(3)) + 40 and long_key.encode() not in wire
    send(r, write([wire, keyed(long_key, 4)], seq=2))
    assert queue(r)[2:] == [entry(3)]
    assert all(len(key) == 32 for key in r.zrange(KEYS.seen(GAME), 0, -1))
