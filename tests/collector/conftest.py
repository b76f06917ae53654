"""Fixtures of the SDK's tests alone (the shared ones are in ``tests/support/fixtures.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from collector import Collector
from tests.support.fixtures import MakeCollector


@pytest.fixture
def make(
    request: pytest.FixtureRequest, redis_url: str, make_collector: MakeCollector
) -> MakeCollector:
    """Collectors on the shared (flushed) server, with the test module's ``PREFIX`` as their
    key prefix unless told otherwise."""

    def build(**settings: Any) -> Collector:
        settings.setdefault("url", redis_url)
        settings.setdefault("key_prefix", request.module.PREFIX)
        return make_collector(**settings)

    return build
