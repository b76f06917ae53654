"""``[metrics] listen``: the reporter serves /metrics (Prometheus text, parsed here with
prometheus-client's own parser), /healthz and /readyz, from real Redis and a real endpoint."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from collector import Collector, ConfigError
from collector.counters import METRICS_GAUGES, REPORTER, STORE, Counter, Histogram
from collector.prometheus import exposed_name
from reporter._config import ReporterConfig, listen_address
from reporter._demo.endpoint import LocalEndpoint
from reporter._exceptions import ReporterError
from reporter._monitoring.prometheus import SEND_ERRORS
from reporter._monitoring.server import SERVER_COUNTERS
from reporter._service.service import ReporterService
from tests.support.config_files import write
from tests.support.entries import make_config, now_ms, numbered, store
from tests.support.fixtures import MakeService
from tests.support.polling import wait_until
from tests.support.processes import run_python
from tests.support.scriptcalls import Scripts
from tests.support.servers import Server, free_port

ROOT = Path(__file__).resolve().parents[3]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
QUICK = {"linger_ms": 50, "poll_interval_ms": 20}


def scrape(service: ReporterService) -> Samples:
    """Every sample of /metrics, by name and labels."""
    assert service.endpoint is not None
    answer = httpx.get(f"{service.endpoint.url}/metrics", timeout=10)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
    }


def family_types(service: ReporterService) -> dict[str, str]:
    """The metric families /metrics serves, by name: their type."""
    assert service.endpoint is not None
    text = httpx.get(f"{service.endpoint.url}/metrics", timeout=10).text
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[name, tuple(sorted(labels.items()))]


def named(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def get(service: ReporterService, path: str) -> httpx.Response:
    assert service.endpoint is not None
    return httpx.get(f"{service.endpoint.url}{path}", timeout=10)


def metrics_config(
    redis_url: str, sink_url: str = "http://127.0.0.1:9/ingest", **sections: dict[str, Any]
) -> ReporterConfig:
    metrics = {
        "listen": f"127.0.0.1:{free_port()}",
        "cache_seconds": 0.0,
        **sections.pop("metrics", {}),
    }
    return make_config(redis_url, sink_url=sink_url, metrics=metrics, **sections)


class Traffic:
    """A game server collecting events until told to stop."""

    def __init__(self, config: ReporterConfig) -> None:
        self.collector = Collector(config=config)
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for i in range(40):
                self.collector.collect(f"game-{i % 5}", {"i": self.sent + i})
            self.sent += 40
            self.collector.flush(timeout=5)
            self.stop.wait(0.02)

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        self.collector.close(timeout=5)


def test_metrics_rise_while_traffic_flows(redis_url: str, make_service: MakeService) -> None:
    with LocalEndpoint() as endpoint:
        config = metrics_config(redis_url, endpoint.url, reporter=QUICK)
        service = make_service(config)
        service.start()
        assert service.endpoint is not None
        assert service.endpoint.url.startswith("http://127.0.0.1:")
        with Traffic(config) as traffic:

            def delivered(scope: str) -> float:
                return value(scrape(service), "telemetry_delivered_total", scope=scope)

            first = wait_until(lambda: delivered("process"), what="a first delivery")
            wait_until(lambda: delivered("process") > first, what="delivered rising")
            wait_until(lambda: delivered("cluster") > first, what="the cluster's rising")
        wait_until(
            lambda: delivered("cluster") == delivered("process") == traffic.sent,
            what="everything delivered",
        )
        samples = scrape(service)
        assert get(service, "/healthz").status_code == 200
        counts = service.stop().counts

    assert value(samples, "telemetry_delivered_total", scope="process") == counts["delivered"]
    assert value(samples, "telemetry_stored_total", scope="cluster") == traffic.sent
    for counter in REPORTER:  # every counter of this process, from the start
        assert (f"telemetry_{counter}_total", (("scope", "process"),)) in samples
    for counter in STORE:
        assert (f"telemetry_{counter}_total", (("scope", "cluster"),)) in samples
    sizes = value(samples, "telemetry_batch_size_events_sum")
    assert sizes == counts["delivered"]  # every event went out once, in one POST
    requests = value(samples, "telemetry_post_duration_seconds_count")
    assert requests == value(samples, "telemetry_batch_size_events_count") == len(endpoint.received)
    assert value(samples, "telemetry_post_duration_seconds_bucket", le="+Inf") == requests
    levels = {
        name: value(samples, f"telemetry_{name}")
        for name in (
            "owned_shards",
            "shards",
            "live_reporters",
            "sink_gate_open",
            "redis_up",
            "batches_in_flight",
            "batches_dead_listed",
            "oldest_event_age_seconds",
            "limiter_wait_seconds",
        )
    }
    assert levels == {
        "owned_shards": 4,
        "shards": 4,
        "live_reporters": 1,
        "sink_gate_open": 1,
        "redis_up": 1,
        "batches_in_flight": 0,
        "batches_dead_listed": 0,
        "oldest_event_age_seconds": 0,
        "limiter_wait_seconds": 0,
    }
    assert named(samples, "telemetry_buffered") == {(("shard", str(n)),): 0 for n in range(4)}


def test_levels_of_the_shards_held_and_a_bounded_set_of_games(
    redis_url: str, make_service: MakeService
) -> None:
    config = metrics_config(
        redis_url, shards=8, metrics={"top_games": 5}, reporter={"linger_ms": 120_000}
    )  # nothing is claimed
    service = make_service(config)
    born = now_ms() - 30_000
    for i in range(30):
        store(
            Scripts(service.store),
            service.schema,
            f"game-{i}",
            numbered(f"game-{i}", i + 1, born_ms=born + 1000 * i),
        )
    service.start()
    samples = scrape(service)

    top = named(samples, "telemetry_game_buffered")
    assert len(top) == 5
    assert {dict(labels)["game"]: v for labels, v in top.items()} == {
        f"game-{i}": i + 1 for i in range(25, 30)
    }
    for labels in top:
        game = dict(labels)["game"]
        assert dict(labels)["shard"] == str(service.schema.shard_of(game))
    ages = {
        dict(labels)["game"]: v
        for labels, v in named(samples, "telemetry_game_oldest_event_age_seconds").items()
    }
    assert sorted(ages) == [f"game-{i}" for i in range(5)]  # waiting longest, not the largest
    assert ages["game-0"] >= 30 and ages["game-0"] - ages["game-4"] == pytest.approx(4, abs=0.01)
    per_shard = named(samples, "telemetry_buffered")
    assert len(per_shard) == 8
    assert sum(per_shard.values()) == sum(range(1, 31))
    assert value(samples, "telemetry_oldest_event_age_seconds") >= 30
    gauges = {name for name, kind in family_types(service).items() if kind == "gauge"}
    assert gauges == {exposed_name(g) for g in METRICS_GAUGES}


def test_failed_requests_are_counted_by_code(redis_url: str, make_service: MakeService) -> None:
    def respond(number: int, _: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        return (503, {}, b"") if number == 1 else (200, {}, b"{}")

    with LocalEndpoint(respond) as endpoint:
        config = metrics_config(
            redis_url,
            endpoint.url,
            reporter=QUICK,
            retry={"initial_delay_ms": 10, "max_delay_ms": 10},
        )
        service = make_service(config)
        store(Scripts(service.store), service.schema, "game", numbered("game", 5))
        service.start()
        wait_until(
            lambda: value(scrape(service), "telemetry_delivered_total", scope="process") == 5,
            what="the batch delivered after a 503",
        )
        samples = scrape(service)
    assert named(samples, "telemetry_send_errors_total") == {(("code", "503"),): 1}
    assert family_types(service)["telemetry_send_errors"] == "counter"


def test_late_slots_are_served_as_the_permits_count_them(
    redis_url: str, make_service: MakeService
) -> None:
    """Through the shared vocabulary: the process's counter, in its stopped: line too."""
    service = make_service(metrics_config(redis_url))
    service.start()
    assert value(scrape(service), "telemetry_late_slots_total", scope="process") == 0
    for _ in range(3):  # as threads late for their slots count them
        service.metrics.count(Counter.LATE_SLOTS)
    assert value(scrape(service), "telemetry_late_slots_total", scope="process") == 3
    assert family_types(service)["telemetry_late_slots"] == "counter"
    assert service.stop().counts["late_slots"] == 3


