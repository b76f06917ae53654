"""The reporter's ``/metrics``: this process's counts, levels and histograms, and readings of
Redis (the cluster's counters, the levels of the shards this process holds).

Names and labels are listed in docs/operations.md ("Metrics and health").  Counters carry a
``scope`` label: ``process`` (this reporter's tally) or ``cluster`` (every shard's ``stats``
hash added up: the same value from every reporter).  The levels read from Redis cover only
the shards this process holds, so each shard is served by one reporter at a time and a sum
over reporters is the whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from collector.counters import REPORTER, STORE, Gauge
from collector.prometheus import CLUSTER, Exposition, PrometheusMetrics
from collector.store import Store
from reporter._config import ReporterConfig, listen_address
from reporter._http.shedding import Limits
from reporter._monitoring.health import Health
from reporter._monitoring.levels import Reading, RedisReadings, WatchedLimiter
from reporter._monitoring.server import MetricsServer
from reporter._pacing.send_hold import Holds

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

G = Gauge
# The endpoint's failed answers by code: the HTTP status, or the transport error's type.
SEND_ERRORS = "telemetry_send_errors"
SEND_ERRORS_HELP = (
    "Requests to the endpoint that failed (a retry or a rejection), by code: "
    "the HTTP status, or the transport error's type (ConnectError, ReadTimeout)"
)
HELP = {
    G.OWNED_SHARDS: "Shards this reporter process holds the lease of, and sweeps",
    G.HOT_GAMES_SERVED: "Hot games ([reporter.hot_games]) whose shard this process holds, so "
    "whose pools here claim; over all reporters it adds up to the hot games",
    G.HELD_BATCHES: "Batches this reporter process holds a lease on now (its POSTs in flight "
    "and those waiting their turn)",
    G.SINK_GATE_OPEN: "1 while this process may claim, 0 while the endpoint fails and claims pause",
    G.SENDING_HELD_SECONDS: "Seconds sending has been held in a scope (label scope: app, "
    "game, key or host) because the anti-addiction interface refused our identity or "
    "configuration, or the config cannot send a game (label cause: the answer, such as "
    "nppa 1011, or no biz_id); the longest per scope and cause, 0 while nothing is held",
    G.LIMITER_WAIT_SECONDS: "Seconds the claim limiter told the last refused claim to wait "
    "(0 until one is refused)",
    G.SHARDS: "[redis] shards: the owned_shards of every reporter add up to this",
    G.REDIS_UP: "1 if the last read of Redis for these metrics worked, else 0 (the Redis "
    "series are then left out)",
    G.REDIS_MEMORY_USED_BYTES: "Bytes of memory a Redis node counts against its maxmemory",
    G.REDIS_MEMORY_MAX_BYTES: "A Redis node's maxmemory in bytes (0: no limit)",
    G.REDIS_REFUSING_WRITES: "1 while Redis refuses writes for lack of memory (a node within 2% "
    "of maxmemory with noeviction, or OOM replies since the last "
    "reading): the SDKs hold their events until the reporters drain "
    "it",
    G.LIVE_REPORTERS: "Reporter processes with a live heartbeat in the registry (cluster)",
    G.BUFFERED: "Events buffered in Redis, per shard this process holds",
    G.GAME_BUFFERED: "Events buffered in Redis for the games with the most, in the shards "
    "this process holds ([metrics] top_games of them)",
    G.GAME_OLDEST_EVENT_AGE_SECONDS: "Age of the oldest event buffered for the games whose "
    "oldest event is oldest, in the shards this process "
    "holds ([metrics] top_games of them)",
    G.OLDEST_EVENT_AGE_SECONDS: "Age of the oldest event buffered in the shards this process "
    "holds (0 when none is); it goes stale at max_age_seconds",
    G.BATCHES_IN_FLIGHT: "Batches leased now, in the shards this process holds",
    G.BATCHES_RETRY: "Batches waiting for a retry, in the shards this process holds",
    G.BATCHES_RETRY_DUE: "Batches whose retry time has come, in the shards this process holds",
    G.BATCHES_DEAD_LISTED: "Batches on the dead lists now, in the shards this process holds",
}


@dataclass(frozen=True)
class Sending:
    """What the process knows of its sending, for ``/metrics``: the claim limiter (its last
    wait), the endpoint's failed answers by code, the hold (if the sink can be held)."""

    limiter: WatchedLimiter
    errors: Callable[[], Mapping[str, int]] = dict
    hold: Holds | None = None


