"""The project's counts in Prometheus form, for a host that already runs prometheus-client.

prometheus-client is imported only when one of these objects is built or scraped: ``import
collector`` never loads it, and a game server without it installed is unaffected.

    from prometheus_client import REGISTRY
    from collector import Collector
    from collector.prometheus import CollectorMetrics, PrometheusMetrics

    metrics = PrometheusMetrics()            # a collector.metrics.Metrics implementation
    REGISTRY.register(metrics)
    telemetry = Collector(url="redis://cache:6379/0", metrics=metrics)

    REGISTRY.register(CollectorMetrics(other))   # or: read other.stats() at every scrape

Names (the reporter's endpoint uses the same, see docs/operations.md):

- a counter ``c`` of ``collector.counters`` is ``telemetry_<c>_total`` with a label ``scope``:
  ``"process"`` for this process's count (here, always), ``"cluster"`` for the sum over
  every shard in Redis (only the reporter serves those);
- a gauge ``g`` is ``telemetry_<g>``; a histogram ``h`` is ``telemetry_<h>`` (``_bucket``,
  ``_sum``, ``_count``).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from collector.counters import SDK, Counter, Gauge, Histogram
from collector.metrics import Tally

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

NAMESPACE = "telemetry"
PROCESS = "process"
CLUSTER = "cluster"
# Upper bounds of the buckets (le), without +Inf.
BUCKETS: dict[Histogram, tuple[float, ...]] = {
    Histogram.POST_DURATION_SECONDS: (
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1.0,
        2.5,
        5.0,
        10.0,
        30.0,
        60.0,
    ),
    Histogram.BATCH_SIZE_EVENTS: (1, 2, 4, 8, 16, 32, 64, 96, 127, 128),
}
HELP: dict[Histogram, str] = {
    Histogram.POST_DURATION_SECONDS: "Seconds one request to the endpoint took, answered or not",
    Histogram.BATCH_SIZE_EVENTS: "Events in one request to the endpoint (128 at most)",
}
INSTALL_HINT = (
    "collector.prometheus needs prometheus-client, which this installation lacks: "
    "pip install prometheus-client"
)

Reader = Callable[[], float]


def exposed_name(name: Counter | Gauge | Histogram) -> str:
    """The metric's name as served (a counter's without its ``_total``)."""
    return f"{NAMESPACE}_{name}"


def require_client() -> None:
    """Raise ``ImportError`` saying what to install when prometheus-client is missing."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc


@dataclass(frozen=True, slots=True)
class Buckets:
    """A histogram at one moment: cumulative counts per upper bound (+Inf last), the sum."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    total: float

    @property
    def count(self) -> int:
        return self.cumulative[-1]


class HistogramState:
    """Observations of one histogram, counted into fixed buckets; thread-safe."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = tuple(float(b) for b in bounds)
        self._counts = [0] * (len(self._bounds) + 1)  # the last one: above every bound
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self._bounds, value)  # the first bound >= value
        with self._lock:
            self._counts[i] += 1
            self._sum += value

    def read(self) -> Buckets:
        with self._lock:
            counts, total = list(self._counts), self._sum
        running, cumulative = 0, []
        for n in counts:
            running += n
            cumulative.append(running)
        return Buckets((*self._bounds, float("inf")), tuple(cumulative), total)


