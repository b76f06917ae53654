"""Fixtures of the whole-service scenarios alone (the shared ones are in
``tests/support/fixtures.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reporter._config import ReporterConfig
from tests.support.processes import ReporterProcess, Spawn
from tests.support.scenarios import config_toml


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """Start reporter processes; any still running at teardown is killed (by its pid)."""
    started: list[ReporterProcess] = []

    def start(config: ReporterConfig) -> ReporterProcess:
        n = len(started)
        path = tmp_path / f"reporter-{n}.toml"
        path.write_text(config_toml(config))
        process = ReporterProcess(path, tmp_path / f"reporter-{n}.log")
        started.append(process)
        return process

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.proc.kill()
            process.proc.wait(10)
