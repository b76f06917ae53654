"""Fixtures of the collector tests; the servers come from ``tests/conftest.py``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from collector import Collector

# Settings that keep a test quick when Redis is stopped on purpose.
FAST_FAILURE: dict[str, Any] = {
    "socket_timeout_seconds": 0.2,
    "connect_timeout_seconds": 0.2,
    "retry_max_delay_ms": 20,
    "flush_interval_ms": 5,
}

MakeCollector = Callable[..., Collector]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: takes seconds (builds a wheel); still part of every run"
    )


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
