from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests import prometheus
from tests.servers import Cluster, SentinelGroup, Server, server_binaries

try:
    BINARIES = server_binaries()
except RuntimeError as exc:  # fail loudly: a missing server must not skip the suite
    raise pytest.UsageError(str(exc)) from None


@pytest.fixture(scope="session", params=sorted(BINARIES))
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """A server of each kind found (redis-server, valkey-server), shared by the session."""
    srv = Server(BINARIES[request.param]).start()
    yield srv
    srv.cleanup()


@pytest.fixture
def redis_url(server: Server) -> Iterator[str]:
    """The shared server, emptied before the test."""
    if server.proc is None:
        server.start()
    server.client().flushall()
    yield server.url


@pytest.fixture
def r(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url, socket_timeout=5)


@pytest.fixture
def own_server() -> Iterator[Server]:
    """A private server the test may stop and restart."""
    srv = Server(BINARIES.get("redis") or BINARIES["valkey"]).start()
    yield srv
    srv.cleanup()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    c = Cluster(BINARIES.get("redis") or BINARIES["valkey"]).start()
    yield c
    c.cleanup()


@pytest.fixture
def sentinel_group() -> Iterator[SentinelGroup]:
    """A primary, one replica and three sentinels of redis-server (``--sentinel``) that ask
    for a password (``group.password``), private to the test: it may kill the primary."""
    group = SentinelGroup(
        BINARIES.get("redis") or BINARIES["valkey"], password="sentinel-test-secret"
    ).start()
    yield group
    group.cleanup()


@pytest.fixture(scope="session")
def replicated_cluster() -> Iterator[Cluster]:
    """3 primaries with a replica each, shared by the session: tests must not kill nodes."""
    c = Cluster(BINARIES.get("redis") or BINARIES["valkey"], replicas=1).start()
    yield c
    c.cleanup()


@pytest.fixture
def own_replicated_cluster() -> Iterator[Cluster]:
    """3 primaries with a replica each, for a test that kills and restarts nodes."""
    c = Cluster(BINARIES.get("redis") or BINARIES["valkey"], replicas=1).start()
    yield c
    c.cleanup()


@pytest.fixture(scope="session")
def promtool() -> str:
    """Prometheus's promtool: the test skips without it (fails under CI)."""
    return prometheus.tool("promtool")


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    """The prometheus server binary: the test skips without it (fails under CI)."""
    return prometheus.tool("prometheus")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say it loudly when the tests that need Prometheus did not run."""
    for outcome, verb in (("skipped", "SKIPPED"), ("error", "FAILED")):
        missed = [
            r
            for r in terminalreporter.stats.get(outcome, [])
            if prometheus.NEEDS_PROMETHEUS in str(getattr(r, "longrepr", ""))
        ]
        if missed:
            tests = "1 test that needs" if len(missed) == 1 else f"{len(missed)} tests that need"
            terminalreporter.write_sep(
                "=",
                f"{tests} Prometheus {verb}: promtool or "
                f"prometheus is not on PATH; {prometheus.HOW_TO_RUN}",
                yellow=True,
                bold=True,
            )
