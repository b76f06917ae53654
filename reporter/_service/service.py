"""The reporter service: its workers, run on APScheduler thread pools until told to stop.

Pools: ``default`` (``[reporter] workers`` threads) sweeps the shards, one ``hot:<game>`` pool
per hot game, ``control`` (2 threads) keeps the shard leases, reaps expired batch leases,
extends the leases of slow POSTs and watches the secret files, and, for the anti-addiction
sink, ``hold`` (1 thread) follows a held sender and sends its probes
(``reporter._service.probing``).  ``reload`` (SIGHUP) reads the secret files again, and the
config file for what the sink takes at run time (``reporter._service.reloading``).
How jobs are run is in ``reporter._service.scheduling``.
With ``[metrics] listen`` set, ``start`` also serves ``/metrics``, ``/healthz`` and
``/readyz`` there (``reporter._monitoring.prometheus``), and ``stop`` ends that last.
"""

from __future__ import annotations

import logging
import threading
import time

import httpx

from collector.counters import Counter
from collector.logs import counted
from collector.metrics import NO_METRICS, Metrics, Tally
from collector.store import KeySchema, Store
from reporter._config import ReporterConfig
from reporter._constants import (
    HOLD_POLL_SECONDS,
    RATE_WATCH_SECONDS,
    REAP_INTERVAL_SECONDS,
    SECRET_FILE_POLL_SECONDS,
    STOP_MARGIN_SECONDS,
)
from reporter._delivery.batches import Batches
from reporter._delivery.deliverer import Clock
from reporter._delivery.in_flight import InFlight
from reporter._monitoring.levels import WatchedLimiter
from reporter._monitoring.prometheus import MetricsEndpoint
from reporter._pacing.body_limit import BodyLimit
from reporter._pacing.gate import SinkGate
from reporter._pacing.permits import Permits
from reporter._pacing.send_hold import Holds
from reporter._service.graph import Given, build_graph
from reporter._service.ownership import ShardOwnership
from reporter._service.reloading import reload_config
from reporter._service.scheduling import Runner
from reporter._service.stopping import StopCalls, Stopped
from reporter._service.store_watch import RESET_GATHER_SECONDS, StoreWatch
from reporter._service.workers import HotGameWorker, ShardSweeper, guarded
from reporter._sinks.base import Sender

logger = logging.getLogger("reporter")


