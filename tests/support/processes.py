"""``telemetry-reporter`` as an operator runs it: ``python -m reporter ...`` in a child process
of the checkout, with no ``TELEMETRY_*`` variable of the caller's.  A command run to its end
(``reporter_cli``), ``run`` started with its log in a file and stopped by SIGTERM
(``start_run``, ``stop_run``), or a ``ReporterProcess`` the test signals and waits for.  And a
snippet of Python run in a fresh interpreter (``run_python``), for what only a new process
shows (what an import loads, what a missing package does)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from reporter._config import ReporterConfig
from tests.support.servers import env_without_telemetry
from tests.support.sources import ROOT

# Seconds a reporter may take beyond its grace period to exit (interpreter and log flush).
EXIT_MARGIN = 5.0


def child_env() -> dict[str, str]:
    return {**env_without_telemetry(), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


def run_python(code: str) -> str:
    """Run ``code`` with ``python -c`` from the checkout's root (so ``tests`` imports); its
    standard output, stripped.  Fails the test if the process does not exit 0."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def reporter_cli(
    *args: str, cwd: Path = ROOT, timeout: float = 60, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """One command run to its end; ``env`` adds to (or overrides) the child's environment."""
    return subprocess.run(
        [sys.executable, "-m", "reporter", *args],
        cwd=cwd,
        env={**child_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_run(
    config: Path, log: Path, *options: str, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``run --config CONFIG`` (after ``options``), its standard error into ``log``."""
    with open(log, "w", encoding="utf-8") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "reporter", "run", *options, "--config", str(config)],
            cwd=ROOT,
            env={**child_env(), **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def stop_run(reporter: subprocess.Popen[bytes]) -> int:
    """SIGTERM, and its exit status; killed if it has not exited in 30 s."""
    try:
        reporter.send_signal(signal.SIGTERM)
        return reporter.wait(timeout=30)
    finally:
        if reporter.poll() is None:
            reporter.kill()
            reporter.wait()


class ReporterProcess:
    """``run --config CONFIG`` with both its outputs in ``log_path``."""

    def __init__(self, config_path: Path, log_path: Path) -> None:
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "reporter", "run", "--config", str(config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env_without_telemetry(),
                cwd=ROOT,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"reporter still running after {timeout}s:\n{self.log()}"
            ) from None


Spawn = Callable[[ReporterConfig], ReporterProcess]