def test_operations_md_lists_every_gauge_and_histogram_served() -> None:
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    block = text.split("<!-- metrics:start -->")[1].split("<!-- metrics:end -->")[0]
    documented = re.findall(r"^\| `(telemetry_[a-z_]+)` \|", block, re.MULTILINE)
    assert len(documented) == len(set(documented))
    assert set(documented) == (
        {exposed_name(g) for g in METRICS_GAUGES}
        | {exposed_name(h) for h in Histogram}
        | {f"{SEND_ERRORS}_total"}
        | {f"{name}_total" for name in SERVER_COUNTERS}
    )


def test_a_reading_of_redis_is_reused_for_cache_seconds(
    redis_url: str, make_service: MakeService
) -> None:
    config = metrics_config(
        redis_url, metrics={"cache_seconds": 300.0}, reporter={"linger_ms": 120_000}
    )
    service = make_service(config)
    service.start()
    reads: list[int] = []
    real = service.store.counter_totals
    service.store.counter_totals = lambda *a: reads.append(1) or real(*a)  # type: ignore
    before = scrape(service)
    store(Scripts(service.store), service.schema, "game", numbered("game", 10))
    after = scrape(service)
    assert len(reads) <= 1  # the first scrape may have read, the second did not
    assert after == before  # the new events are not in the cached reading
    assert value(after, "telemetry_redis_up") == 1


