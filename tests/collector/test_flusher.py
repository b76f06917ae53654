"""The flusher on its own, with an injected clock: retries with backoff while Redis fails,
and keeps trying at close until the close deadline on its clock, not the wall's."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

from collector._buffer import EventBuffer, Pending
from collector._exceptions import BackendUnavailable, EventsDropped
from collector._flusher import Flusher, Rounds
from collector._on_error import ErrorReport
from collector._writer import WriteResult
from collector.counters import Counter
from collector.logs import RateLimitedLog
from collector.metrics import Tally
from tests.support.clock import Clock
from tests.support.polling import wait_until


class FailingWriter:
    """Refuses every write, as an unreachable Redis would."""

    def __init__(self) -> None:
        self.attempts = 0

    def write(self, queues: Mapping[str, Sequence[bytes]], pending: Pending) -> WriteResult:
        self.attempts += 1
        raise BackendUnavailable("redis 127.0.0.1:1: refused (test)")


def test_at_close_the_flusher_retries_until_the_deadline_of_its_clock() -> None:
    buffer = EventBuffer(100)
    buffer.append("g", b"0000000000000{}")
    writer, clock, tally = FailingWriter(), Clock(50.0), Tally()
    ratelog = RateLimitedLog(logging.getLogger("test"))
    flusher = Flusher(
        buffer,
        lambda: writer,
        tally,  # type: ignore[arg-type,return-value]
        ErrorReport(None, ratelog),
        Rounds(0.001, 0.002),
        clock,
    )
    flusher.start()
    stopping = threading.Thread(target=flusher.stop, args=(30.0,))
    stopping.start()
    wait_until(lambda: writer.attempts >= 5, what="retries while the clock stands still")
    assert stopping.is_alive() and flusher.alive  # the wall clock is not what it waits on
    clock.now += 31.0
    stopping.join(10)
    assert not stopping.is_alive() and not flusher.alive
    assert len(buffer) == 1  # put back after every failure, left for close() to count
    assert tally.get(Counter.BACKEND_ERRORS) == writer.attempts


class FloodedWriter:
    """Stores what it is given; meanwhile (as if from a busy game thread) three events arrive
    per write into a buffer of two, so one is dropped each time, for the first 11 writes.
    Each write takes a quarter of a second on the injected clock."""

    def __init__(self, buffer: EventBuffer, clock: Clock) -> None:
        self.buffer = buffer
        self.clock = clock
        self.writes = 0

    def write(self, queues: Mapping[str, Sequence[bytes]], pending: Pending) -> WriteResult:
        self.writes += 1
        self.clock.now += 0.25
        if self.writes <= 11:
            for _ in range(3):
                self.buffer.append("g", b"0000000000000{}")
        return WriteResult(stored=sum(map(len, queues.values())))


def test_a_long_round_reports_drops_once_a_second_and_again_at_its_end() -> None:
    buffer, clock, tally = EventBuffer(2), Clock(50.0), Tally()
    buffer.append("g", b"0000000000000{}")
    writer = FloodedWriter(buffer, clock)
    told: list[tuple[object, int]] = []
    ratelog = RateLimitedLog(logging.getLogger("test"))
    flusher = Flusher(
        buffer,
        lambda: writer,
        tally,  # type: ignore[arg-type,return-value]
        ErrorReport(lambda e, n: told.append((e, n)), ratelog),
        Rounds(60.0, 60.0),
        clock,
    )
    flusher.start()
    assert flusher.flush(timeout=10)  # one round: 12 writes, the last finds the flood over
    flusher.stop(1.0)
    # Drops after writes 1-4 told at 1.0 s, 5-8 at 2.0 s, 9-11 when the round ends.
    assert [n for _, n in told] == [4, 4, 3]
    assert all(
        isinstance(e, EventsDropped) and e.reason == Counter.DROPPED_BUFFER_FULL for e, _ in told
    )
    assert tally.get(Counter.STORED) == 1 + 11 * 2
