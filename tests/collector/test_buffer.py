"""The in-process buffer: per-game queues, a global bound that drops the oldest, put-back."""

from __future__ import annotations

from collector._buffer import EventBuffer
from collector.counters import Counter


def taken(buffer: EventBuffer) -> dict[str, list[bytes]]:
    queues, _ = buffer.take()
    return {game: list(queue) for game, queue in queues.items()}


def test_take_groups_by_game_in_order_and_empties_the_buffer() -> None:
    b = EventBuffer(10)
    for game, entry in [("a", b"1"), ("b", b"2"), ("a", b"3")]:
        b.append(game, entry)
    assert len(b) == 3
    assert taken(b) == {"a": [b"1", b"3"], "b": [b"2"]}
    assert len(b) == 0
    assert taken(b) == {}
    assert b.accepted_total == 3


def test_full_buffer_drops_the_oldest_of_all_games_and_counts_it_per_game() -> None:
    b = EventBuffer(3)
    for game, entry in [("a", b"1"), ("b", b"2"), ("a", b"3"), ("b", b"4"), ("c", b"5")]:
        assert b.append(game, entry) == min(3, int(entry))
    assert b.dropped_total == 2
    queues, pending = b.take()
    assert {g: list(q) for g, q in queues.items()} == {"a": [b"3"], "b": [b"4"], "c": [b"5"]}
    assert pending[Counter.DROPPED_BUFFER_FULL] == {"a": 1, "b": 1}
    assert b.accepted_total == 5


def test_put_back_goes_ahead_of_newer_events_and_respects_the_bound() -> None:
    b = EventBuffer(4)
    b.append("a", b"1")
    b.append("b", b"2")
    failed, pending = b.take()
    b.append("a", b"3")
    b.append("c", b"4")
    b.append("c", b"5")
    b.put_back(failed, pending)  # five waiting: the oldest put-back event goes
    assert b.dropped_total == 1
    queues, pending = b.take()
    assert sum(map(len, queues.values())) == 4
    assert list(queues["c"]) == [b"4", b"5"]
    assert sum(pending[Counter.DROPPED_BUFFER_FULL].values()) == 1
    # Whichever put-back event was dropped, the newer ones all survived.
    assert b"3" in queues["a"]


def test_notes_ride_along_and_are_not_accepted_events() -> None:
    b = EventBuffer(10)
    b.note(Counter.DROPPED_TOO_LARGE, "a", 2)
    b.append("a", b"1")
    assert b.seq == 2
    assert b.accepted_total == 1
    assert b.take_pending()[Counter.DROPPED_TOO_LARGE] == {"a": 2}
    queues, pending = b.take()
    assert list(queues["a"]) == [b"1"]
    assert not pending[Counter.DROPPED_TOO_LARGE]


def test_closed_buffer_refuses_and_reports_what_it_dropped() -> None:
    b = EventBuffer(10)
    b.append("a", b"1")
    assert b.close() == 1
    assert b.append("a", b"2") == -1
    assert len(b) == 0


def test_the_byte_bound_drops_the_oldest_and_counts_them_like_the_event_bound() -> None:
    b = EventBuffer(100, max_bytes=10)
    for game, entry in [("a", b"1111"), ("b", b"2222"), ("a", b"33")]:
        b.append(game, entry)
    assert (len(b), b.bytes, b.dropped_total) == (3, 10, 0)
    b.append("c", b"444")  # 13 bytes: the oldest goes
    assert (len(b), b.bytes, b.dropped_total) == (3, 9, 1)
    b.append("c", b"555555")  # 15 bytes: the two oldest go
    queues, pending = b.take()
    assert {g: list(q) for g, q in queues.items()} == {"c": [b"444", b"555555"]}
    assert pending[Counter.DROPPED_BUFFER_FULL] == {"a": 2, "b": 1}
    assert b.take_drops()[Counter.DROPPED_BUFFER_FULL] == {"a": 2, "b": 1}
    assert (b.bytes, b.dropped_total) == (0, 3)


def test_put_back_respects_the_byte_bound() -> None:
    b = EventBuffer(100, max_bytes=10)
    b.append("a", b"1111")
    b.append("a", b"2222")
    failed, pending = b.take()
    b.append("b", b"333333")  # collected while the write of a's events failed
    b.put_back({g: list(q) for g, q in failed.items()}, pending)
    assert b.bytes == 10 and b.dropped_total == 1
    assert taken(b) == {"a": [b"2222"], "b": [b"333333"]}
