"""Fixtures of the ingest tests: an ``IngestService`` on a free loopback port, writing to the
test's Redis (``tests/conftest.py``), stopped at teardown whatever happened."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reporter._config import ReporterConfig
from reporter._ingest.service import IngestService
from tests.support.ingest_requests import TOKEN, StartIngest


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