def test_readyz_follows_redis(own_server: Server, make_service: MakeService) -> None:
    config = metrics_config(
        own_server.url,
        redis={"socket_timeout_seconds": 0.2, "connect_timeout_seconds": 0.2},
        reporter={"shard_lease_seconds": 1.0},
    )
    service = make_service(config)
    assert get_or_none(service) is None  # not serving before start()
    service.start()
    wait_until(lambda: get(service, "/readyz").status_code == 200, what="ready")
    assert get(service, "/readyz").json()["owned_shards"] == 4

    own_server.stop()
    answer = wait_until(lambda: not_ready(service), what="not ready without Redis")
    assert answer["ready"] is False
    assert "redis: BackendUnavailable" in answer["reasons"]  # what, not where
    assert str(own_server.port) not in str(answer)
    assert get(service, "/healthz").status_code == 200  # alive all the same
    samples = scrape(service)
    assert value(samples, "telemetry_redis_up") == 0
    assert not named(samples, "telemetry_stored_total")  # no cluster series without Redis

    own_server.start()
    wait_until(
        lambda: get(service, "/readyz").status_code == 200,
        timeout=30,
        what="ready again once Redis is back",
    )
    service.stop()
    assert get_or_none(service) is None  # the server stopped with the service


def test_readyz_names_the_redis_error_when_the_operator_asks(
    own_server: Server, make_service: MakeService
) -> None:
    config = metrics_config(
        own_server.url,
        redis={"socket_timeout_seconds": 0.2, "connect_timeout_seconds": 0.2},
        metrics={"error_details": True},
    )
    service = make_service(config)
    service.start()
    own_server.stop()
    try:
        answer = wait_until(lambda: not_ready(service), what="not ready without Redis")
        assert any(
            reason.startswith("redis: BackendUnavailable: ") and str(own_server.port) in reason
            for reason in answer["reasons"]
        )
    finally:
        own_server.start()


def test_the_server_counts_what_it_sheds_on_metrics(
    redis_url: str, make_service: MakeService
) -> None:
    service = make_service(metrics_config(redis_url))
    service.start()
    host, port = listen_address(service.config.metrics.listen)
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 414 ")
    samples = scrape(service)
    assert value(samples, "telemetry_metrics_connections_dropped_total", reason="bad_request") == 1
    assert value(samples, "telemetry_metrics_connections_dropped_total", reason="over_cap") == 0
    assert family_types(service)["telemetry_metrics_accept_errors"] == "counter"
    answer = get(service, "/" + "b" * 2000)
    assert answer.status_code == 404 and "bbbb" not in answer.text  # the path is not echoed