class ReporterMetrics:
    """A prometheus-client collector: everything ``/metrics`` serves, read at each scrape."""

    def __init__(
        self,
        process: PrometheusMetrics,
        readings: RedisReadings,
        sending: Sending,
        shards: int,
        top_games: int,
    ) -> None:
        self._hold = sending.hold
        self._process = process
        self._send_errors = sending.errors
        self._readings = readings
        self._limiter = sending.limiter
        self._shards = shards
        self._top_games = top_games

    def collect(self) -> list[Metric]:
        out = Exposition(HELP)
        self._process.expose(out)
        gauge = out.gauge
        gauge(G.LIMITER_WAIT_SECONDS, self._limiter.last_wait)
        gauge(G.SHARDS, self._shards)
        for (scope, cause), seconds in self._held().items():
            gauge(G.SENDING_HELD_SECONDS, seconds, {"cause": cause, "scope": scope})
        reading = self._readings.get()
        gauge(G.REDIS_UP, 0 if reading.error else 1)
        if not reading.error:
            for counter in STORE:
                out.counter(counter, reading.counters.get(counter, 0), CLUSTER)
            gauge(G.LIVE_REPORTERS, reading.live_reporters)
            for m in reading.memory:
                gauge(G.REDIS_MEMORY_USED_BYTES, m.used, {"node": m.node})
                gauge(G.REDIS_MEMORY_MAX_BYTES, m.maximum, {"node": m.node})
            gauge(G.REDIS_REFUSING_WRITES, 1 if reading.refusing_writes else 0)
            self._levels(out, reading)
        return [*out.families(), *self._own_counters()]

    def _held(self) -> dict[tuple[str, str], float]:
        """The longest hold by scope kind and cause (both bounded: an answer's code, a
        fixed reason), or one of 0 s with empty labels when nothing is held."""
        longest: dict[tuple[str, str], float] = {}
        for scope, state in self._hold.states() if self._hold is not None else []:
            key = (scope.kind, state.cause)
            longest[key] = max(longest.get(key, 0.0), state.age_seconds)
        return longest or {("", ""): 0.0}

    def _own_counters(self) -> list[Metric]:
        from prometheus_client.metrics_core import CounterMetricFamily

        errors = CounterMetricFamily(SEND_ERRORS, SEND_ERRORS_HELP, labels=["code"])
        for code, count in sorted(self._send_errors().items()):
            errors.add_metric([code], count)
        return [errors]

    def _levels(self, out: Exposition, reading: Reading) -> None:
        gauge, shards = out.gauge, reading.shards
        for s in shards:
            gauge(G.BUFFERED, s.buffered, {"shard": str(s.shard)})
        gauge(G.BATCHES_IN_FLIGHT, sum(s.inflight for s in shards))
        gauge(G.BATCHES_RETRY, sum(s.retry for s in shards))
        gauge(G.BATCHES_RETRY_DUE, sum(s.retry_due for s in shards))
        gauge(G.BATCHES_DEAD_LISTED, sum(s.dead for s in shards))
        oldest = [ms for s in shards if (ms := s.oldest_ms) is not None]
        gauge(
            G.OLDEST_EVENT_AGE_SECONDS,
            max(0.0, (reading.now_ms - min(oldest)) / 1000) if oldest else 0.0,
        )
        games = sorted(
            ((g.length, g.game, s.shard) for s in shards for g in s.games if g.length),
            key=lambda t: (-t[0], t[1]),
        )
        for length, game, shard in games[: self._top_games]:
            gauge(G.GAME_BUFFERED, length, {"game": game, "shard": str(shard)})
        waiting = sorted(
            (ms, g.game, s.shard)
            for s in shards
            for g in s.games
            if g.length and (ms := g.oldest_ms) is not None
        )
        for ms, game, shard in waiting[: self._top_games]:
            gauge(
                G.GAME_OLDEST_EVENT_AGE_SECONDS,
                max(0.0, (reading.now_ms - ms) / 1000),
                {"game": game, "shard": str(shard)},
            )


class MetricsEndpoint:
    """What ``[metrics] listen`` turns on: the Prometheus side of the reporter's metrics (a
    ``Metrics`` target for its counts) and the HTTP server of ``/metrics``, ``/healthz``
    and ``/readyz``, bound to that address only."""

    def __init__(
        self,
        config: ReporterConfig,
        store: Store,
        owned: Callable[[], frozenset[int]],
        health: Health,
        sending: Sending,
        clock: Callable[[], float] = time.time,
    ) -> None:
        m = config.metrics
        self.process = PrometheusMetrics(REPORTER)
        self.readings = RedisReadings(store, owned, m.cache_seconds, wall=clock)
        collector = ReporterMetrics(
            self.process, self.readings, sending, store.schema.shards, m.top_games
        )
        self.server = MetricsServer(
            listen_address(m.listen),
            collector,
            health,
            Limits(max_connections=m.max_connections),
            m.error_details,
        )

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()

    @property
    def url(self) -> str:
        """Where it serves, e.g. ``http://127.0.0.1:9464`` (the port bound, if 0 was asked)."""
        return self.server.url
