"""The runner: one APScheduler job per worker, timezone-aware, never overlapping itself,
run again at once while it leaves work, backing off while it fails; shutdown joins the
pools, so ``telemetry-reporter run`` ends without ``os._exit``."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from apscheduler.events import EVENT_JOB_EXECUTED, JobExecutionEvent

from reporter._constants import FAILING_PAUSE_SECONDS
from reporter._service.scheduling import Runner
from tests.support.entries import make_config
from tests.support.polling import wait_until
from tests.support.servers import env_without_telemetry

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def runner() -> Iterator[Runner]:
    stop = threading.Event()
    r = Runner({"default": 2, "control": 1}, stop)
    yield r
    stop.set()
    r.shutdown()


def test_a_job_that_leaves_work_runs_again_without_waiting(runner: Runner) -> None:
    runs: list[float] = []

    def work() -> bool:
        runs.append(time.monotonic())
        return len(runs) < 300

    runner.every("busy", work, 3600.0, "default")  # its interval would be an hour
    runner.start()
    wait_until(lambda: len(runs) == 300, what="300 runs without waiting an interval")


def test_a_quick_job_keeps_its_interval_and_one_job(runner: Runner) -> None:
    runs: list[float] = []

    def work() -> bool:
        runs.append(time.monotonic())
        return False

    runner.every("quick", work, 0.01, "default")
    runner.start()
    wait_until(lambda: len(runs) >= 20, what="20 runs of a job that ends at once")
    [job] = runner.scheduler.get_jobs()
    assert job.id == "quick" and job.max_instances == 1
    assert job.next_run_time.tzinfo is not None


def test_a_slow_job_never_overlaps_and_nothing_is_skipped(
    runner: Runner, caplog: pytest.LogCaptureFixture
) -> None:
    running = threading.Lock()
    overlaps: list[int] = []
    runs: list[int] = []

    def work() -> bool:
        if not running.acquire(blocking=False):
            overlaps.append(1)
            return False
        try:
            time.sleep(0.05)  # a slow POST, far longer than the interval
            runs.append(1)
            return False
        finally:
            running.release()

    caplog.set_level(logging.DEBUG, logger="apscheduler")
    runner.every("slow", work, 0.001, "default")
    runner.start()
    wait_until(lambda: len(runs) >= 10, what="10 slow runs")
    assert overlaps == []
    assert not [
        r
        for r in caplog.records
        if "maximum number of running instances" in r.getMessage() or "was missed" in r.getMessage()
    ]


def test_a_failing_job_backs_off_doubling_up_to_a_cap(runner: Runner) -> None:
    runner.every("failing", lambda: False, 0.1, "default")
    job = runner._jobs["failing"]

    def fail_once() -> float:
        before = datetime.now(UTC)
        runner._after_run(
            JobExecutionEvent(EVENT_JOB_EXECUTED, "failing", "default", before, retval=None)
        )
        assert job.next_at is not None
        return (job.next_at - before).total_seconds()

    delays = [fail_once() for _ in range(8)]
    expected = [min(0.1 * 2**n, FAILING_PAUSE_SECONDS) for n in range(1, 9)]
    assert delays == pytest.approx(expected, abs=0.05)
    runner._after_run(
        JobExecutionEvent(EVENT_JOB_EXECUTED, "failing", "default", datetime.now(UTC), retval=False)
    )
    assert job.failures == 0


def test_shutdown_waits_for_the_running_job_and_joins_the_pools() -> None:
    stop = threading.Event()
    runner = Runner({"default": 1}, stop)
    started, finished = threading.Event(), threading.Event()

    def work() -> bool:
        started.set()
        time.sleep(0.3)
        finished.set()
        return False

    before = set(threading.enumerate())
    runner.every("one", work, 60.0, "default")
    runner.start()
    assert started.wait(10)
    stop.set()
    runner.shutdown()
    assert finished.is_set()
    assert not [
        t
        for t in threading.enumerate()
        if t not in before and t.name.startswith("ThreadPoolExecutor")
    ]


def test_the_run_command_exits_normally(redis_url: str, tmp_path: Path) -> None:
    """SIGTERM: the process ends through the interpreter's normal exit (atexit runs), which
    os._exit would skip."""
    config = make_config(redis_url, shards=2, reporter={"grace_seconds": 1.0})
    path = tmp_path / "telemetry.toml"
    path.write_text(
        f'[redis]\nurl = "{config.redis.url}"\nshards = 2\n'
        "[reporter]\ngrace_seconds = 1.0\n"
        '[sink]\nurl = "http://127.0.0.1:9/ingest"\n',
        encoding="utf-8",
    )
    code = (
        "import atexit, sys; atexit.register(lambda: print('exited normally', flush=True))\n"
        "from reporter._commands.cli import main\n"
        f"sys.exit(main(['run', '--config', {str(path)!r}]))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env_without_telemetry(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(
            lambda: proc.poll() is not None or _holds_shards(redis_url),
            timeout=30,
            what="the reporter to take its shards",
        )
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    assert "stopped:" in out
    assert "exited normally" in out


def _holds_shards(redis_url: str) -> bool:
    import redis

    with redis.Redis.from_url(redis_url) as client:
        return bool(client.exists("{telemetry:0}:owner"))


def test_shutdown_leaves_a_blocked_run_behind_at_its_deadline_and_names_it() -> None:
    stop, release = threading.Event(), threading.Event()
    runner = Runner({"default": 1}, stop)
    started = threading.Event()

    def blocked() -> bool:
        started.set()
        release.wait(30)  # a call to a peer that does not answer
        return False

    runner.every("stuck", blocked, 60.0, "default")
    runner.start()
    assert started.wait(10)
    stop.set()
    try:
        assert runner.shutdown(deadline=time.monotonic() + 0.2) == ["stuck"]
        assert not release.is_set()  # it returned without the run
    finally:
        release.set()


def test_a_run_that_starts_after_the_stop_returns_without_working() -> None:
    stop = threading.Event()
    runner = Runner({"default": 1}, stop)
    runs: list[int] = []
    runner.every("late", lambda: bool(runs.append(1)), 60.0, "default")
    stop.set()
    assert runner._run("late") is False  # what the pool would call for a run due now
    assert runs == []
