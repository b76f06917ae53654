"""The alert rules and the Grafana dashboard of config/deploy, against a reporter that runs: a
real ``ReporterService`` with ``[metrics] listen``, on a Redis server and a local endpoint
that the tests start, under a short workload that keeps every panel busy (deliveries, a
flaky game answered 503, a refused game dead-lettered, stale and evicted events, a hot game,
the rate limiter).

Every metric name the rules and the dashboard read must be in its live scrape; a real
Prometheus (tests/support/prometheus.py: skipped without it, failed under CI) scrapes it and answers
every panel's query through its HTTP API, as Grafana would ask.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from collector import Collector
from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint
from reporter._service.service import ReporterService
from tests.support.entries import make_config, now_ms, numbered, store
from tests.support.polling import wait_until
from tests.support.prometheus import Prometheus
from tests.support.scriptcalls import Scripts
from tests.support.servers import Server, default_binary, free_port

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "config" / "deploy"
DASHBOARD_PATH = DEPLOY / "grafana-dashboard.json"
GAMES = [f"game-{i}" for i in range(5)]
FLAKY, REFUSED, STALE, FLOOD = "flaky-game", "refused-game", "stale-game", "flood-game"
# Grafana's own variables, as it would fill them in for a 1 s scrape interval.
GRAFANA_VARIABLES = {"$__rate_interval": "5s", "$__interval": "1s"}


def respond(number: int, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    """A refused game's batches are rejected (dead letters), a flaky game's fail every other
    request (retries); the rest is taken."""
    game = body.get("game")
    if game == REFUSED:
        return 400, {}, b'{"error":"unknown game"}'
    if game == FLAKY and number % 2:
        return 503, {}, b""
    return 200, {}, b"{}"


class Workload:
    """Game servers' traffic and a few troubles, every 50 ms until stopped."""

    def __init__(self, service: ReporterService, config: ReporterConfig) -> None:
        self.service = service
        self.collector = Collector(config=config)
        self.scripts = Scripts(service.store)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="workload", daemon=True)

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            for game in [*GAMES, FLAKY, REFUSED]:
                for _ in range(3):
                    self.collector.collect(game, {"n": n})
                    n += 1
            self.collector.collect(GAMES[0], {"n": n}, dedup_key="same")  # merged after the 1st
            schema = self.service.schema
            hour_ago = now_ms() - 3_600_000  # older than max_age_seconds: stale when claimed
            store(self.scripts, schema, STALE, numbered(STALE, 2, born_ms=hour_ago, start=n))
            store(self.scripts, schema, FLOOD, numbered(FLOOD, 8, start=n), cap=5)  # evicts
            self.collector.flush(timeout=5)
            self.stop.wait(0.05)

    def __enter__(self) -> Workload:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        self.collector.close(timeout=5)


@dataclass
class Scene:
    service: ReporterService
    started: float  # wall-clock seconds

    @property
    def target(self) -> str:
        assert self.service.endpoint is not None
        return self.service.endpoint.url.removeprefix("http://")

    def scrape(self) -> set[str]:
        """The name of every sample /metrics serves now."""
        assert self.service.endpoint is not None
        text = httpx.get(f"{self.service.endpoint.url}/metrics", timeout=10).text
        return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture(scope="module")
def scene() -> Iterator[Scene]:
    redis_server = Server(
        default_binary(),
        extra=["--maxmemory", "256mb", "--maxmemory-policy", "noeviction"],
    )
    redis_server.start()
    try:
        with LocalEndpoint(respond) as endpoint:
            config = make_config(
                redis_server.url,
                sink_url=endpoint.url,
                metrics={
                    "listen": f"127.0.0.1:{free_port()}",
                    "cache_seconds": 0.0,
                    "top_games": 5,
                },
                reporter={"linger_ms": 300, "poll_interval_ms": 20, "hot_games": {GAMES[0]: 1}},
                sink={
                    "requests_per_second": 40.0,
                    "request_burst": 2,
                    "rate_limit_scope": "process",
                },
                retry={"initial_delay_ms": 50, "max_delay_ms": 200, "max_attempts": 3},
                dead={"max_batches": 2},
            )
            service = ReporterService(config)
            service.start()
            try:
                with Workload(service, config):
                    yield Scene(service, time.time())
            finally:
                service.stop(grace=0)
    finally:
        redis_server.cleanup()


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD_PATH.read_text(encoding="utf-8"))
    return loaded


