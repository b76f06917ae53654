"""Fork safety, the module-level collect() and the flush at interpreter exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Callable, Iterator

import pytest
import redis

import collector
import collector._default
from collector import Collector
from collector.store import KeySchema
from tests.support.fixtures import FAST_FAILURE, MakeCollector
from tests.support.polling import wait_until
from tests.support.servers import Server, env_without_telemetry
from tests.support.stored import queue_events, seqs

PREFIX = "fork"
SCHEMA = KeySchema(PREFIX, 16)
DEFAULT_SCHEMA = KeySchema("telemetry", 16)


def in_child(work: Callable[[], bool], timeout: float = 30.0) -> int:
    """Run ``work`` in a forked child; return the child's exit status (0 when it returned True).

    A child that is still running after ``timeout`` seconds (a deadlock) is killed: -9.
    """
    with warnings.catch_warnings():
        # Python 3.12+ warns about fork() with threads running; that is the case under test.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            code = 0 if work() else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -signal.SIGKILL
        time.sleep(0.01)


def child_collects(c: Collector) -> Callable[[], bool]:
    def work() -> bool:
        if c.stats()["accepted"] != 0 or c.stats()["buffered"] != 0:
            return False  # the child must start empty
        for i in range(5):
            c.collect("child", {"seq": i})
        return c.flush(timeout=10) and c.stats()["stored"] == 5

    return work


def test_fork_with_events_waiting_to_be_flushed(
    make_collector: MakeCollector, redis_url: str, r: redis.Redis
) -> None:
    c = make_collector(url=redis_url, key_prefix=PREFIX, flush_interval_ms=60_000)
    for i in range(100):
        c.collect("parent", {"seq": i})
    assert c.stats()["buffered"] == 100

    assert in_child(child_collects(c)) == 0

    assert seqs(queue_events(r, SCHEMA, "child")) == list(range(5))
    assert queue_events(r, SCHEMA, "parent") == []  # the child did not send the parent's
    assert c.flush(timeout=10)
    assert seqs(queue_events(r, SCHEMA, "parent")) == list(range(100))
    assert c.stats()["stored"] == 100


def test_fork_while_redis_is_down(make_collector: MakeCollector, own_server: Server) -> None:
    own_server.stop()
    c = make_collector(url=own_server.url, key_prefix=PREFIX, **FAST_FAILURE)
    for i in range(100):
        c.collect("parent", {"seq": i})
    wait_until(lambda: c.stats()["backend_errors"] >= 1, what="a failed flush")

    own_server.start()
    assert in_child(child_collects(c)) == 0
    assert c.flush(timeout=20)

    client = own_server.client()
    assert seqs(queue_events(client, SCHEMA, "parent")) == list(range(100))
    assert seqs(queue_events(client, SCHEMA, "child")) == list(range(5))
    client.close()
    stats = c.stats()
    assert stats["stored"] == stats["accepted"] == 100


@pytest.mark.parametrize(
    "lock", ["_buffer._lock", "_tally._lock", "_flusher._lock", "_ratelog._lock"]
)
def test_fork_while_a_lock_is_held(
    make_collector: MakeCollector, redis_url: str, r: redis.Redis, lock: str
) -> None:
    """Another thread may hold any of the collector's locks at the fork; the child goes on."""
    c = make_collector(url=redis_url, key_prefix=PREFIX, max_event_bytes=64)
    c.collect("parent", {"seq": 0})
    owner, _, name = lock.rpartition(".")
    held = getattr(getattr(c, owner) if owner else c, name)

    def work() -> bool:
        c.collect("child", {"blob": "x" * 100})  # too large: logged, counted
        return child_collects(c)() and c.stats()["dropped_too_large"] == 1

    with held:
        status = in_child(work)
    assert status == 0
    assert seqs(queue_events(r, SCHEMA, "child")) == list(range(5))


@pytest.fixture
def default_collector(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> Iterator[str]:
    for name in list(os.environ):
        if name.startswith("TELEMETRY_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TELEMETRY_REDIS_URL", redis_url)
    monkeypatch.setattr(collector._default, "_default", None)
    yield redis_url
    made = collector._default._default
    if made is not None:
        made.close(timeout=1)


def test_module_level_collect_uses_the_environment(default_collector: str, r: redis.Redis) -> None:
    assert collector.collect("module-game", {"seq": 1}) == 0
    made = collector._default.default_collector()
    assert made is collector._default._default
    assert made.config.redis.url == default_collector
    assert made.flush(timeout=10)
    assert queue_events(r, DEFAULT_SCHEMA, "module-game") == [{"seq": 1}]

    with pytest.raises(ValueError, match="game name"):
        collector.collect("bad name", {})


def test_module_level_collect_after_fork(default_collector: str, r: redis.Redis) -> None:
    made = collector._default.default_collector()
    made.collect("parent", {"seq": 0})  # starts the flusher before the fork

    def work() -> bool:
        collector.collect("child", {"seq": 1})
        child_default = collector._default._default
        return child_default is made and made.flush(timeout=10)

    assert in_child(work) == 0
    assert made.flush(timeout=10)
    assert queue_events(r, DEFAULT_SCHEMA, "child") == [{"seq": 1}]
    assert queue_events(r, DEFAULT_SCHEMA, "parent") == [{"seq": 0}]


def run_python(code: str, env: dict[str, str], timeout: float = 60) -> str:
    """Run ``code`` in a fresh interpreter; return its stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_events_are_flushed_at_interpreter_exit(redis_url: str, r: redis.Redis) -> None:
    run_python(
        f"""
        from collector import Collector
        c = Collector(url={redis_url!r}, key_prefix={PREFIX!r}, flush_interval_ms=60_000)
        for i in range(50):
            c.collect("exit-game", {{"seq": i}})
        # no close(), no flush(): the atexit hook stores them
    """,
        env_without_telemetry(),
    )
    assert seqs(queue_events(r, SCHEMA, "exit-game")) == list(range(50))


def test_module_level_collect_is_flushed_at_exit(redis_url: str, r: redis.Redis) -> None:
    env = {**env_without_telemetry(), "TELEMETRY_REDIS_URL": redis_url}
    run_python(
        """
        import collector
        for i in range(20):
            collector.collect("exit-default", {"seq": i})
    """,
        env,
    )
    assert seqs(queue_events(r, DEFAULT_SCHEMA, "exit-default")) == list(range(20))


def test_exit_with_redis_down_does_not_hang(own_server: Server) -> None:
    own_server.stop()
    stderr = run_python(
        f"""
        from collector import Collector
        c = Collector(url={own_server.url!r}, close_timeout_seconds=0.5,
                      socket_timeout_seconds=0.2, connect_timeout_seconds=0.2)
        for i in range(20):
            c.collect("g", {{"seq": i}})
    """,
        env_without_telemetry(),
        timeout=30,
    )
    assert "closed with 20 events not stored" in stderr
