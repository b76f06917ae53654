"""The reporter service: APScheduler runs the workers on thread pools until told to stop.

Every worker's ``loop()`` is a one-shot job that schedules its own next run when it returns
(at once if it left work, else after its interval), so a job never overlaps itself and
APScheduler never has to skip a run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import httpx
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from collector.counters import Counter, Gauge
from collector.metrics import NO_METRICS, Metrics, Tally, fan_out
from collector.store import Store, open_store
from reporter._batches import Batches
from reporter._config import ReporterConfig
from reporter._delivery import Clock, Deliverer, Held
from reporter._limiter import make_limiter
from reporter._outcomes import SinkGate
from reporter._ownership import ShardOwnership
from reporter._sinks import Sender, make_sender
from reporter._workers import HotGameWorker, LeaseKeeper, Reaper, ShardSweeper, guarded

logger = logging.getLogger("reporter")

REAP_INTERVAL_SECONDS = 1.0
# How long a job keeps looping while its worker reports more work, before yielding its thread.
BUSY_SLICE_SECONDS = 0.05


class ReporterService:
    """Owns the scheduler, its pools, the sender and the stop Event."""

    def __init__(self, config: ReporterConfig, *, store: Store | None = None,
                 sender: Sender | None = None, transport: httpx.BaseTransport | None = None,
                 clock: Clock = time.time, metrics: Metrics = NO_METRICS) -> None:
        self.config = config
        self.store = store if store is not None else open_store(config.redis)
        self.schema = self.store.schema
        self.batches = Batches(self.store, config)
        self.sender = sender or make_sender(config.sink, transport)
        self.stop_event = threading.Event()
        self.abort_event = threading.Event()  # a second signal: stop waiting for POSTs
        self.held = Held()
        self.tally = Tally()  # this process's counts: the stopped: line
        self.metrics = fan_out(self.tally, metrics)
        self.gate = SinkGate(config.retry.initial_delay_ms / 1000,
                             config.retry.max_delay_ms / 1000)
        self.limiter = make_limiter(config, self.store)
        self.deliverer = Deliverer(self.batches, self.sender, config.reporter, clock, self.held,
                                   self.metrics, self.gate, self.limiter)
        r = config.reporter
        self.ownership = ShardOwnership(self.store, r.shard_lease_seconds)
        self.sweepers = [
            ShardSweeper(keys, self.batches, self.deliverer, config, self.ownership,
                         self.stop_event, clock)
            for keys in self.schema.all_shards()
        ]
        self.hot_workers = [
            HotGameWorker(game, self.schema.for_game(game), self.batches, self.deliverer, config,
                          self.stop_event)
            for game, threads in r.hot_games.items() for _ in range(threads)
        ]
        self.metrics.watch(Gauge.HELD_BATCHES, lambda: len(self.held))
        self.metrics.watch(Gauge.OWNED_SHARDS, lambda: len(self.ownership.owned()))
        self.metrics.watch(Gauge.SINK_GATE_OPEN, lambda: int(self.gate.is_open()))
        self.reaper = Reaper(self.schema, self.batches, self.ownership, self.stop_event)
        self.lease_keeper = LeaseKeeper(self.deliverer, self.batches)
        executors = {"default": ThreadPoolExecutor(r.workers),
                     "control": ThreadPoolExecutor(2)}
        for game, threads in r.hot_games.items():
            executors[f"hot:{game}"] = ThreadPoolExecutor(threads)
        self.scheduler = BackgroundScheduler(
            executors=executors,
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        )
        self._started = False

    def describe(self) -> str:
        r = self.config.reporter
        hot = ", ".join(f"{g}={n}" for g, n in r.hot_games.items()) or "none"
        return (f"telemetry-reporter: config {self.config.source}; {self.store.describe()}; "
                f"{self.schema.shards} shards; {r.workers} sweep threads; hot games: {hot}; "
                f"sink {self.sender.describe()} ({self.limiter.describe()})")

    def start(self) -> None:
        r = self.config.reporter
        poll = r.poll_interval_ms / 1000
        guarded("shard leases", self.ownership.loop)()  # sweep at once, not a lease later
        self._every("shard-leases", self.ownership.loop, r.shard_lease_seconds / 3, "control")
        self._every("reaper", self.reaper.loop, REAP_INTERVAL_SECONDS, "control")
        self._every("lease-keeper", self.lease_keeper.loop, r.lease_seconds / 3, "control")
        for sweeper in self.sweepers:
            self._every(f"sweep:{sweeper.keys.shard}", sweeper.loop, poll, "default")
        for i, worker in enumerate(self.hot_workers):
            self._every(f"hot:{worker.game}:{i}", worker.loop, poll, f"hot:{worker.game}")
        self.scheduler.start()
        self._started = True

    def _every(self, job_id: str, work: Callable[[], bool], interval: float,
               executor: str) -> None:
        run = guarded(job_id, work)
        failures = 0

        def job() -> None:
            nonlocal failures
            more = run()
            # While there is work, keep going for a while rather than paying for a new job.
            busy_until = time.monotonic() + BUSY_SLICE_SECONDS
            while more and not self.stop_event.is_set() and time.monotonic() < busy_until:
                more = run()
            if self.stop_event.is_set():
                return
            # Back off while Redis is down: double the pause per failure, up to 5 s.
            if more is not None and failures:
                logger.info("%s: working again after %d failed runs", job_id, failures)
            failures = failures + 1 if more is None else 0
            delay = min(interval * 2 ** failures, max(interval, 5.0)) if failures else (
                0.0 if more else interval)
            # A fresh job each time: reusing the id races with the scheduler removing the
            # finished one-shot job.
            self.scheduler.add_job(job, "date", name=job_id, executor=executor,
                                   run_date=datetime.now() + timedelta(seconds=delay))

        self.scheduler.add_job(job, "date", name=job_id, executor=executor,
                               run_date=datetime.now())

    def stop(self, grace: float | None = None) -> dict[str, int]:
        """Stop claiming; let in-flight POSTs finish within ``grace`` seconds; release the
        rest; give the shards back.  Returns this process's counters."""
        grace = self.config.reporter.grace_seconds if grace is None else grace
        self.stop_event.set()
        deadline = time.monotonic() + grace
        while len(self.held) and time.monotonic() < deadline:
            if self.abort_event.wait(0.02):
                break
        to_release, to_ack = self.held.take_all()
        try:
            self.deliverer.acknowledge(to_ack)  # delivered while a later POST was slow
        except Exception as exc:  # their leases will bring them back: sent again
            logger.warning("could not acknowledge %d delivered batches (%s); their leases will "
                           "expire", len(to_ack), exc)
        released = 0
        for batch_id, keys, token in to_release:
            try:
                released += self.batches.release(keys, batch_id, token)
            except Exception as exc:  # the lease will bring it back
                logger.warning("could not release batch %s (%s); its lease will expire",
                               batch_id, exc)
        if self._started:
            self.scheduler.shutdown(wait=False)
        try:
            self.ownership.give_up()
        except Exception as exc:
            logger.warning("could not give up shard leases (%s); they will expire", exc)
        self.sender.close()
        self.metrics.count(Counter.BATCHES_RELEASED, released)
        return self.tally.counted()