def queries() -> list[tuple[str, str]]:
    """(panel title, query) of every panel's every target."""
    return [
        (panel["title"], target["expr"])
        for panel in dashboard()["panels"]
        for target in panel.get("targets", [])
    ]


def rule_exprs() -> list[tuple[str, str]]:
    loaded = yaml.safe_load((DEPLOY / "prometheus-alerts.yml").read_text(encoding="utf-8"))
    return [(rule["alert"], rule["expr"]) for group in loaded["groups"] for rule in group["rules"]]


def names_in(expr: str) -> set[str]:
    return set(re.findall(r"\btelemetry_\w+", expr))


def filled_in(expr: str, variables: dict[str, str]) -> str:
    for name, value in sorted(variables.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    assert "$" not in expr, f"a variable the test does not know: {expr}"
    return expr


def dashboard_variables() -> dict[str, str]:
    """The dashboard's own variables at their defaults, and Grafana's."""
    own = {
        f"${v['name']}": str(v["current"]["value"])
        for v in dashboard()["templating"]["list"]
        if v["type"] != "datasource"
    }
    return {**GRAFANA_VARIABLES, **own}


# -- without Prometheus: the names, read from a live scrape ----------------------------------


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_every_metric_read_is_one_a_running_reporter_serves(scene: Scene, source: str) -> None:
    used = {
        name: what
        for what, expr in (rule_exprs() if source == "rules" else queries())
        for name in names_in(expr)
    }
    assert used
    # The labelled series (top games, errors by code) appear once the workload reaches them.
    missing: dict[str, str] = {}

    def all_served() -> bool:
        missing.clear()
        served = scene.scrape()
        missing.update({name: what for name, what in used.items() if name not in served})
        return not missing

    try:
        wait_until(all_served, timeout=30, step=0.2, what="every name in a scrape")
    except AssertionError:
        pytest.fail(f"the {source} read metrics no reporter serves: {missing}")


def test_the_dashboard_is_importable() -> None:
    board = dashboard()
    assert board["title"] and board["uid"] and board["schemaVersion"] >= 36
    assert board["id"] is None  # Grafana gives it one on import
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in panels:
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["type"] == "timeseries", panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert panel["targets"] and len(set(refs)) == len(refs), panel["title"]
        for target in panel["targets"]:
            filled_in(target["expr"], dashboard_variables())  # every variable is known


def test_the_dashboard_shows_what_operations_asks_for() -> None:
    read = set().union(*(names_in(expr) for _, expr in queries()))
    for name in [
        "telemetry_delivered_total",
        "telemetry_post_duration_seconds_bucket",
        "telemetry_buffered",
        "telemetry_game_buffered",
        "telemetry_game_oldest_event_age_seconds",
        "telemetry_stale_total",
        "telemetry_evicted_total",
        "telemetry_merged_total",
        "telemetry_dead_events_total",
        "telemetry_send_errors_total",
        "telemetry_limiter_wait_seconds",
        "telemetry_redis_memory_used_bytes",
        "telemetry_live_reporters",
        "telemetry_owned_shards",
    ]:
        assert name in read, name


# -- with Prometheus: every panel's query answered ---------------------------------------------


@pytest.fixture(scope="module")
def prometheus(scene: Scene, prometheus_binary: str) -> Iterator[Prometheus]:
    """A real Prometheus scraping the scene's reporter every second."""
    server = Prometheus(prometheus_binary, [scene.target]).start()
    yield server
    server.cleanup()


def test_prometheus_answers_every_panel_query(scene: Scene, prometheus: Prometheus) -> None:
    variables = dashboard_variables()
    empty: dict[str, str] = {}

    def all_answered() -> bool:
        empty.clear()
        end = time.time()
        for title, expr in queries():
            # A query that does not parse raises here, with Prometheus's error.
            if not prometheus.query_range(filled_in(expr, variables), scene.started, end):
                empty[title] = expr
        return not empty

    try:
        wait_until(all_answered, timeout=60, step=1.0, what="data for every panel")
    except AssertionError:
        pytest.fail(f"queries without data after a minute of scrapes: {empty}\n{prometheus.log()}")
    up = prometheus.query_range(f'up{{job="{Prometheus.JOB}"}}', scene.started, time.time())
    assert {s["metric"]["instance"] for s in up} == {scene.target}


def test_a_query_that_does_not_parse_is_an_error_not_an_empty_answer(
    prometheus: Prometheus,
) -> None:
    with pytest.raises(ValueError, match="bad_data"):
        prometheus.query_range(
            "sum(rate(telemetry_delivered_total[5s])", time.time() - 10, time.time()
        )
