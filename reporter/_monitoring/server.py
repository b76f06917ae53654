"""The HTTP server of ``/metrics``, ``/healthz`` and ``/readyz``, on its own threads.

It binds the configured address only, answers GET (and HEAD), and serves the Prometheus text
format 0.0.4 (no OpenMetrics negotiation: one format, whatever the scraper asks).  The
connections are handled by ``reporter._http.bounded_server.BoundedServer`` (deadlines, a cap,
accept back-off); what it closed on its own is counted on ``/metrics`` itself.

Error answers say what is wrong without exception text, hosts or users unless ``[metrics]
error_details`` is on; logs are keyed by route, never by the path a client sent.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Protocol

from collector.logs import RateLimitedLog, mask
from reporter._exceptions import ReporterError
from reporter._http.bounded_server import BoundedServer, Serving
from reporter._http.server_wire import Answer, Request
from reporter._http.shedding import Counts, Limits
from reporter._monitoring.health import Health

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

logger = logging.getLogger("reporter")
ratelog = RateLimitedLog(logger, interval=30.0)

TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"
ROUTES = ("/metrics", "/healthz", "/readyz")
DROPPED = "telemetry_metrics_connections_dropped"
DROPPED_HELP = (
    "Connections to the metrics server it closed on its own, by reason: over_cap "
    "(past [metrics] connections' bound), deadline (no whole request, or an answer "
    "not taken, in time), bad_request (too large, malformed, not GET)"
)
ACCEPT_ERRORS = "telemetry_metrics_accept_errors"
ACCEPT_ERRORS_HELP = (
    "Failed accepts of the metrics server, by errno (EMFILE: out of file "
    "descriptors); each pauses accepting for a moment"
)
SERVER_COUNTERS = (DROPPED, ACCEPT_ERRORS)


class Collectable(Protocol):
    def collect(self) -> Any: ...


class ServerCounters:
    """A prometheus-client collector of the server's own counts."""

    def __init__(self, counts: Counts) -> None:
        self._counts = counts

    def collect(self) -> list[Metric]:
        from prometheus_client.metrics_core import CounterMetricFamily

        dropped = CounterMetricFamily(DROPPED, DROPPED_HELP, labels=["reason"])
        for reason, count in self._counts.dropped().items():
            dropped.add_metric([reason], count)
        errors = CounterMetricFamily(ACCEPT_ERRORS, ACCEPT_ERRORS_HELP, labels=["code"])
        for code, count in sorted(self._counts.accept_errors().items()):
            errors.add_metric([code], count)
        return [dropped, errors]


class MetricsServer:
    def __init__(
        self,
        address: tuple[str, int],
        metrics: Collectable,
        health: Health,
        limits: Limits | None = None,
        details: bool = False,
    ) -> None:
        self._address = address
        self._metrics = metrics
        self._health = health
        self._limits = limits or Limits()
        self._details = details
        self._server: BoundedServer | None = None

    def start(self) -> None:
        """Bind and serve; ``ReporterError`` naming the address if it cannot be bound."""
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self._metrics)
        counts = Counts()
        registry.register(ServerCounters(counts))
        routes = _Routes(registry, self._health, self._details)
        host, port = self._address
        serving = Serving(routes, _is_liveness, health=_is_health)
        try:
            server = BoundedServer.at(self._address, serving, self._limits, counts)
        except OSError as exc:
            raise ReporterError(
                f"[metrics] listen: cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
            ) from exc
        self._server = server
        server.start()
        logger.info("serving metrics on %s/metrics (health: /healthz, /readyz)", self.url)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    @property
    def counts(self) -> Counts:
        if self._server is None:
            raise RuntimeError("the metrics server is not running")
        return self._server.counts

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the metrics server is not running")
        return self._server.url


def _is_liveness(request: Request) -> bool:
    return request.path == "/healthz"


def _is_health(request: Request) -> bool:
    """The probes that may use the connections kept for them, and are never queued behind a
    scrape."""
    return request.path in ("/healthz", "/readyz")


class _Routes:
    def __init__(self, registry: Any, health: Health, details: bool) -> None:
        from prometheus_client import generate_latest

        self._generate = generate_latest
        self._registry = registry
        self._health = health
        self._details = details

    def __call__(self, request: Request) -> Answer:
        path = request.path
        try:
            if path == "/metrics":
                return Answer(200, TEXT_FORMAT, self._generate(self._registry))
            if path == "/healthz":
                return _json(200, self._health.alive())
            if path == "/readyz":
                ready, body = self._health.ready()
                return _json(200 if ready else 503, body)
            return _json(404, {"error": "not found; try /metrics, /healthz or /readyz"})
        except Exception as exc:  # a bug: answer 500 rather than drop the connection
            route = path if path in ROUTES else "other"
            ratelog.log(
                logging.ERROR,
                f"bug:{route}",
                "GET %s failed: %s",
                route,
                type(exc).__name__,
                exc_info=True,
            )
            error = (
                f"{type(exc).__name__}: {mask(str(exc))}"
                if self._details
                else ("internal error; see the reporter's log")
            )
            return _json(500, {"error": error})


def _json(status: int, body: dict[str, Any]) -> Answer:
    return Answer(status, "application/json", json.dumps(body).encode() + b"\n")
