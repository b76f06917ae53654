"""``Collector.collect_json()``: events given as JSON text, taken all or none.

Every event must meet the rules ``collect()`` guarantees for the JSON it makes; the first one
that does not is named by its index and nothing is taken.  In background mode the events go
into the buffer only if they all fit beside what waits and what is being written, so a batch
that was taken is never pushed out by events coming back from a failed write.
"""

from __future__ import annotations

import time

import orjson
import pytest
import redis

from collector import BufferFull, Collector, InvalidEvent
from collector._buffer import EventBuffer
from collector.store import KeySchema
from tests.support.fixtures import FAST_FAILURE, MakeCollector
from tests.support.polling import wait_until
from tests.support.servers import free_port
from tests.support.stored import balanced, queue_events

PREFIX = "cj"
SCHEMA = KeySchema(PREFIX, 16)


def events(n: int, start: int = 0) -> list[bytes]:
    return [orjson.dumps({"seq": i, "type": "login"}) for i in range(start, start + n)]


def test_every_event_is_stored_once_in_order(
    redis_url: str, r: redis.Redis, make_collector: MakeCollector
) -> None:
    c = make_collector(url=redis_url, key_prefix=PREFIX)
    assert c.collect_json("g", events(300)) == 300
    assert c.collect_json("g", events(200, 300)) == 200
    assert c.flush(10)
    assert [e["seq"] for e in queue_events(r, SCHEMA, "g")] == list(range(500))
    stats = c.stats()
    assert stats["accepted"] == stats["stored"] == 500


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (b"[1, 2]", "expected a JSON object, found an array"),
        (b"42", "expected a JSON object, found a number"),
        (b'"text"', "expected a JSON object, found a string"),
        (b'{"a": 1}\n', "holds a line break"),
        (b'{"a":\n1}', "holds a line break"),
        (b'{"a": 1} {"b": 2}', "not one JSON value"),
        (b'{"a": 1}, {"b": 2', "not one JSON value"),
        (b'{"a": ', "not one JSON value"),
        (b'{"a": "\xff"}', "not UTF-8"),
        (b" {}", "starts with whitespace"),
        (b"", "empty"),
        (b'{"a": "' + b"x" * 200 + b'"}', "over [buffer] max_event_bytes = 128"),
    ],
)
def test_the_first_bad_event_is_named_and_nothing_is_taken(
    make_collector: MakeCollector, bad: bytes, reason: str
) -> None:
    c = make_collector(url=f"redis://127.0.0.1:{free_port()}/0", max_event_bytes=128)
    batch = [*events(3), bad, *events(2, 3), b"[]"]
    with pytest.raises(InvalidEvent) as caught:
        c.collect_json("g", batch)
    assert caught.value.index == 3
    assert reason in caught.value.reason
    assert isinstance(caught.value, ValueError)
    assert c.stats()["accepted"] == 0
    assert c.stats()["buffered"] == 0


def test_an_item_that_is_not_bytes_and_a_bad_game_are_caller_errors(
    make_collector: MakeCollector,
) -> None:
    c = make_collector(url=f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(TypeError, match="must be bytes"):
        c.collect_json("g", [*events(1), '{"a": 1}'])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="game"):
        c.collect_json("no spaces", events(1))
    assert c.stats()["accepted"] == 0


def test_a_batch_that_does_not_fit_is_refused_whole_and_nothing_is_dropped(
    make_collector: MakeCollector,
) -> None:
    # Nothing listens on the port: the flusher's writes fail, so the buffer only fills.
    c = make_collector(
        url=f"redis://127.0.0.1:{free_port()}/0", max_buffer_events=10, flush_interval_ms=60_000
    )
    assert c.collect_json("g", events(8)) == 8
    with pytest.raises(BufferFull, match="no room in the buffer for 3 events"):
        c.collect_json("g", events(3))
    assert c.collect_json("g", events(2)) == 2
    stats = c.stats()
    assert stats["accepted"] == stats["buffered"] == 10
    assert stats["dropped_buffer_full"] == 0


def test_events_out_being_written_count_against_the_room(make_collector: MakeCollector) -> None:
    """Redis refuses every connection: each flush round takes what waits, fails and keeps
    or puts it back.  A batch taken meanwhile must still fit when they come back, so batches
    are refused (BufferFull) rather than taken and then pushed out (dropped_buffer_full)."""
    c = make_collector(
        url=f"redis://127.0.0.1:{free_port()}/0",
        max_buffer_events=100,
        **{**FAST_FAILURE, "flush_interval_ms": 1, "retry_max_delay_ms": 10},
    )
    refused = 0
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        try:
            c.collect_json("g", events(10))
        except BufferFull:
            refused += 1
    assert refused > 0
    stats = wait_until(lambda: s if balanced(s := c.stats()) else None, what="quiet stats")
    assert stats["dropped_buffer_full"] == 0
    assert stats["accepted"] == stats["buffered"] <= 100


def test_the_buffer_reserves_room_for_what_the_flusher_holds() -> None:
    b = EventBuffer(10)
    assert b.append_all("a", [b"1"] * 6) == 6
    taken, pending = b.take()  # six out being written
    assert b.append_all("a", [b"2"] * 5) == 0
    assert b.append_all("a", [b"2"] * 4) == 4
    b.put_back({"a": list(taken["a"])[:2]}, pending)  # two came back, four still out
    assert len(b) == 6 and b.outside == 4
    b.settle(0)  # the other four were stored
    assert b.outside == 0 and b.outside_bytes == 0
    assert b.append_all("a", [b"3"] * 4) == 10
    assert b.dropped_total == 0


def test_sync_mode_stores_before_returning(
    redis_url: str, r: redis.Redis, make_collector: MakeCollector
) -> None:
    c = make_collector(url=redis_url, key_prefix=PREFIX, mode="sync")
    assert c.collect_json("g", events(5)) == 5
    assert [e["seq"] for e in queue_events(r, SCHEMA, "g")] == list(range(5))
    assert c.stats()["stored"] == 5


def test_dedup_fields_apply_as_in_collect(
    redis_url: str, r: redis.Redis, make_collector: MakeCollector
) -> None:
    c = make_collector(url=redis_url, key_prefix=PREFIX, dedup_fields=["seq"])
    c.collect_json("g", [*events(3), *events(3)])
    assert c.flush(10)
    assert [e["seq"] for e in queue_events(r, SCHEMA, "g")] == [0, 1, 2]
    assert c.stats()["merged"] == 3


def test_after_close_nothing_is_taken_and_it_is_counted() -> None:
    c = Collector(disabled=True)
    c.close()
    assert c.collect_json("g", events(4)) == 0
    assert c.stats()["dropped_closed"] == 4