class ReporterService:
    """Runs a ``Graph`` (``reporter._service.graph``): starts its jobs on their pools, re-reads
    the secrets on request, and stops it all within a bound.  The keywords are what a caller
    brings instead of what the config would make (``Given``)."""

    def __init__(
        self,
        config: ReporterConfig,
        *,
        store: Store | None = None,
        sender: Sender | None = None,
        transport: httpx.BaseTransport | None = None,
        clock: Clock = time.time,
        metrics: Metrics = NO_METRICS,
    ) -> None:
        self.graph = build_graph(config, Given(store, sender, transport, clock, metrics))
        self.abort_event = threading.Event()  # a second signal: stop waiting for POSTs

    # What tests, the demo and the commands look at, by the names they always had.
    @property
    def config(self) -> ReporterConfig:
        return self.graph.core.config

    @property
    def store(self) -> Store:
        return self.graph.core.store

    @property
    def schema(self) -> KeySchema:
        return self.graph.core.store.schema

    @property
    def batches(self) -> Batches:
        return self.graph.core.batches

    @property
    def sender(self) -> Sender:
        return self.graph.core.sender

    @property
    def limiter(self) -> WatchedLimiter:
        return self.graph.core.limiter

    @property
    def permits(self) -> Permits:
        return self.graph.core.permits

    @property
    def gate(self) -> SinkGate:
        return self.graph.core.gate

    @property
    def hold(self) -> Holds | None:
        return self.graph.core.hold

    @property
    def body_limit(self) -> BodyLimit:
        return self.graph.core.body_limit

    @property
    def in_flight(self) -> InFlight:
        return self.graph.core.in_flight

    @property
    def ownership(self) -> ShardOwnership:
        return self.graph.core.ownership

    @property
    def tally(self) -> Tally:
        return self.graph.core.tally

    @property
    def metrics(self) -> Metrics:
        return self.graph.core.metrics

    @property
    def endpoint(self) -> MetricsEndpoint | None:
        return self.graph.core.endpoint

    @property
    def stop_event(self) -> threading.Event:
        return self.graph.core.stop

    @property
    def sweepers(self) -> list[ShardSweeper]:
        return self.graph.jobs.sweepers

    @property
    def hot_workers(self) -> list[HotGameWorker]:
        return self.graph.jobs.hot_workers

    @property
    def store_watch(self) -> StoreWatch:
        return self.graph.jobs.store_watch

    @property
    def runner(self) -> Runner:
        return self.graph.jobs.runner

    def describe(self) -> str:
        r = self.config.reporter
        hot = ", ".join(f"{g}={n}" for g, n in r.hot_games.items()) or "none"
        return (
            f"telemetry-reporter: config {self.config.source}; {self.store.describe()}; "
            f"{counted(self.schema.shards, 'shard')}; {counted(r.workers, 'sweep thread')}; "
            f"hot games: {hot}; "
            f"sink {self.sender.describe()} ({self.limiter.describe()}); "
            f"metrics: {self.config.metrics.listen or 'off'}"
        )

    def start(self) -> None:
        """Serve the metrics (if configured: a ``ReporterError`` if the address cannot be
        bound, before anything else starts), take shards, start the workers."""
        core, jobs = self.graph.core, self.graph.jobs
        r = core.config.reporter
        poll = r.poll_interval_ms / 1000
        if core.endpoint is not None:
            core.endpoint.start()
        guarded("shard leases", self._shard_leases)()  # sweep at once, not a lease later
        every = jobs.runner.every
        if jobs.prober is not None:
            guarded("hold", self._read_hold)()  # held from before: sweep nothing
            jobs.prober.probe_soon()  # held from before (a restart after a fix): probe now
            every("hold-probe", jobs.prober.loop, HOLD_POLL_SECONDS, "hold")
        if core.secrets:
            every("secret-files", jobs.secret_watch.loop, SECRET_FILE_POLL_SECONDS, "control")
        every("shard-leases", self._shard_leases, r.shard_lease_seconds / 3, "control")
        every("reaper", jobs.reaper.loop, REAP_INTERVAL_SECONDS, "control")
        every("lease-keeper", jobs.lease_keeper.loop, r.lease_seconds / 3, "control")
        every("store-watch", jobs.store_watch.loop, RESET_GATHER_SECONDS, "control")
        if core.permits.watched:  # know the shared rate's state, to find it lost
            guarded("rate-watch", core.permits.watch)()
            every("rate-watch", core.permits.watch, RATE_WATCH_SECONDS, "rate")
        for sweeper in jobs.sweepers:
            every(f"sweep:{sweeper.keys.shard}", sweeper.loop, poll, "default")
        for i, worker in enumerate(jobs.hot_workers):
            every(f"hot:{worker.game}:{i}", worker.loop, poll, f"hot:{worker.game}")
        jobs.runner.start()

    def reload(self, why: str = "SIGHUP") -> str:
        """Read the secret files again (``[nppa] secret_key_file``, ``[sink] header_files``),
        and the config file for what the sink takes at run time (the anti-addiction games
        and apps: ``reporter._service.reloading``); if sending is held, probe at once (the operator
        has just fixed something).  Logs and returns the one line that says what was
        re-read.  Never raises for a bad file: what is in use is kept (with an ERROR)."""
        jobs = self.graph.jobs
        files = jobs.secret_watch.reread_all()
        found = reload_config(self.config, self.graph.core.sink)
        if found.taken is not None and found.taken.files:
            jobs.secret_watch.watch(found.taken.files)
        line = f"{why}: {files}; {found.line}"
        if jobs.secret_watch.held:
            line += "; sending is held: probing now"
        logger.info("%s", line)
        jobs.key_changed()
        return line

    def _read_hold(self) -> bool:
        return self.hold is not None and bool(self.hold.refresh())

    def _shard_leases(self) -> bool:
        """One round of shard leases; a round that succeeds keeps the process ready."""
        if self.stop_event.is_set():  # stop() gives them up
            return False
        hold = self.hold
        more = self.ownership.loop(step_back=hold is not None and hold.cannot_send())
        self.graph.core.health.leases_renewed()
        return more

    def stop(self, grace: float | None = None) -> Stopped:
        """Stop claiming; let in-flight POSTs finish within ``grace`` seconds; then, through
        a client with short timeouts, acknowledge what was delivered and release the rest (a
        POST still running is cut off: its batch is sent again after the release); wait for
        the jobs under way until grace + the Redis socket timeout + ``STOP_MARGIN_SECONDS``;
        give the shards back.  Whatever Redis and the endpoint do, it returns by then (a job
        blocked in a call of the old client is left behind and named).  Returns this
        process's counters and what was left to lease expiry."""
        grace = self.config.reporter.grace_seconds if grace is None else grace
        began = time.monotonic()
        deadline = began + grace + self.config.redis.socket_timeout_seconds + STOP_MARGIN_SECONDS
        self.stop_event.set()
        while len(self.in_flight) and time.monotonic() < began + grace:
            if self.abort_event.wait(0.02):
                break
        to_release, to_ack = self.in_flight.take_all()
        calls = StopCalls(self.store, self.config.redis)
        calls.acknowledge(self.graph.core.settler, to_ack)  # delivered while a later POST was slow
        calls.release(self.batches, to_release)  # first, so a POST cut off cannot retry it
        self.sender.close()  # cuts off POSTs still running, so their jobs return
        blocked = self.runner.shutdown(deadline)
        if not blocked:
            calls.close_replaced()
        calls.give_up(self.ownership)
        self.metrics.count(Counter.BATCHES_RELEASED, calls.released)
        if self.endpoint is not None:
            self.endpoint.stop()
        left = [*calls.left, *self.in_flight.being_acked()]  # the last: their jobs are blocked
        return Stopped(self.tally.counted(), tuple(left), tuple(blocked))
