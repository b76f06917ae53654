"""Fixtures of the delivery tests; the servers come from ``tests/conftest.py``."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint, Responder
from reporter._service.service import ReporterService
from tests.delivery.helpers import Script
from tests.servers import Server, server_binaries

MakeEndpoint = Callable[..., LocalEndpoint]
StartService = Callable[[ReporterConfig], ReporterService]


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
        if isinstance(endpoint.respond, Script):
            endpoint.respond.release.set()
        endpoint.stop()


@pytest.fixture
def start_service() -> Iterator[StartService]:
    """Start ReporterServices; stopped without grace at teardown if the test did not."""
    started: list[ReporterService] = []

    def start(config: ReporterConfig) -> ReporterService:
        service = ReporterService(config)
        service.start()
        started.append(service)
        return service

    yield start
    for service in started:
        if not service.stop_event.is_set():
            service.stop(grace=0)
        service.store.close()


@pytest.fixture
def durable_server() -> Iterator[Server]:
    """A private server that writes every change to its append-only file before answering
    (``appendfsync always``), so ``stop()`` (SIGKILL) and ``start()`` lose nothing."""
    binaries = server_binaries()
    srv = Server(
        binaries.get("redis") or binaries["valkey"],
        extra=["--appendonly", "yes", "--appendfsync", "always"],
    ).start()
    yield srv
    srv.cleanup()
