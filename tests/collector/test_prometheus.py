"""``collector.prometheus``: a game server that already runs prometheus-client serves the SDK's
counters by the vocabulary's names; without prometheus-client the SDK works as before."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from collector import Collector
from collector.counters import SDK, SDK_GAUGES, Counter, Gauge, Histogram
from collector.metrics import NO_METRICS, FanOut, Tally, fan_out
from collector.prometheus import (
    CollectorMetrics,
    PrometheusMetrics,
    exposed_name,
)
from tests.support.processes import run_python


def scrape(*collectors: object) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=True)  # as prometheus_client.REGISTRY
    for c in collectors:
        registry.register(c)  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def process(
    samples: Mapping[tuple[str, tuple[tuple[str, str], ...]], float], counter: Counter
) -> float:
    return samples[f"telemetry_{counter}_total", (("scope", "process"),)]


def test_a_collector_reports_through_prometheus_metrics(redis_url: str) -> None:
    metrics = PrometheusMetrics()
    c = Collector(url=redis_url, key_prefix="prom", metrics=metrics)
    try:
        for i in range(10):
            c.collect("g", {"i": i})
        c.collect("g", {"blob": "x" * 40_000})  # over max_event_bytes: refused, counted
        assert c.flush(timeout=10)
        samples = scrape(metrics)
        stats = c.stats()
    finally:
        c.close(timeout=1)
    for counter in SDK:  # every SDK counter is served from the start
        assert process(samples, counter) == stats[counter], counter
    assert process(samples, Counter.ACCEPTED) == process(samples, Counter.STORED) == 10
    assert process(samples, Counter.DROPPED_TOO_LARGE) == 1
    assert samples["telemetry_buffered", ()] == 0


def test_collector_metrics_serve_a_collectors_stats(redis_url: str) -> None:
    c = Collector(url=redis_url, key_prefix="prom", mode="sync")
    try:
        for i in range(3):
            c.collect("g", {"i": i})
        samples = scrape(CollectorMetrics(c))
        stats = c.stats()
    finally:
        c.close(timeout=1)
    assert {n: v for (n, _), v in samples.items()} == {
        (f"telemetry_{name}_total" if name not in SDK_GAUGES else f"telemetry_{name}"): value
        for name, value in stats.items()
    }
    assert process(samples, Counter.STORED) == 3


def test_histograms_are_cumulative_buckets_with_sum_and_count() -> None:
    metrics = PrometheusMetrics(counters=())
    for size in (1, 3, 128, 128, 200):
        metrics.observe(Histogram.BATCH_SIZE_EVENTS, size)
    samples = scrape(metrics)
    name = exposed_name(Histogram.BATCH_SIZE_EVENTS)
    assert samples[f"{name}_bucket", (("le", "1.0"),)] == 1
    assert samples[f"{name}_bucket", (("le", "4.0"),)] == 2
    assert samples[f"{name}_bucket", (("le", "127.0"),)] == 2
    assert samples[f"{name}_bucket", (("le", "128.0"),)] == 4
    assert samples[f"{name}_bucket", (("le", "+Inf"),)] == 5
    assert (samples[f"{name}_count", ()], samples[f"{name}_sum", ()]) == (5, 460)


def test_only_vocabulary_names_are_taken() -> None:
    metrics = PrometheusMetrics()
    with pytest.raises(TypeError):
        metrics.count("stored")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        metrics.add({"stored": 1})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        metrics.observe("batch_size_events", 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        metrics.watch("buffered", lambda: 1)  # type: ignore[arg-type]


def test_every_count_is_served_under_its_vocabulary_name() -> None:
    """The gauge of batches dead-listed now and the counter of dead letters ever created keep
    distinct names (one family each, also in OpenMetrics)."""
    assert exposed_name(Gauge.BATCHES_DEAD_LISTED) == "telemetry_batches_dead_listed"
    assert exposed_name(Counter.DEAD_BATCHES) == "telemetry_dead_batches"  # + _total
    assert exposed_name(Gauge.OWNED_SHARDS) == "telemetry_owned_shards"


class WithoutObserve:
    """A Metrics implementation written before histograms existed."""

    def __init__(self) -> None:
        self.counted: dict[Counter, int] = {}

    def count(self, counter: Counter, amount: int = 1) -> None:
        self.counted[counter] = self.counted.get(counter, 0) + amount

    def add(self, amounts: Mapping[Counter, int]) -> None:
        for counter, amount in amounts.items():
            self.count(counter, amount)

    def watch(self, name: Counter | Gauge, read: object) -> None:
        pass


def test_fan_out_skips_observations_for_targets_without_observe() -> None:
    old, tally = WithoutObserve(), Tally()
    both = fan_out(tally, old, NO_METRICS)  # type: ignore[arg-type]
    assert isinstance(both, FanOut)
    both.observe(Histogram.POST_DURATION_SECONDS, 0.1)
    both.count(Counter.DELIVERED, 2)
    assert old.counted == {Counter.DELIVERED: 2} and tally.get(Counter.DELIVERED) == 2
    assert fan_out(tally, NO_METRICS, NO_METRICS) is tally


def test_importing_the_sdk_does_not_load_prometheus_client() -> None:
    code = (
        "import sys, collector, collector.metrics, collector.prometheus; "
        "print('prometheus_client' in sys.modules)"
    )
    assert run_python(code) == "False"


def test_without_prometheus_client_the_sdk_works_and_the_module_says_what_to_install(
    redis_url: str,
) -> None:
    code = f"""
import sys
sys.modules["prometheus_client"] = None  # as if it were not installed
from collector import Collector
from collector.prometheus import PrometheusMetrics
try:
    PrometheusMetrics()
except ImportError as exc:
    print(exc)
c = Collector(url={redis_url!r}, key_prefix="prom", mode="sync")
c.collect("g", {{"i": 1}})
print(c.stats()["stored"])
c.close()
"""
    lines = run_python(code).splitlines()
    assert "pip install prometheus-client" in lines[0]
    assert lines[1] == "1"
