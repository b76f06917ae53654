"""Fixtures of the mock's tests: endpoints on 127.0.0.1 with fake clocks, one HTTP client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from reporter._demo.nppa_mock import NppaEndpoint
from tests.support.nppa_requests import (
    APP,
    BIZ,
    KEY,
    FakeClock,
    MakeEndpoint,
)


@pytest.fixture
def make() -> Iterator[MakeEndpoint]:
    made: list[NppaEndpoint] = []

    def make_(**kwargs: Any) -> NppaEndpoint:
        settings: dict[str, Any] = {
            "app_id": APP,
            "secret_key": KEY,
            "biz_ids": [BIZ],
            "clock": FakeClock(),
            **kwargs,
        }
        made.append(NppaEndpoint(**settings).start())
        return made[-1]

    yield make_
    for ep in made:
        ep.stop()


@pytest.fixture
def ep(make: MakeEndpoint) -> NppaEndpoint:
    return make()


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5, trust_env=False) as c:
        yield c
