"""Fixtures of the ingest tests: an ``IngestService`` on a free loopback port, writing to the
test's Redis (``tests/conftest.py``), stopped at teardown whatever happened."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reporter._config import ReporterConfig
from reporter._ingest.service import IngestService
from tests.support.scenarios import make_config

TOKEN = "ingest-test-token-0123456789abcdef"
StartIngest = Callable[..., IngestService]


def ingest_config(
    redis_url: str, token_file: str = "", **sections: dict[str, Any]
) -> ReporterConfig:
    """The delivery tests' fast settings, with the ingest on any free loopback port."""
    ingest = {"listen": "127.0.0.1:0", "token_file": token_file, **sections.pop("ingest", {})}
    return make_config(redis_url, ingest=ingest, **sections)


@pytest.fixture
def token_file(tmp_path: Path) -> str:
    path = tmp_path / "ingest-token"
    path.write_text(TOKEN + "\n")
    return str(path)


@pytest.fixture
def start_ingest() -> Iterator[StartIngest]:
    started: list[IngestService] = []

    def start(config: ReporterConfig) -> IngestService:
        service = IngestService(config)
        service.start()
        started.append(service)
        return service

    yield start
    for service in started:
        service.stop(timeout=1.0)
