"""The one place that builds the reporter's graph, for the service, the demo and the tests.

``build_core`` wires the delivery core of one process (no threads: what a worker drives for
one game); ``build_graph`` adds the workers, the jobs, the health and metrics around it.
``Given`` is what a caller brings instead of what the config would make: a store, a sender
or a transport of its own, a clock, a metrics target; tests may bring a limiter, say whether
sending is held, and shorten the gate's backoff.  ``ReporterService`` runs a ``Graph``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from collector.counters import Gauge
from collector.metrics import NO_METRICS, Metrics, Tally, fan_out
from collector.store import Store, open_store
from reporter._config import ReporterConfig
from reporter._delivery.attempt import Attempt
from reporter._delivery.batches import Batches
from reporter._delivery.claims import Claimer
from reporter._delivery.deliverer import Clock, Deliverer
from reporter._delivery.in_flight import InFlight
from reporter._delivery.pipeline import Pipeline
from reporter._delivery.settling import Settler
from reporter._monitoring.health import Health
from reporter._monitoring.levels import WatchedLimiter
from reporter._monitoring.prometheus import MetricsEndpoint, Sending
from reporter._pacing.body_limit import BodyLimit
from reporter._pacing.gate import SinkGate
from reporter._pacing.limiter import ClaimLimiter
from reporter._pacing.pace import Pace
from reporter._pacing.permits import SLOT_LEAD_SECONDS, Permits, PermitsPacer, limiter_for
from reporter._pacing.send_hold import Holds
from reporter._pacing.slots import SharedSlots
from reporter._senders.outcome import SendErrors
from reporter._senders.secrets import SecretFile
from reporter._service.ownership import ShardOwnership
from reporter._service.probing import HoldProbe, SecretWatch
from reporter._service.scheduling import Runner
from reporter._service.store_watch import StoreWatch
from reporter._service.workers import HotGameWorker, LeaseKeeper, Reaper, ShardSweeper
from reporter._sinks.base import Sender, Sink, SlotRate
from reporter._sinks.registry import make_sink


@dataclass(frozen=True)
class Given:
    """What the caller brings instead of what the config would make (None: make it).

    ``limiter``, ``held`` and ``gate_seconds`` are for tests driving the core by hand: a
    limiter of their own, whether sending is held, the gate's first and longest pause."""

    store: Store | None = None
    sender: Sender | None = None
    transport: httpx.BaseTransport | None = None
    clock: Clock = time.time
    metrics: Metrics = NO_METRICS
    limiter: ClaimLimiter | None = None
    held: Callable[[], bool] | None = None
    gate_seconds: tuple[float, float] | None = None


@dataclass(frozen=True)
class Core:
    """The delivery core of one process, wired: what its workers drive."""

    config: ReporterConfig
    store: Store
    sink: Sink
    secrets: list[SecretFile]
    sender: Sender
    batches: Batches
    in_flight: InFlight
    limiter: WatchedLimiter
    permits: Permits
    gate: SinkGate
    hold: Holds | None
    pace: Pace
    body_limit: BodyLimit
    settler: Settler
    claimer: Claimer
    deliverer: Deliverer
    pipeline: Pipeline
    send_errors: SendErrors
    tally: Tally  # this process's counts: the stopped: line
    metrics: Metrics  # the tally, the caller's target and the metrics endpoint's, fanned out
    endpoint: MetricsEndpoint | None
    ownership: ShardOwnership
    health: Health
    stop: threading.Event
    clock: Clock


@dataclass(frozen=True)
class Jobs:
    """What runs on the pools: the workers and the control jobs."""

    sweepers: list[ShardSweeper]
    hot_workers: list[HotGameWorker]
    reaper: Reaper
    lease_keeper: LeaseKeeper
    store_watch: StoreWatch
    prober: HoldProbe | None
    secret_watch: SecretWatch
    runner: Runner
    # Called when a secret changed (SIGHUP, or its file): a held sender probes at once.
    key_changed: Callable[[], None] = field(default=lambda: None)


@dataclass(frozen=True)
class Graph:
    core: Core
    jobs: Jobs


class _Pacing:
    """The pacing parts a sink asks for, before the metrics exist (the endpoint reports on
    the limiter and the hold)."""

    def __init__(self, core_store: Store, sink: Sink, given: Given, reporter: str) -> None:
        self.spec = sink.pacing()
        limiter = given.limiter if given.limiter is not None else limiter_for(self.spec, core_store)
        self.slots = limiter if isinstance(limiter, SharedSlots) else None
        self.limiter = WatchedLimiter(limiter)
        hold = sink.hold()
        self.hold = Holds(core_store, hold, sink, reporter) if hold else None


def build_core(config: ReporterConfig, given: Given = Given()) -> Core:
    """The delivery core the config asks for, with what ``given`` brings instead."""
    store = given.store if given.store is not None else open_store(config.redis)
    sink = make_sink(config)
    stop = threading.Event()
    ownership = ShardOwnership(store, config.reporter.shard_lease_seconds)
    health = Health(
        store,
        stop,
        config.reporter.shard_lease_seconds,
        ownership.owned,
        details=config.metrics.error_details,
    )
    pacing = _Pacing(store, sink, given, ownership.owner)
    send_errors = SendErrors()
    endpoint = (
        MetricsEndpoint(
            config,
            store,
            ownership.owned,
            health,
            Sending(pacing.limiter, send_errors.read, pacing.hold),
        )
        if config.metrics.listen
        else None
    )
    tally = Tally()
    metrics = fan_out(tally, given.metrics, endpoint.process if endpoint else NO_METRICS)
    return _wire(
        config,
        store,
        sink,
        pacing,
        _Around(endpoint, tally, metrics, send_errors, ownership, health, stop, given),
    )


