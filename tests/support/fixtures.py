"""The fixtures every test folder sees (a pytest plugin: ``tests/conftest.py`` loads it).

- Servers: ``server`` (each kind found, shared by the session) and ``redis_url``/``client``/
  ``r`` (that server, flushed for the test); ``own_server`` and ``durable_server`` (private,
  the test may stop them); ``make_locked_server`` (private, each client must log in);
  ``cluster``, ``replicated_cluster`` (shared: no test kills their nodes),
  ``own_replicated_cluster`` and ``sentinel_group`` (private).
- The SDK: ``make_collector``, collectors closed when the test ends.
- The reporter: ``make_service`` and ``start_service``, services stopped when the test ends;
  ``make_endpoint`` and ``endpoint``, local ingest endpoints; ``scripts``, the project's Lua
  scripts on the flushed shared server.
- Prometheus: ``promtool`` and ``prometheus_binary`` (skipped without them, failed under CI).
- The process: ``no_telemetry_env`` (no ``TELEMETRY_*`` variable of the caller's reaches the
  test) and ``restore_logging`` (for tests that run the command line in-process). A module
  that wants one for every test says ``pytestmark = pytest.mark.usefixtures(...)``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from collector import Collector
from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint, Responder
from reporter._logging import QUIET_LOGGERS, REDACT
from reporter._service.service import ReporterService
from tests.support import prometheus
from tests.support.polling import wait_until
from tests.support.scriptcalls import Scripts, store_on
from tests.support.servers import Cluster, SentinelGroup, Server, default_binary, server_binaries

try:
    BINARIES = server_binaries()
except RuntimeError as exc:  # fail loudly: a missing server must not skip the suite
    raise pytest.UsageError(str(exc)) from None

# Settings that keep a test quick when Redis is stopped on purpose.
FAST_FAILURE: dict[str, Any] = {
    "socket_timeout_seconds": 0.2,
    "connect_timeout_seconds": 0.2,
    "retry_max_delay_ms": 20,
    "flush_interval_ms": 5,
}

MakeCollector = Callable[..., Collector]
MakeService = Callable[..., ReporterService]
StartService = Callable[[ReporterConfig], ReporterService]
MakeEndpoint = Callable[..., LocalEndpoint]
MakeLockedServer = Callable[[str], Server]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: takes seconds (builds a wheel); still part of every run"
    )


# -- servers --------------------------------------------------------------------------------------


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
def client(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the flushed shared server, closed when the test ends."""
    c = redis.Redis.from_url(redis_url, socket_timeout=5)
    yield c
    c.close()


@pytest.fixture
def r(client: redis.Redis) -> redis.Redis:
    """``client``, by its short name."""
    return client


@pytest.fixture
def own_server() -> Iterator[Server]:
    """A private server the test may stop and restart."""
    srv = Server(default_binary()).start()
    yield srv
    srv.cleanup()


@pytest.fixture
def own_client(own_server: Server) -> Iterator[redis.Redis]:
    """A client of the private server, closed when the test ends."""
    c = own_server.client()
    yield c
    c.close()


@pytest.fixture
def durable_server() -> Iterator[Server]:
    """A private server that writes every change to its append-only file before answering
    (``appendfsync always``), so ``stop()`` (SIGKILL) and ``start()`` lose nothing."""
    srv = Server(default_binary(), extra=["--appendonly", "yes", "--appendfsync", "always"])
    srv.start()
    yield srv
    srv.cleanup()


@pytest.fixture
def make_locked_server() -> Iterator[MakeLockedServer]:
    """Start private servers every client must log in to: user ``reporter`` with the password
    given may do anything, the default user is off."""
    made: list[Server] = []

    def make(password: str) -> Server:
        acl = ["--user", "reporter", "on", f">{password}", "~*", "&*", "+@all"]
        srv = Server(default_binary(), extra=acl).start()
        made.append(srv)
        with srv.client() as admin:
            admin.acl_setuser("default", enabled=False)
        return srv

    yield make
    for srv in made:
        srv.cleanup()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    c = Cluster(default_binary()).start()
    yield c
    c.cleanup()


