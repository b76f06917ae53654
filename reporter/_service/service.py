"""The reporter service: its workers, run on APScheduler thread pools until told to stop.

Pools: ``default`` (``[reporter] workers`` threads) sweeps the shards, one ``hot:<game>`` pool
per hot game, ``control`` (2 threads) keeps the shard leases, reaps expired batch leases,
extends the leases of slow POSTs and watches the secret files, and, for the anti-addiction
sink, ``hold`` (1 thread) follows a held sender and sends its probes
(``reporter._service.probing``).  ``reload`` (SIGHUP) reads the secret files again.
How jobs are run is in ``reporter._service.scheduling``.
With ``[metrics] listen`` set, ``start`` also serves ``/metrics``, ``/healthz`` and
``/readyz`` there (``reporter._monitoring.prometheus``), and ``stop`` ends that last.
"""

from __future__ import annotations

import logging
import threading
import time

import httpx

from collector.counters import Counter, Gauge
from collector.logs import counted
from collector.metrics import NO_METRICS, Metrics, Tally, fan_out
from collector.store import Store, open_store
from reporter._config import ReporterConfig
from reporter._constants import (
    HOLD_POLL_SECONDS,
    REAP_INTERVAL_SECONDS,
    SECRET_FILE_POLL_SECONDS,
    STOP_MARGIN_SECONDS,
)
from reporter._delivery.attempt import Attempt
from reporter._delivery.batches import Batches
from reporter._delivery.claims import Claimer
from reporter._delivery.deliverer import Clock, Deliverer
from reporter._delivery.in_flight import InFlight
from reporter._delivery.settling import Settler
from reporter._monitoring.health import Health
from reporter._monitoring.levels import WatchedLimiter
from reporter._monitoring.prometheus import MetricsEndpoint
from reporter._pacing.body_limit import BodyLimit
from reporter._pacing.gate import SinkGate
from reporter._pacing.permits import SLOT_LEAD_SECONDS, Permits, PermitsPacer, limiter_for
from reporter._pacing.send_hold import SendHold
from reporter._pacing.slots import SharedSlots
from reporter._senders.outcome import SendErrors
from reporter._service.ownership import ShardOwnership
from reporter._service.probing import HoldProbe, SecretWatch
from reporter._service.scheduling import Runner
from reporter._service.stopping import StopCalls, Stopped
from reporter._service.store_watch import RESET_GATHER_SECONDS, StoreWatch
from reporter._service.workers import HotGameWorker, LeaseKeeper, Reaper, ShardSweeper, guarded
from reporter._sinks.base import Sender, SlotRate
from reporter._sinks.registry import make_sink

logger = logging.getLogger("reporter")


