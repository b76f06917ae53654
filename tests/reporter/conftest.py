"""Fixtures of the reporter tests; the servers come from ``tests/conftest.py``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint
from reporter._service.service import ReporterService
from tests.reporter.helpers import wait_until
from tests.scriptcalls import Scripts, store_on
from tests.servers import Server

MakeService = Callable[..., ReporterService]


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the flushed shared server, closed when the test ends."""
    c = redis.Redis.from_url(redis_url, socket_timeout=5)
    yield c
    c.close()


@pytest.fixture
def own_client(own_server: Server) -> Iterator[redis.Redis]:
    """A client of the private server, closed when the test ends."""
    c = own_server.client()
    yield c
    c.close()


@pytest.fixture
def endpoint() -> Iterator[LocalEndpoint]:
    with LocalEndpoint() as ep:
        yield ep


@pytest.fixture
def make_service() -> Iterator[MakeService]:
    """Build services that are stopped (without grace) when the test ends."""
    made: list[ReporterService] = []

    def make(config: ReporterConfig, *, client: Any = None, **kwargs: Any) -> ReporterService:
        """``client``: a redis-py client of the test's to run the service's store on."""
        if client is not None:
            kwargs["store"] = store_on(client, config)
        service = ReporterService(config, **kwargs)
        made.append(service)
        return service

    before = set(threading.enumerate())
    yield make
    for service in made:
        if not service.stop_event.is_set():
            service.stop(grace=0)
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
def scripts(client: redis.Redis) -> Scripts:
    """The project's scripts on the flushed shared server."""
    return Scripts(client)