@pytest.fixture(scope="session")
def replicated_cluster() -> Iterator[Cluster]:
    """3 primaries with a replica each, shared by the session: tests must not kill nodes."""
    c = Cluster(default_binary(), replicas=1).start()
    yield c
    c.cleanup()


@pytest.fixture
def own_replicated_cluster() -> Iterator[Cluster]:
    """3 primaries with a replica each, for a test that kills and restarts nodes."""
    c = Cluster(default_binary(), replicas=1).start()
    yield c
    c.cleanup()


@pytest.fixture
def sentinel_group() -> Iterator[SentinelGroup]:
    """A primary, one replica and three sentinels of redis-server (``--sentinel``) that ask
    for a password (``group.password``), private to the test: it may kill the primary."""
    group = SentinelGroup(default_binary(), password="sentinel-test-secret").start()
    yield group
    group.cleanup()


# -- the SDK --------------------------------------------------------------------------------------


@pytest.fixture
def make_collector() -> Iterator[MakeCollector]:
    """Build collectors that are closed (quickly) when the test ends, whatever happened."""
    made: list[Collector] = []

    def make(**settings: Any) -> Collector:
        c = Collector(**settings)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close(timeout=1.0)


# -- the reporter ---------------------------------------------------------------------------------


@pytest.fixture
def make_service() -> Iterator[MakeService]:
    """Build services (``start=True``: started) that are stopped without grace, their stores
    closed, when the test ends."""
    made: list[ReporterService] = []

    def make(
        config: ReporterConfig, *, client: Any = None, start: bool = False, **kwargs: Any
    ) -> ReporterService:
        """``client``: a redis-py client of the test's to run the service's store on."""
        if client is not None:
            kwargs["store"] = store_on(client, config)
        service = ReporterService(config, **kwargs)
        made.append(service)
        if start:
            service.start()
        return service

    before = set(threading.enumerate())
    yield make
    for service in made:
        if not service.stop_event.is_set():
            service.stop(grace=0)
        service.store.close()
    # stop() joins the pools: no sweep may still be running to reach into the next test's
    # keys (the shared server is flushed, not replaced) or log after its server died
    wait_until(
        lambda: (
            not [
                t
                for t in threading.enumerate()
                if t not in before and t.name.startswith("ThreadPoolExecutor")
            ]
        ),
        what="the stopped services' pool threads to end",
    )


@pytest.fixture
def start_service(make_service: MakeService) -> StartService:
    """``make_service``, the service started."""
    return lambda config: make_service(config, start=True)


@pytest.fixture
def make_endpoint() -> Iterator[MakeEndpoint]:
    """Start LocalEndpoints on 127.0.0.1; stopped (and any slow answer woken) at teardown."""
    made: list[LocalEndpoint] = []

    def make(
        respond: Responder | None = None, port: int = 0, max_body_bytes: int = 0
    ) -> LocalEndpoint:
        endpoint = LocalEndpoint(respond, port=port, max_body_bytes=max_body_bytes).start()
        made.append(endpoint)
        return endpoint

    yield make
    for endpoint in made:
        release = getattr(endpoint.respond, "release", None)
        if isinstance(release, threading.Event):  # a scripted answer asleep: wake it
            release.set()
        endpoint.stop()


@pytest.fixture
def endpoint(make_endpoint: MakeEndpoint) -> LocalEndpoint:
    """A local endpoint that accepts everything."""
    return make_endpoint()


@pytest.fixture
def scripts(client: redis.Redis) -> Scripts:
    """The project's scripts on the flushed shared server."""
    return Scripts(client)


# -- the process ----------------------------------------------------------------------------------


@pytest.fixture
def no_telemetry_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No ``TELEMETRY_*`` variable of the environment the tests run in reaches the test."""
    for name in [n for n in os.environ if n.startswith("TELEMETRY_")]:
        monkeypatch.delenv(name)
    return monkeypatch


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """For tests that run the command line in-process: ``main()`` installs a handler on the
    root logger and sets its level, as a command should; both are put back afterwards (and
    the quiet loggers' levels, and the redacted secrets), so later tests neither log at debug
    level nor into a capture stream that has been closed."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quiet = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    root.setLevel(level)
    for name, old in quiet.items():
        logging.getLogger(name).setLevel(old)
    REDACT.clear()


# -- Prometheus -----------------------------------------------------------------------------------


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