class Exposition:
    """Samples gathered for one scrape, turned into prometheus-client metric families: one
    family per name, however many places added samples to it.  ``help``: the help text of
    gauges, by name (else a line pointing to the docs)."""

    def __init__(self, help: Mapping[Gauge, str] | None = None) -> None:
        self._help = help or {}
        self._counters: dict[Counter, dict[str, float]] = {}
        self._gauges: dict[str, tuple[str, tuple[str, ...], list[tuple[list[str], float]]]] = {}
        self._histograms: dict[Histogram, Buckets] = {}

    def counter(self, name: Counter, value: float, scope: str = PROCESS) -> None:
        self._counters.setdefault(name, {})[scope] = value

    def gauge(
        self, name: Gauge, value: float, labels: Mapping[str, str] | None = None, help: str = ""
    ) -> None:
        labels = labels or {}
        metric = exposed_name(name)
        doc = (
            help
            or self._help.get(name)
            or (f"The level {str(name)!r} (docs/delivery.md, docs/operations.md)")
        )
        _, names, samples = self._gauges.setdefault(metric, (doc, tuple(labels), []))
        if tuple(labels) != names:
            raise ValueError(f"{metric}: labels {tuple(labels)} after {names}")
        samples.append((list(labels.values()), value))

    def histogram(self, name: Histogram, buckets: Buckets) -> None:
        self._histograms[name] = buckets

    def families(self) -> list[Metric]:
        from prometheus_client.metrics_core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        out: list[Metric] = []
        for counter, by_scope in sorted(self._counters.items()):
            family = CounterMetricFamily(
                exposed_name(counter),
                f"The count {str(counter)!r} (docs/delivery.md); scope: "
                "this process, or every shard in Redis (cluster)",
                labels=["scope"],
            )
            for scope, value in sorted(by_scope.items()):
                family.add_metric([scope], value)
            out.append(family)
        for metric, (doc, names, samples) in sorted(self._gauges.items()):
            gauge = GaugeMetricFamily(metric, doc, labels=list(names))
            for values, value in samples:
                gauge.add_metric(values, value)
            out.append(gauge)
        for histogram, b in sorted(self._histograms.items()):
            out.append(
                HistogramMetricFamily(
                    exposed_name(histogram),
                    HELP[histogram],
                    buckets=[(_le(le), n) for le, n in zip(b.bounds, b.cumulative, strict=True)],
                    sum_value=b.total,
                )
            )
        return out


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class PrometheusMetrics(Tally):
    """A ``collector.metrics.Metrics`` implementation that a prometheus-client registry can
    collect: what it was told, served under the names above at every scrape.  A ``Tally``
    that also keeps histograms.

    ``counters``: the counters served from the start, at 0 until counted (by default the
    SDK's; the reporter passes its own).  Thread-safe."""

    def __init__(self, counters: Iterable[Counter] = SDK) -> None:
        require_client()
        super().__init__()
        self._counts.update(dict.fromkeys(counters, 0))
        self._histograms: dict[Histogram, HistogramState] = {}

    def observe(self, name: Histogram, value: float) -> None:
        state = self._histograms.get(name)
        if state is None:
            if type(name) is not Histogram:
                raise TypeError(f"not a histogram of the vocabulary: {name!r}")
            with self._lock:
                state = self._histograms.setdefault(name, HistogramState(BUCKETS[name]))
        state.observe(value)

    def expose(self, out: Exposition) -> None:
        """Add everything this object holds to ``out`` (a counter watched elsewhere, such
        as the SDK's ``accepted``, is read from its reader)."""
        with self._lock:
            counts = dict(self._counts)
            watched = list(self._watched.items())
            histograms = list(self._histograms.items())
        for name, read in watched:
            if isinstance(name, Counter):
                counts[name] = int(read())
            else:
                out.gauge(name, float(read()))
        for counter, value in counts.items():
            out.counter(counter, value)
        for histogram, state in histograms:
            out.histogram(histogram, state.read())

    def collect(self) -> list[Metric]:
        """What prometheus-client calls at every scrape."""
        out = Exposition()
        self.expose(out)
        return out.families()


class HasStats(Protocol):
    def stats(self) -> Mapping[str, int]: ...


class CollectorMetrics:
    """Serves ``source.stats()`` (a ``Collector``, or anything with the same ``stats()``)
    at every scrape: its counters with ``scope="process"``, its levels as gauges."""

    def __init__(self, source: HasStats) -> None:
        require_client()
        self._source = source

    def collect(self) -> list[Metric]:
        out = Exposition()
        counters = {str(c): c for c in Counter}
        gauges = {str(g): g for g in Gauge}
        for name, value in self._source.stats().items():
            if name in counters:
                out.counter(counters[name], value)
            elif name in gauges:
                out.gauge(gauges[name], value)
        return out.families()
