"""``on_error``: told of failed writes and lost events, off collect()'s path, never fatal."""

from __future__ import annotations

import logging
import pickle
import threading
from typing import Any

import pytest
import redis

from collector import BackendError, Collector, EventsDropped, TelemetryError
from collector.counters import Counter
from collector.store import KeySchema
from tests.support.fixtures import FAST_FAILURE, MakeCollector
from tests.support.polling import wait_until
from tests.support.servers import Server
from tests.support.stored import queue_events, stats_total

PREFIX = "oe"
SCHEMA = KeySchema(PREFIX, 16)
# The flusher only runs when woken (flush(), close()), so a test decides what a round takes.
NO_TIMER = 60_000
BIG = {"blob": "x" * 100}  # over max_event_bytes=64


class Recorder:
    """An on_error that records each call and the thread it came from."""

    def __init__(self, raises: bool = False) -> None:
        self.calls: list[tuple[TelemetryError, int, int]] = []
        self.raises = raises
        self._lock = threading.Lock()

    def __call__(self, error: TelemetryError, count: int) -> None:
        with self._lock:
            self.calls.append((error, count, threading.get_ident()))
        if self.raises:
            raise RuntimeError("the host's on_error is broken")

    def of(self, kind: type[TelemetryError]) -> list[tuple[Any, int, int]]:
        with self._lock:
            return [call for call in self.calls if isinstance(call[0], kind)]


def test_a_failed_write_is_reported_once_per_failed_round_from_the_flusher(
    own_server: Server, make_collector: MakeCollector
) -> None:
    own_server.stop()
    seen = Recorder()
    c = make_collector(
        url=own_server.url,
        key_prefix=PREFIX,
        on_error=seen,
        **{**FAST_FAILURE, "flush_interval_ms": NO_TIMER},
    )
    for i in range(7):
        c.collect("g", {"seq": i})
    assert not c.flush(timeout=0.2)  # wakes the flusher: its round takes all seven
    wait_until(lambda: len(seen.of(BackendError)) >= 3, what="three failed rounds")
    c.close(timeout=0)
    failed = seen.of(BackendError)
    assert {count for _, count, _ in failed} == {7}  # the events of the failed write
    assert len(failed) == c.stats()["backend_errors"]  # one call per failed round
    assert threading.get_ident() not in {thread for _, _, thread in failed}
    assert all(str(own_server.port) in str(error) for error, _, _ in failed)


def test_while_redis_is_down_each_drop_is_reported_once(
    own_server: Server, make_collector: MakeCollector
) -> None:
    own_server.stop()
    seen = Recorder()
    c = make_collector(
        url=own_server.url, key_prefix=PREFIX, on_error=seen, max_buffer_events=10, **FAST_FAILURE
    )
    for i in range(60):
        c.collect(f"g{i % 3}", {"seq": i})
    wait_until(lambda: len(seen.of(BackendError)) >= 3, what="three failed rounds")
    c.close(timeout=0)
    stats = c.stats()
    lost: dict[str, int] = {}
    for error, count, _ in seen.of(EventsDropped):
        lost[error.reason] = lost.get(error.reason, 0) + count
    # Failed writes put their drop counts back to be sent again; on_error hears of them once.
    assert lost == {
        "dropped_buffer_full": stats["dropped_buffer_full"],
        "dropped_at_close": stats["dropped_at_close"],
    }
    assert stats["dropped_buffer_full"] == 50 and stats["dropped_at_close"] == 10


def test_events_left_at_close_are_reported_by_close(
    own_server: Server, make_collector: MakeCollector
) -> None:
    own_server.stop()
    seen = Recorder()
    c = make_collector(url=own_server.url, key_prefix=PREFIX, on_error=seen, **FAST_FAILURE)
    for i in range(5):
        c.collect("a" if i < 3 else "b", {"seq": i})
    c.close(timeout=0.1)
    [(error, count, _)] = seen.of(EventsDropped)
    assert count == error.count == c.stats()["dropped_at_close"] == 5
    assert error.reason == Counter.DROPPED_AT_CLOSE == "dropped_at_close"
    assert dict(error.games) == {"a": 3, "b": 2}
    assert error.game is None  # more than one game lost events


def test_a_full_buffer_is_reported_by_the_flusher_before_flush_returns(
    make: MakeCollector, r: redis.Redis
) -> None:
    seen = Recorder()
    c = make(max_buffer_events=5, flush_interval_ms=NO_TIMER, on_error=seen)
    for i in range(20):
        c.collect("g", {"seq": i})
    assert seen.calls == []  # collect() itself never calls it
    assert c.flush(timeout=10)
    [(error, count, thread)] = seen.calls
    assert isinstance(error, EventsDropped)
    assert (error.reason, count, error.game, dict(error.games)) == (
        Counter.DROPPED_BUFFER_FULL,
        15,
        "g",
        {"g": 15},
    )
    assert thread != threading.get_ident()
    assert c.stats()["dropped_buffer_full"] == 15
    assert [e["seq"] for e in queue_events(r, SCHEMA, "g")] == list(range(15, 20))