@dataclass(frozen=True)
class _Around:
    """What the core is wired with besides its config, store, sink and pacing."""

    endpoint: MetricsEndpoint | None
    tally: Tally
    metrics: Metrics
    send_errors: SendErrors
    ownership: ShardOwnership
    health: Health
    stop: threading.Event
    given: Given


def _wire(
    config: ReporterConfig, store: Store, sink: Sink, pacing: _Pacing, around: _Around
) -> Core:
    given, metrics, stop = around.given, around.metrics, around.stop
    hold = pacing.hold
    first, longest = given.gate_seconds or (
        config.retry.initial_delay_ms / 1000,
        config.retry.max_delay_ms / 1000,
    )
    held = given.held or (hold.stalled if hold is not None else lambda: False)
    gate = SinkGate(first, longest, held=held)
    slots = isinstance(pacing.spec, SlotRate)
    # A sink paced by slots asks ``on_time`` once the connection is ready, which sleeps the
    # lead off; only the builtin transport asks it there: with any other, a thread sleeps
    # all the way to its slot.
    builtin = given.transport is None and config.sink.transport == "builtin"
    lead = slots and given.sender is None and builtin
    permits = Permits(pacing.limiter, pacing.slots, SLOT_LEAD_SECONDS if lead else 0.0, metrics)
    secrets = sink.open_secrets()
    # Every request of a sink paced by slots takes one (a re-send after 1007 too).
    pacer = PermitsPacer(permits, stop) if slots else None
    sender = given.sender or sink.sender(given.transport, secrets, pacer)
    batches = Batches(store, config)
    if given.sender is None:
        sink.vet_secrets(sender, secrets, pacer, batches.note_alert)
    body_limit = BodyLimit(
        config.sink.max_batch_bytes,
        sink.body_model,
        sink.endpoint(),
        config.buffer.max_event_bytes,
    )
    r = config.reporter
    claimer = Claimer(batches, permits, body_limit, metrics, r.batch_size, r.max_batches_per_claim)
    in_flight = InFlight()
    settler = Settler(batches, in_flight, metrics)
    pace = Pace(permits, gate, hold)
    attempt = Attempt(sender, body_limit, metrics, around.send_errors)
    deliverer = Deliverer(
        attempt, settler, pace, batches.freshness, given.clock, in_order=batches.in_order
    )
    return Core(
        config=config,
        store=store,
        sink=sink,
        secrets=secrets,
        sender=sender,
        batches=batches,
        in_flight=in_flight,
        limiter=pacing.limiter,
        permits=permits,
        gate=gate,
        hold=hold,
        pace=pace,
        body_limit=body_limit,
        settler=settler,
        claimer=claimer,
        deliverer=deliverer,
        pipeline=Pipeline(claimer, deliverer, pace, stop, given.clock),
        send_errors=around.send_errors,
        tally=around.tally,
        metrics=metrics,
        endpoint=around.endpoint,
        ownership=around.ownership,
        health=around.health,
        stop=stop,
        clock=given.clock,
    )


def build_graph(config: ReporterConfig, given: Given = Given()) -> Graph:
    """The whole reporter of one process: its core, its workers and jobs, their pools."""
    core = build_core(config, given)
    return Graph(core, build_jobs(core))


def build_jobs(core: Core) -> Jobs:
    """The workers and control jobs over ``core``, and the pools they run on."""
    config, schema, r = core.config, core.store.schema, core.config.reporter
    store_watch = StoreWatch(core.store, core.metrics, core.clock)
    sweepers = [
        ShardSweeper(keys, core.batches, core.pipeline, core.ownership, config, store_watch)
        for keys in schema.all_shards()
    ]
    hot_workers = [
        HotGameWorker(game, schema.for_game(game), core.pipeline, core.ownership)
        for game, threads in r.hot_games.items()
        for _ in range(threads)
    ]
    _watch_levels(core)
    hold = core.hold
    probe = core.sink.prober(core.sender) if hold is not None else None
    prober = (
        HoldProbe(hold, probe, core.permits, core.stop)
        if hold is not None and probe is not None
        else None
    )
    key_changed = prober.probe_soon if prober is not None else lambda: None
    secret_watch = SecretWatch(
        core.secrets,
        key_changed,
        held=(lambda: hold.any_held) if hold is not None else lambda: False,
    )
    pools = {"default": r.workers, "control": 2}
    if core.permits.watched:
        pools["rate"] = 1  # the shared rate's watch, never behind the control jobs
    if prober is not None:
        pools["hold"] = 1
    pools.update({f"hot:{game}": threads for game, threads in r.hot_games.items()})
    return Jobs(
        sweepers=sweepers,
        hot_workers=hot_workers,
        reaper=Reaper(schema, core.batches, core.ownership, core.stop),
        lease_keeper=LeaseKeeper(core.in_flight, core.batches),
        store_watch=store_watch,
        prober=prober,
        secret_watch=secret_watch,
        runner=Runner(pools, core.stop),
        key_changed=key_changed,
    )


def _watch_levels(core: Core) -> None:
    """The process's levels, read when the metrics are."""
    metrics, ownership, schema = core.metrics, core.ownership, core.store.schema
    metrics.watch(Gauge.HELD_BATCHES, lambda: len(core.in_flight))
    metrics.watch(Gauge.OWNED_SHARDS, lambda: len(ownership.owned()))
    hot_shards = [schema.shard_of(game) for game in core.config.reporter.hot_games]
    metrics.watch(Gauge.HOT_GAMES_SERVED, lambda: sum(map(ownership.owns, hot_shards)))
    metrics.watch(Gauge.SINK_GATE_OPEN, lambda: int(core.gate.is_open()))
