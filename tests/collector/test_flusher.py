"""The flusher on its own, with an injected clock: retries with backoff while Redis fails,
and keeps trying at close until the close deadline on its clock, not the wall's."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

from collector._buffer import EventBuffer, Pending
from collector._exceptions import BackendUnavailable
from collector._flusher import Flusher
from collector._writer import WriteResult
from collector.counters import Counter
from collector.logs import RateLimitedLog
from collector.metrics import Tally
from tests.polling import wait_until


class FailingWriter:
    """Refuses every write, as an unreachable Redis would."""

    def __init__(self) -> None:
        self.attempts = 0

    def write(self, queues: Mapping[str, Sequence[bytes]], pending: Pending) -> WriteResult:
        self.attempts += 1
        raise BackendUnavailable("redis 127.0.0.1:1: refused (test)")


class FakeClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_at_close_the_flusher_retries_until_the_deadline_of_its_clock() -> None:
    buffer = EventBuffer(100)
    buffer.append("g", b"0000000000000{}")
    writer, clock, tally = FailingWriter(), FakeClock(), Tally()
    flusher = Flusher(buffer, lambda: writer, tally,  # type: ignore[arg-type,return-value]
                      RateLimitedLog(logging.getLogger("test")), 0.001, 0.002, clock)
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
