"""collect.lua, written once, across any jump and any record: a sequence number far past what
the shard remembers, a remembered record nobody could have written, a "repeat" with other
content, and arguments out of range.  Each call finishes (the script's whole change) or is
refused before anything is written; none loops over a stored range.  On real servers, the
calls sent by hand as the SDK would send them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import redis

from collector.store import Collect, lua_script
from tests.support.stored import keyspace, stats_of
from tests.support.written_once import GAME, KEYS, SCHEMA, entry, queue, send, write


@pytest.fixture
def slowlog(r: redis.Redis) -> Iterator[redis.Redis]:
    """The server logs every command that runs 10 ms or more (a loop over a stored range of
    thousands runs far longer; the calls here take well under a millisecond)."""
    before = r.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"]
    r.config_set("slowlog-log-slower-than", 10_000)
    r.slowlog_reset()
    yield r
    r.config_set("slowlog-log-slower-than", before)


def slow_calls(r: redis.Redis) -> list[Any]:
    return [e for e in r.slowlog_get(128) if e["command"].upper().startswith(b"EVALSHA")]


def quarantined(r: redis.Redis) -> list[dict[str, Any]]:
    return [orjson.loads(raw) for raw in r.lrange(KEYS.quarantine, 0, -1)]


@pytest.mark.parametrize("jump", [8_000, 100_000, 10**12])
def test_a_sequence_far_past_the_range_kept_lets_the_range_go_and_stores_once(
    slowlog: redis.Redis, jump: int
) -> None:
    """As after thousands of refused writes (sync mode under NOREPLICAS, READONLY, OOM; many
    games during a long refusal), a failover to a lagging replica, or a restart from an
    older snapshot: the writer's number is far past the shard's record of it."""
    r = slowlog
    for seq in range(1, 6):
        send(r, write([entry(seq)], seq=seq))
    far = write([entry(jump)], seq=jump + 5, low=jump)
    first = send(r, far)
    again = send(r, far)  # its reply lost: sent again as it is
    assert (first.repeat, again.repeat) == (False, True)
    assert queue(r) == [entry(seq) for seq in range(1, 6)] + [entry(jump)]
    assert stats_of(r, SCHEMA, GAME)["stored"] == 6
    # The old range is let go; the new one starts at the writer's lowest unanswered number.
    assert sorted(r.hkeys(KEYS.writes)) == [b"w1", f"w1:{jump + 5}".encode()]
    assert (r.hget(KEYS.writes, "w1") or b"").startswith(f"{jump} {jump + 5} ".encode())
    assert slow_calls(r) == []


@pytest.mark.parametrize(
    "record",
    [
        "1 2000000 0",  # two million numbers: a loop over them held the server for seconds
        "1 100000 0",  # more than unpack() takes: the call failed after storing its events
        "7 3 0",
        "0 2 0",
        "1 123456789012345678 0",
        "1 2 x",
        "garbage",
    ],
)
@pytest.mark.parametrize("whose", ["its own", "an idle writer's"])
def test_a_writer_range_nobody_could_write_is_set_aside_not_looped_over(
    slowlog: redis.Redis, record: str, whose: str
) -> None:
    r = slowlog
    name = "w1" if whose == "its own" else "old"
    r.hset(KEYS.writes, name, record)
    r.zadd(KEYS.writers, {name: 0})  # idle for ever: forgotten at the next renewal
    call = write([entry(1), entry(2)], seq=3, low=2)
    first = send(r, call)
    again = send(r, call)
    assert (first.repeat, again.repeat) == (False, True)
    assert queue(r) == [entry(1), entry(2)]
    assert stats_of(r, SCHEMA, GAME)["stored"] == 2
    [aside] = quarantined(r)
    assert (aside["f"], aside["r"], aside["s"]) == (
        name,
        "a writer's range that cannot be one",
        "collect",
    )
    assert stats_of(r, SCHEMA, GAME)["quarantined_records"] == 1
    assert r.zscore(KEYS.writers, "old") is None
    assert slow_calls(r) == []


def test_a_remembered_write_that_cannot_be_read_is_set_aside_and_the_write_applied(
    r: redis.Redis,
) -> None:
    """Applied, as if forgotten: at worst a duplicate, never a loss."""
    send(r, write([entry(1)], seq=1))
    r.hset(KEYS.writes, "w1:2", "1 2")  # no length or checksum
    assert not send(r, write([entry(2)], seq=2)).repeat
    assert queue(r) == [entry(1), entry(2)]
    [aside] = quarantined(r)
    assert (aside["f"], aside["r"], aside["v"]) == (
        "w1:2",
        "a remembered write that cannot be read",
        "1 2",
    )


@pytest.mark.parametrize(
    "other",
    [
        write([entry(1), entry(3)]),  # other events
        write([entry(1), entry(2)], game="game-3"),  # another game of the same shard
        Collect(KEYS, GAME, [entry(1), entry(2)], 100, 3600, 1, writer="w1", seq=1, low=1),
    ],
    ids=["other events", "another game", "other counts"],
)
def test_a_repeat_with_other_content_is_refused_counted_and_stores_nothing(
    r: redis.Redis, other: Collect
) -> None:
    """Two processes with one writer id (a cloned machine): the second one's write with the
    same number is no repeat.  Answered as one, its events would be lost."""
    assert SCHEMA.for_game(other.game) == KEYS
    first = write([entry(1), entry(2)], window_ms=0)
    send(r, first)
    with pytest.raises(redis.ResponseError, match=r"^WRITECONFLICT collect: write 1 of writer w1"):
        send(r, other)
    assert send(r, first).repeat  # the real repeat still is one
    assert queue(r) == [entry(1), entry(2)]
    if other.game != GAME:
        assert queue(r, other.game) == []
    stats = stats_of(r, SCHEMA, GAME)
    assert (stats["stored"], stats["refused_repeats"]) == (2, 1)


def test_the_checksum_alone_tells_two_writes_apart(r: redis.Redis) -> None:
    send(r, write([entry(1)]))
    with pytest.raises(redis.ResponseError, match=r"WRITECONFLICT.*checksum"):
        send(r, write([entry(1)]), checksum="0badc0de")
    assert queue(r) == [entry(1)]


@pytest.mark.parametrize(
    ("position", "value", "problem"),
    [
        (1, 0, "cap"),
        (2, 0, "TTL"),
        (2, "1.5", "TTL"),
        (3, -1, "counts"),
        (4, "nan", "counts"),
        (11, 0, "horizon"),
        (13, 5000, "at most 4096"),
        (16, "", "checksum"),
        (16, "a b", "checksum"),
        (16, "x" * 17, "checksum"),
    ],
)
def test_arguments_out_of_range_are_refused_before_anything_is_written(
    r: redis.Redis, position: int, value: object, problem: str
) -> None:
    """Even the poison guard waits: a key of the wrong type stays where it is."""
    send(r, write([entry(1)]))
    r.set(KEYS.writers, "not a zset")
    before = keyspace(r)
    call = write([entry(2)], seq=2)
    args, keys = list(call.args()), call.keys()
    args[position] = value
    script = lua_script("collect")
    with pytest.raises(redis.ResponseError, match=f"^collect: .*{problem}"):
        r.evalsha(script.sha, len(keys), *keys, *args)
    assert keyspace(r) == before