def not_ready(service: ReporterService) -> dict[str, Any] | None:
    answer = get(service, "/readyz")
    if answer.status_code != 503:
        return None
    assert answer.headers["content-type"] == "application/json"
    body: dict[str, Any] = answer.json()
    return body


def get_or_none(service: ReporterService) -> httpx.Response | None:
    """/healthz at the configured address, or None if nothing listens there."""
    host, port = listen_address(service.config.metrics.listen)
    try:
        return httpx.get(f"http://{host}:{port}/healthz", timeout=5)
    except httpx.ConnectError:
        return None


def test_unknown_paths_are_404_and_the_server_binds_only_the_address_set(
    redis_url: str, make_service: MakeService
) -> None:
    service = make_service(metrics_config(redis_url))
    service.start()
    assert get(service, "/nothing").status_code == 404
    host, port = listen_address(service.config.metrics.listen)
    assert service.endpoint is not None
    assert service.endpoint.url == f"http://{host}:{port}"
    # On Linux all of 127/8 reaches this host: a server bound to every interface would
    # answer at 127.0.0.2 too.
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.2:{port}/healthz", timeout=5)


def test_an_address_in_use_stops_start_before_any_work(
    redis_url: str, make_service: MakeService
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        service = make_service(metrics_config(redis_url, metrics={"listen": f"127.0.0.1:{port}"}))
        with pytest.raises(ReporterError, match=rf"\[metrics\] listen: .*127\.0\.0\.1:{port}"):
            service.start()
    assert not service.ownership.owned()  # no shard was taken


def test_no_endpoint_by_default(redis_url: str, make_service: MakeService) -> None:
    service = make_service(make_config(redis_url))
    assert ReporterConfig().metrics.listen == ""
    assert service.endpoint is None
    assert "metrics: off" in service.describe()


@pytest.mark.parametrize(
    "listen",
    [
        "9464",
        ":9464",
        "localhost",
        "127.0.0.1:",
        "::1:9464",
        "127.0.0.1:99999",
        "127.0.0.1:http",
        "host name:1",
        "http://127.0.0.1:9464",
    ],
)
def test_a_bad_listen_address_names_the_key(tmp_path: Path, listen: str) -> None:
    path = write(tmp_path, f'[metrics]\nlisten = "{listen}"\n')
    with pytest.raises(ConfigError) as info:
        ReporterConfig.load(str(path), env={})
    assert f'{path}: [metrics] listen: expected "host:port"' in str(info.value)
    assert repr(listen) in str(info.value)


@pytest.mark.parametrize(
    ("listen", "address"),
    [
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        ("[::1]:9464", ("::1", 9464)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
        ("metrics.internal:9000", ("metrics.internal", 9000)),
    ],
)
def test_listen_addresses(tmp_path: Path, listen: str, address: tuple[str, int]) -> None:
    path = write(tmp_path, "")
    config = ReporterConfig.load(str(path), env={"TELEMETRY_METRICS_LISTEN": listen})
    assert listen_address(config.metrics.listen) == address


@pytest.fixture
def ipv6_loopback() -> Iterator[None]:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    yield


def test_an_ipv6_address_is_served(
    redis_url: str, make_service: MakeService, ipv6_loopback: None
) -> None:
    service = make_service(metrics_config(redis_url, metrics={"listen": "[::1]:0"}))
    service.start()
    assert service.endpoint is not None and service.endpoint.url.startswith("http://[::1]:")
    assert get(service, "/healthz").json() == {"alive": True}


def test_without_prometheus_client_only_the_endpoint_needs_it(redis_url: str) -> None:
    code = f"""
import sys
sys.modules["prometheus_client"] = None  # as if it were not installed
from reporter._service.service import ReporterService
from tests.support.entries import make_config
print(ReporterService(make_config({redis_url!r})).endpoint)
try:
    ReporterService(make_config({redis_url!r}, metrics={{"listen": "127.0.0.1:0"}}))
except ImportError as exc:
    print(exc)
"""
    lines = run_python(code).splitlines()
    assert lines[0] == "None"
    assert "pip install prometheus-client" in lines[1]
