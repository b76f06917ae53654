"""Run workers on APScheduler thread pools: one job per worker, rescheduled after each run.

Each worker's ``loop()`` does one bounded unit of work and says whether it left work (True),
found none (False) or failed (None, Redis unavailable or a bug, already logged by
``guarded``).  Its job is added once, with a stable id, ``max_instances=1`` and
timezone-aware times, on the pool named for it.  After a run, a listener on
``EVENT_JOB_EXECUTED`` (called once the run no longer counts as running) moves the job's next
run: at once if work was left, after the worker's interval if not, and after a pause that
doubles per failure in a row (up to 5 s) while it fails.  Until then the job's trigger keeps
it parked, so a job is never due while it runs: no run is skipped and nothing overlaps,
however long a POST takes.  APScheduler's ``interval`` trigger would fire on its own clock
and skip (with a warning) every tick that found the previous run still going.

``shutdown(deadline)`` starts no more runs (a run that starts once the stop Event is set
returns at once) and waits for those under way until the deadline.  If they all returned it
joins every pool, so the process exits without ``os._exit``; a run still blocked on a peer
that does not answer is left behind and named, for the caller to decide.  Workers must have
been told to stop first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger

from collector.retry import backoff
from reporter._constants import BUSY_SLICE_SECONDS, FAILING_PAUSE_SECONDS
from reporter._service.workers import guarded

logger = logging.getLogger("reporter")

# Where a job waits while it runs, until the listener sets its next run.
_PARKED = timedelta(days=1)


@dataclass
class _Job:
    work: Callable[[], bool | None]
    interval: float
    failures: int = 0
    next_at: datetime | None = None  # set when a run ends


class AfterEachRun(BaseTrigger):  # type: ignore[misc]
    """Never fires on its own: the next run is the one the last run's end asked for.

    APScheduler asks for the next fire time right after it submits a run.  Usually the run
    is still going and the job is parked; a run that ended first (it can end before the
    submission returns) has already set ``next_at``, later than the time it ran for."""

    def __init__(self, job: _Job) -> None:
        self._job = job

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime:
        asked = self._job.next_at
        if asked is not None and (previous_fire_time is None or asked > previous_fire_time):
            return asked
        return now + _PARKED

    def __str__(self) -> str:
        return "after each run"


class Runner:
    """The scheduler, its pools and the jobs of one service."""

    def __init__(self, pools: dict[str, int], stop: threading.Event) -> None:
        self._stop = stop
        self._jobs: dict[str, _Job] = {}
        self.scheduler = BackgroundScheduler(
            executors={name: ThreadPoolExecutor(threads) for name, threads in pools.items()},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone=UTC,
        )
        self.scheduler.add_listener(self._after_run, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        self.started = False
        self._running: set[str] = set()
        self._idle = threading.Condition()

    def every(self, job_id: str, work: Callable[[], bool], interval: float, pool: str) -> None:
        """Run ``work`` on ``pool`` now, then again after each run as its result asks."""
        job = self._jobs[job_id] = _Job(guarded(job_id, work), interval)
        self.scheduler.add_job(
            self._run,
            AfterEachRun(job),
            args=(job_id,),
            id=job_id,
            name=job_id,
            executor=pool,
            next_run_time=_now(),
        )

    def start(self) -> None:
        self.scheduler.start()
        self.started = True

    def shutdown(self, deadline: float | None = None) -> list[str]:
        """Start no more runs; wait for those under way until ``deadline`` (a
        ``time.monotonic()`` value; None: as long as they take).  If they all returned, join
        every pool; if not, leave the pools to end without waiting.  Returns the ids of the
        runs left behind."""
        if not self.started:
            return []
        self.started = False
        self.scheduler.pause()
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        with self._idle:
            self._idle.wait_for(lambda: not self._running, timeout)
            blocked = sorted(self._running)
        self.scheduler.shutdown(wait=not blocked)
        return blocked

    def _run(self, job_id: str) -> bool | None:
        """One run: the worker's loop, again while it leaves work, for a short while."""
        if self._stop.is_set():
            return False
        with self._idle:
            self._running.add(job_id)
        try:
            job = self._jobs[job_id]
            more = job.work()
            busy_until = time.monotonic() + BUSY_SLICE_SECONDS
            while more and not self._stop.is_set() and time.monotonic() < busy_until:
                more = job.work()
            return more
        finally:
            with self._idle:
                self._running.discard(job_id)
                self._idle.notify_all()

    def _after_run(self, event: JobExecutionEvent) -> None:
        if self._stop.is_set():
            return
        job = self._jobs[event.job_id]
        more = None if event.exception is not None else event.retval
        if more is not None and job.failures:
            logger.info(
                "%s: working again after %d failed runs",
                event.job_id,
                job.failures,
                extra={"job": event.job_id, "failures": job.failures},
            )
        job.failures = job.failures + 1 if more is None else 0
        if job.failures:
            delay = backoff(
                job.failures + 1, job.interval, max(job.interval, FAILING_PAUSE_SECONDS)
            )
        else:
            delay = 0.0 if more else job.interval
        job.next_at = _now() + timedelta(seconds=delay)
        with suppress(JobLookupError, SchedulerNotRunningError):  # shutting down
            self.scheduler.modify_job(event.job_id, next_run_time=job.next_at)


def _now() -> datetime:
    return datetime.now(UTC)
