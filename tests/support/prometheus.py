"""Prometheus's own tools for the tests: ``promtool`` and a ``prometheus`` server, from PATH
(Debian's ``prometheus`` package: ``.ci/install-prometheus``, run by ``make test-deploy`` and
CI).

Where one is missing, the tests that need it skip and the run's summary counts them; under CI
(the ``CI`` environment variable set) they fail instead: a tool CI lacks must not hide the
rules and the dashboard going stale.  The server listens on a free 127.0.0.1 port and keeps
its data in a temporary folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.servers import free_port

# Every skip and CI failure of a missing tool starts with this; the summary counts them.
NEEDS_PROMETHEUS = "needs Prometheus"
HOW_TO_RUN = (
    "install Debian's prometheus package (`make test-deploy` does, then runs these "
    'tests; docs/operations.md, "Testing the alerts and the dashboard")'
)


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in {"", "0", "false", "no"}


def tool(name: str) -> str:
    """The path of ``name`` (promtool, prometheus) on PATH; where there is none, skip the
    test, or fail it under CI."""
    found = shutil.which(name)
    if found:
        return found
    message = f"{NEEDS_PROMETHEUS}: {name} is not on PATH; {HOW_TO_RUN}"
    if under_ci():
        pytest.fail(
            f"{message}. Under CI (CI={os.environ['CI']!r}) these tests must run, "
            "not skip: .ci/run installs the package",
            pytrace=False,
        )
    pytest.skip(message)


class Prometheus:
    """A Prometheus server scraping ``targets`` (host:port) every second, as job
    ``telemetry-reporter``."""

    JOB = "telemetry-reporter"

    def __init__(self, binary: str, targets: Sequence[str]) -> None:
        self.binary = binary
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="telemetry-test-prometheus-"))
        self.config = self.dir / "prometheus.yml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "global": {
                        "scrape_interval": "1s",
                        "scrape_timeout": "1s",
                        "evaluation_interval": "1s",
                    },
                    "scrape_configs": [
                        {"job_name": self.JOB, "static_configs": [{"targets": list(targets)}]}
                    ],
                }
            )
        )
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> Prometheus:
        with open(self.dir / "prometheus.log", "ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log()}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"prometheus was not ready on port {self.port}: {self.log()}")

    def log(self) -> str:
        path = self.dir / "prometheus.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of an HTTP API answer; a ValueError with Prometheus's error if it
        failed (a query that does not parse: ``bad_data``)."""
        answer = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=30)
        body = answer.json()
        if body.get("status") != "success":
            raise ValueError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query_range(
        self, expr: str, start: float, end: float, step: float = 1.0
    ) -> list[dict[str, Any]]:
        """The series ``expr`` gives over [start, end], as Grafana asks for a panel."""
        data = self.api(
            "query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step}"
        )
        assert data["resultType"] == "matrix"
        result: list[dict[str, Any]] = data["result"]
        return result

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
