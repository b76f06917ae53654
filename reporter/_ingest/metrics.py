"""The ingest's counts in Prometheus form: its answers, the events it took, the connections
its server shed, and the SDK's own counters (``collector.prometheus.CollectorMetrics``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from collector import Collector
from collector.prometheus import CollectorMetrics
from reporter._http.shedding import Counts
from reporter._ingest.api import Counts as Answers

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

REQUESTS = "telemetry_ingest_requests"
EVENTS = "telemetry_ingest_events"
DROPPED = "telemetry_ingest_connections_dropped"
ACCEPT_ERRORS = "telemetry_ingest_accept_errors"
# Answered from the start at 0: an alert on increase() misses a series' first count.
STATUSES = (202, 400, 401, 413, 503)


class IngestCounters:
    """A prometheus-client collector of the ingest's own counts."""

    def __init__(self, answers: Answers, server: Counts) -> None:
        self._answers = answers
        self._server = server

    def collect(self) -> list[Metric]:
        from prometheus_client.metrics_core import CounterMetricFamily

        requests = CounterMetricFamily(
            REQUESTS,
            "Requests the ingest answered, by status code (202: every event taken; 400 bad "
            "body or event, 401 no or wrong token, 413 too large, 503 buffer full or stopping)",
            labels=["code"],
        )
        answers = dict.fromkeys(STATUSES, 0) | self._answers.answers()
        for status, count in sorted(answers.items()):
            requests.add_metric([str(status)], count)
        events = CounterMetricFamily(
            EVENTS, "Events the ingest took into the SDK's buffer (answered 202)"
        )
        events.add_metric([], self._answers.events)
        dropped = CounterMetricFamily(
            DROPPED,
            "Connections the ingest closed on its own, by reason: over_cap (past [ingest] "
            "max_connections), deadline (no whole request, or an answer not taken, within "
            "[ingest] request_timeout_seconds), bad_request (a malformed head, a body over "
            "[ingest] max_body_bytes)",
            labels=["reason"],
        )
        for reason, count in self._server.dropped().items():  # every reason, from 0
            dropped.add_metric([reason], count)
        errors = CounterMetricFamily(
            ACCEPT_ERRORS, "Failed accepts of the ingest, by errno name", labels=["code"]
        )
        for code, count in sorted(self._server.accept_errors().items()):
            errors.add_metric([code], count)
        return [requests, events, dropped, errors]


def exposition(collector: Collector, answers: Answers, server: Counts) -> bytes:
    """Every count in the Prometheus text format 0.0.4."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(CollectorMetrics(collector))
    registry.register(IngestCounters(answers, server))
    return generate_latest(registry)