class ReporterService:
    """Owns the workers, their runner (scheduler and pools), the sender and the stop Event."""

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
        self.config = config
        self.store = store if store is not None else open_store(config.redis)
        self.schema = self.store.schema
        self.batches = Batches(self.store, config)
        self.sink = make_sink(config)
        self.secrets = self.sink.open_secrets()
        self.stop_event = threading.Event()
        self.abort_event = threading.Event()  # a second signal: stop waiting for POSTs
        self.in_flight = InFlight()
        r = config.reporter
        self.ownership = ShardOwnership(self.store, r.shard_lease_seconds)
        pacing = self.sink.pacing()
        limiter = limiter_for(pacing, self.store)
        self.limiter = WatchedLimiter(limiter)
        self.health = Health(
            self.store,
            self.stop_event,
            r.shard_lease_seconds,
            self.ownership.owned,
            details=config.metrics.error_details,
        )
        self.send_errors = SendErrors()
        spec = self.sink.hold()
        self.hold = (
            SendHold(self.store, spec.name, spec.probe_interval, spec.label)
            if spec is not None
            else None
        )
        self.endpoint = (
            MetricsEndpoint(
                config,
                self.store,
                self.ownership.owned,
                self.limiter,
                self.health,
                self.send_errors.read,
                hold=self.hold,
            )
            if config.metrics.listen
            else None
        )
        self.tally = Tally()  # this process's counts: the stopped: line
        self.metrics = fan_out(
            self.tally, metrics, self.endpoint.process if self.endpoint else NO_METRICS
        )
        hold = self.hold
        self.gate = SinkGate(
            config.retry.initial_delay_ms / 1000,
            config.retry.max_delay_ms / 1000,
            held=(lambda: hold.held) if hold is not None else lambda: False,
        )
        self.body_limit = BodyLimit(
            config.sink.max_batch_bytes,
            self.sink.body_model,
            self.sink.endpoint(),
            config.buffer.max_event_bytes,
        )
        slots = isinstance(pacing, SlotRate)
        # A sink paced by slots asks ``on_time`` right before the bytes go, which sleeps
        # the lead off; only the builtin transport asks it there: with any other, a thread
        # sleeps all the way to its slot.
        lead = slots and sender is None and transport is None and config.sink.transport == "builtin"
        self.permits = Permits(
            self.limiter,
            limiter if isinstance(limiter, SharedSlots) else None,
            SLOT_LEAD_SECONDS if lead else 0.0,
            self.metrics,
        )
        # Every request of a sink paced by slots takes one (a re-send after 1007 too).
        pacer = PermitsPacer(self.permits, self.stop_event) if slots else None
        self.sender = sender or self.sink.sender(transport, self.secrets, pacer)
        self.claimer = Claimer(
            self.batches,
            self.permits,
            self.body_limit,
            self.metrics,
            r.batch_size,
            r.max_batches_per_claim,
        )
        self.settler = Settler(self.batches, self.in_flight, self.metrics)
        self.deliverer = Deliverer(
            Attempt(self.sender, self.body_limit),
            self.settler,
            self.permits,
            self.gate,
            self.in_flight,
            self.batches.freshness,
            self.metrics,
            clock,
            self.send_errors,
            self.hold,
        )
        self.store_watch = StoreWatch(self.store, self.metrics, clock)
        self.sweepers = [
            ShardSweeper(
                keys,
                self.batches,
                self.claimer,
                self.deliverer,
                self.gate,
                self.permits,
                config,
                self.ownership,
                self.stop_event,
                clock,
                self.store_watch,
            )
            for keys in self.schema.all_shards()
        ]
        self.hot_workers = [
            HotGameWorker(
                game,
                self.schema.for_game(game),
                self.claimer,
                self.deliverer,
                self.gate,
                self.ownership,
                self.stop_event,
            )
            for game, threads in r.hot_games.items()
            for _ in range(threads)
        ]
        self.metrics.watch(Gauge.HELD_BATCHES, lambda: len(self.in_flight))
        self.metrics.watch(Gauge.OWNED_SHARDS, lambda: len(self.ownership.owned()))
        hot_shards = [self.schema.shard_of(game) for game in r.hot_games]
        self.metrics.watch(
            Gauge.HOT_GAMES_SERVED, lambda: sum(map(self.ownership.owns, hot_shards))
        )
        self.metrics.watch(Gauge.SINK_GATE_OPEN, lambda: int(self.gate.is_open()))
        self.reaper = Reaper(self.schema, self.batches, self.ownership, self.stop_event)
        self.lease_keeper = LeaseKeeper(self.in_flight, self.batches)
        probe = self.sink.prober(self.sender) if self.hold is not None else None
        self.prober = (
            HoldProbe(self.hold, probe, self.permits, self.stop_event)
            if self.hold is not None and probe is not None
            else None
        )
        self.secret_watch = SecretWatch(
            self.secrets,
            self._key_changed,
            held=(lambda: hold.held) if hold is not None else lambda: False,
        )
        pools = {"default": r.workers, "control": 2}
        if self.prober is not None:
            pools["hold"] = 1
        pools.update({f"hot:{game}": threads for game, threads in r.hot_games.items()})
        self.runner = Runner(pools, self.stop_event)

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
        r = self.config.reporter
        poll = r.poll_interval_ms / 1000
        if self.endpoint is not None:
            self.endpoint.start()
        guarded("shard leases", self._shard_leases)()  # sweep at once, not a lease later
        every = self.runner.every
        if self.prober is not None:
            guarded("hold", self._read_hold)()  # held from before: sweep nothing
            self.prober.probe_soon()  # held from before (a restart after a fix): probe now
            every("hold-probe", self.prober.loop, HOLD_POLL_SECONDS, "hold")
        if self.secrets:
            every("secret-files", self.secret_watch.loop, SECRET_FILE_POLL_SECONDS, "control")
        every("shard-leases", self._shard_leases, r.shard_lease_seconds / 3, "control")
        every("reaper", self.reaper.loop, REAP_INTERVAL_SECONDS, "control")
        every("lease-keeper", self.lease_keeper.loop, r.lease_seconds / 3, "control")
        every("store-watch", self.store_watch.loop, RESET_GATHER_SECONDS, "control")
        for sweeper in self.sweepers:
            every(f"sweep:{sweeper.keys.shard}", sweeper.loop, poll, "default")
        for i, worker in enumerate(self.hot_workers):
            every(f"hot:{worker.game}:{i}", worker.loop, poll, f"hot:{worker.game}")
        self.runner.start()

    def reload(self, why: str = "SIGHUP") -> str:
        """Read the secret files again (``[nppa] secret_key_file``, ``[sink] header_files``)
        and, if sending is held, probe at once (the operator has just fixed something);
        logs and returns the one line that says what was re-read.  Never raises for a bad
        file: the value in use is kept (with an ERROR)."""
        line = self.secret_watch.reread_all(why)
        self._key_changed()
        return line

    def _read_hold(self) -> bool:
        return self.hold is not None and self.hold.refresh().held

    def _key_changed(self) -> None:
        if self.prober is not None:
            self.prober.probe_soon()

    def _shard_leases(self) -> bool:
        """One round of shard leases; a round that succeeds keeps the process ready."""
        if self.stop_event.is_set():  # stop() gives them up
            return False
        more = self.ownership.loop()
        self.health.leases_renewed()
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
        calls.acknowledge(self.settler, to_ack)  # delivered while a later POST was slow
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
