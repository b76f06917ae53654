"""The flusher: one thread that writes the SDK's buffer to Redis.

A round takes everything waiting (already grouped by game) and writes it through the
``Writer`` in as few socket writes as the backend allows.  Rounds run every
``flush_interval_ms``, sooner when woken (a full-ish buffer, ``flush()``, ``close()``).
While Redis fails (down, or at maxmemory: ``BackendFull``, counted in ``refused_oom``), the
events go back to the buffer and the pause between rounds doubles up to
``retry_max_delay_ms``; at close the flusher keeps trying until the close deadline.  A write
whose outcome is unknown (its reply was lost, or too few replicas confirmed it) stays with
the writer as it is and is sent again in the next rounds, with the same backoff, until the
shard answers it (a repeat stores nothing) or its script refuses it for good (counted in
``refused_writes``, logged: its events go back to the buffer as new writes); its events
count as buffered meanwhile.

The flusher also calls the host's ``on_error``: once per failed round (with the events of the
failed write), and for the events lost since it last looked (buffer full, too large), at the
end of every round and at least once a second during a long one.  A round that finds the
buffer empty reports before ``flush()`` can return, so a flush that succeeded has reported
every drop noted before it was called.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from collector._buffer import EventBuffer
from collector._constants import DROPS_REPORT_SECONDS
from collector._exceptions import BackendError, BackendFull
from collector._on_error import ErrorReport
from collector._writer import Writer, WriteResult
from collector.counters import Counter
from collector.logs import counted
from collector.metrics import Metrics

Clock = Callable[[], float]  # monotonic seconds


class Rounds(NamedTuple):
    """Seconds between flush rounds, and the longest pause after failed ones (doubling)."""

    interval: float
    longest: float


class Flusher:
    """Flushes ``buffer`` through ``writer()`` in rounds (``rounds``), counting into
    ``counts`` and telling the host (and the log) through ``report``."""

    def __init__(
        self,
        buffer: EventBuffer,
        writer: Callable[[], Writer],
        counts: Metrics,
        report: ErrorReport,
        rounds: Rounds,
        clock: Clock = time.monotonic,
    ) -> None:
        self._buffer = buffer
        self._writer = writer
        self._counts = counts
        self._ratelog = report.ratelog
        self._report = report
        self._interval = rounds.interval
        self._longest = rounds.longest
        self._clock = clock
        self.wake = threading.Event()  # set to start a round now
        self._idle = threading.Event()  # set by a round that found the buffer empty
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._deadline = 0.0
        # The writer's calls whose outcome is unknown (a lost reply, or too few replicas
        # confirmed them), kept to be sent again as they are, and their events.
        self.unconfirmed_writes = 0
        self.unconfirmed_events = 0
        self._flushed_seq = 0  # the buffer's seq at the latest take that found nothing
        self._drops_reported = clock()  # when on_error was last told of drops

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def caught_up(self) -> bool:
        """Whether a round has found the buffer empty after everything collected so far."""
        return self._flushed_seq >= self._buffer.seq

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="telemetry-collector-flusher", daemon=True
                )
                self._thread.start()

    def flush(self, timeout: float) -> bool:
        """Wait until everything collected so far is stored; False if ``timeout`` ran out.
        The thread must have been started."""
        if self._on_own_thread():  # from on_error: it cannot wait for itself
            return self.caught_up()
        deadline = self._clock() + timeout
        # Done once a round has found the buffer empty after everything collected (and every
        # drop count noted) so far; an empty buffer alone may mean "taken, not stored".
        target = self._buffer.seq
        while self._flushed_seq < target:
            self._idle.clear()
            self.wake.set()
            remaining = deadline - self._clock()
            if remaining <= 0 or not self._idle.wait(remaining):
                return False
        return True

    def stop(self, timeout: float) -> None:
        """Keep writing what is buffered for up to ``timeout`` seconds, then end the thread."""
        self._deadline = self._clock() + timeout
        self._stop.set()
        self.wake.set()
        thread = self._thread
        if thread is not None and not self._on_own_thread():
            thread.join(timeout + 0.5)

    def _on_own_thread(self) -> bool:
        """Whether the caller is the flusher thread itself (``on_error`` runs there)."""
        return self._thread is threading.current_thread()

    def _run(self) -> None:
        delay = self._interval
        while True:
            self.wake.wait(delay)
            self.wake.clear()
            ok = self._round()
            if self._stop.is_set() and (
                (not len(self._buffer) and not self.unconfirmed_writes)
                or self._clock() >= self._deadline
            ):
                return
            if ok:
                delay = self._interval
            else:
                delay = min(max(delay * 2, self._interval), self._longest)
                if self._stop.is_set():
                    delay = min(delay, max(0.0, self._deadline - self._clock()))

    def _round(self) -> bool:
        """Write what is buffered; False if Redis failed (the events are put back)."""
        while True:
            self._idle.clear()
            queues, pending = self._buffer.take()
            if not queues and not any(pending.values()) and not self.unconfirmed_writes:
                self._report_drops()  # before flush() may return
                self._flushed_seq = self._buffer.taken_seq
                self._idle.set()
                return True
            taken = sum(map(len, queues.values()))
            try:
                result = self._writer().write(queues, pending)
            except Exception as exc:  # never let the flusher die; Redis may come back
                self._buffer.put_back(queues, pending)
                self._buffer.settle(self.unconfirmed_events)
                self._failed(exc, taken + self.unconfirmed_events)
                return False
            self.unconfirmed_writes = result.unconfirmed_writes
            self.unconfirmed_events = result.unconfirmed_events
            if result.failed or any(result.failed_pending.values()):
                self._buffer.put_back(result.failed, result.failed_pending)
            self._buffer.settle(result.unconfirmed_events)
            self._count(result)
            if result.error is not None:
                self._failed(
                    result.error, sum(map(len, result.failed.values())) + result.unconfirmed_events
                )
                return False
            if result.unconfirmed_writes:  # answered, yet still unconfirmed: never spin
                return False
            self._ratelog.reset("backend")
            if (
                self._buffer.unreported
                and self._clock() - self._drops_reported >= DROPS_REPORT_SECONDS
            ):
                self._report_drops()  # a long round (a steady flood) still reports

    def _count(self, result: WriteResult) -> None:
        """Count what a write did; log the writes whose outcome was unknown that a shard
        then refused for good (their events were put back)."""
        self._counts.add(
            {
                Counter.STORED: result.stored,
                Counter.EVICTED: result.evicted,
                Counter.MERGED: result.merged,
                Counter.FLUSHES: 1,
            }
        )
        for counter, n in (
            (Counter.REFUSED_OOM, result.refused_oom),
            (Counter.UNREPLICATED_WRITES, result.unreplicated),
            (Counter.REFUSED_WRITES, result.refused_writes),
            (Counter.REFUSED_REPEATS, result.refused_repeats),
        ):
            if n:
                self._counts.count(counter, n)
        if result.refused_unconfirmed:
            self._ratelog.log(
                logging.WARNING,
                "refused-unconfirmed",
                "%s whose outcome was unknown refused for good (not stored): no longer sent "
                "again; the events go back to the buffer as new writes (%s)",
                counted(result.refused_unconfirmed, "write"),
                reason(result.error) if result.error else "?",
            )

    def _failed(self, exc: Exception, count: int) -> None:
        self._counts.count(Counter.BACKEND_ERRORS)
        if isinstance(exc, BackendFull):
            self._ratelog.log(
                logging.WARNING,
                "backend",
                "Redis is full (maxmemory): %d events not stored, kept here; %d buffered, "
                "retrying with backoff (one call per full shard) until the reporters drain "
                "it (%s)",
                count,
                len(self._buffer),
                reason(exc),
            )
        else:
            self._ratelog.log(
                logging.WARNING,
                "backend",
                "cannot store %d events (%s); %d buffered, retrying with backoff",
                count,
                reason(exc),
                len(self._buffer),
            )
        self._report.failed_write(exc, count, reason(exc))
        self._report_drops()  # putting the events back may have overfilled the buffer

    def _report_drops(self) -> None:
        """Tell on_error of the events lost since the last report (taken even without a
        callback, so they do not pile up)."""
        if self._buffer.unreported:
            self._drops_reported = self._clock()
            self._report.drops(self._buffer.take_drops())


def reason(exc: Exception) -> str:
    """A store error names the server already; anything else is named by its type."""
    return str(exc) if isinstance(exc, BackendError) else f"{type(exc).__name__}: {exc}"