def test_events_too_large_are_reported_by_the_flusher_with_their_games(
    make: MakeCollector, r: redis.Redis
) -> None:
    seen = Recorder()
    c = make(max_event_bytes=64, flush_interval_ms=NO_TIMER, on_error=seen)
    for _ in range(3):
        c.collect("big", BIG)
    c.collect("other", BIG)
    c.collect("fine", {"seq": 1})
    assert seen.calls == []  # deferred: collect() returned without calling it
    assert c.flush(timeout=10)
    [(error, count, thread)] = seen.calls
    assert isinstance(error, EventsDropped)
    assert error.reason == Counter.DROPPED_TOO_LARGE
    assert count == error.count == c.stats()["dropped_too_large"] == 4
    assert dict(error.games) == {"big": 3, "other": 1}
    assert "max_event_bytes" in str(error) and "'big': 3" in str(error)
    assert thread != threading.get_ident()
    assert stats_total(r, SCHEMA, "dropped_too_large") == 4  # the shard counts still arrive
    c.collect("big", BIG)
    assert c.flush(timeout=10)
    assert [n for _, n, _ in seen.calls] == [4, 1]  # each drop reported once


def test_a_callback_that_raises_does_not_stop_delivery(
    make: MakeCollector, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    seen = Recorder(raises=True)
    c = make(max_event_bytes=64, flush_interval_ms=NO_TIMER, on_error=seen)
    with caplog.at_level(logging.ERROR, logger="collector"):
        for i in range(3):
            c.collect("g", BIG)
            c.collect("g", {"seq": i})
            assert c.flush(timeout=10)
    assert len(seen.calls) == 3
    assert [e["seq"] for e in queue_events(r, SCHEMA, "g")] == [0, 1, 2]
    raised = [rec for rec in caplog.records if "on_error callback raised" in rec.getMessage()]
    assert len(raised) == 1  # logged once, rate-limited
    assert raised[0].exc_info is not None


def test_the_callback_can_be_set_and_removed_later(make: MakeCollector) -> None:
    seen = Recorder()
    c = make(max_event_bytes=64, flush_interval_ms=NO_TIMER)
    assert c.on_error is None
    c.on_error = seen
    c.collect("g", BIG)
    assert c.flush(timeout=10)
    c.on_error = None
    c.collect("g", BIG)
    assert c.flush(timeout=10)
    assert [n for _, n, _ in seen.calls] == [1]
    with pytest.raises(TypeError, match="on_error must be a callable"):
        c.on_error = "print"  # type: ignore[assignment]
    with pytest.raises(TypeError, match="on_error must be a callable"):
        Collector(url="redis://127.0.0.1:1/0", on_error=42)  # type: ignore[arg-type]


def test_sync_mode_reports_a_refusal_at_the_call(make: MakeCollector) -> None:
    seen = Recorder()
    c = make(mode="sync", max_event_bytes=64, on_error=seen)
    assert c.collect("g", BIG) == 0
    [(error, count, thread)] = seen.calls  # no flusher thread in sync mode
    assert isinstance(error, EventsDropped) and error.reason == Counter.DROPPED_TOO_LARGE
    assert (count, thread) == (1, threading.get_ident())


def test_events_dropped_reads_well_and_survives_pickling() -> None:
    games = {f"g{i}": i for i in range(8)}
    error = EventsDropped(Counter.DROPPED_BUFFER_FULL, 28, games)
    assert str(error).startswith("28 events dropped: the in-process buffer was full")
    assert "'g7': 7, 'g6': 6, 'g5': 5, 'g4': 4, 'g3': 3, and 2 more games" in str(error)
    assert "g0" not in error.games  # no events lost there
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.reason, copy.count, dict(copy.games)) == (error.reason, 28, dict(error.games))


def test_a_callback_may_call_flush_and_close_without_waiting_for_itself(
    make: MakeCollector,
) -> None:
    flushed: list[bool] = []
    c = make(max_event_bytes=64, flush_interval_ms=NO_TIMER)
    c.on_error = lambda e, n: flushed.append(c.flush(timeout=30))
    c.collect("g", BIG)
    assert c.flush(timeout=10)  # the callback's flush() did not hold the flusher up
    assert len(flushed) == 1

    c.on_error = lambda e, n: c.close()
    c.collect("g", BIG)
    c.flush(timeout=10)
    wait_until(lambda: not c._flusher.alive, what="the flusher to end after close()")
    c.collect("g", {"seq": 1})
    assert c.stats()["dropped_closed"] == 1  # close() from the callback took effect
