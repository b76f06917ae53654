"""The module-level API: ``collect``, ``flush``, ``close``, ``stats`` and ``set_on_error`` on the
default collector, which only ``collect()`` builds (from the config file and environment)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator

import pytest
import redis

import collector
from collector import EventsDropped, TelemetryError
from collector import _default as default_module
from collector.counters import SDK, SDK_GAUGES, Counter
from collector.store import KeySchema
from tests.support.stored import queue_events

PREFIX = "mod"
SCHEMA = KeySchema(PREFIX, 16)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No default collector and no callback yet, no TELEMETRY_* variable from outside; the
    default collector the test builds is closed at the end."""
    monkeypatch.setattr(default_module, "_default", None)
    monkeypatch.setattr(default_module, "_on_error", None)
    for name in [n for n in os.environ if n.startswith("TELEMETRY_")]:
        monkeypatch.delenv(name)
    yield monkeypatch
    built = default_module._default
    if built is not None:
        built.close(timeout=1.0)


def test_before_the_first_collect_nothing_is_built(fresh: pytest.MonkeyPatch) -> None:
    assert collector.stats() == {str(name): 0 for name in (*SDK, *SDK_GAUGES)}
    assert collector.flush(timeout=0) is True
    collector.close(timeout=0)
    assert default_module._default is None


def test_module_level_functions_act_on_the_default_collector(
    fresh: pytest.MonkeyPatch, redis_url: str, r: redis.Redis
) -> None:
    fresh.setenv("TELEMETRY_REDIS_URL", redis_url)
    fresh.setenv("TELEMETRY_REDIS_KEY_PREFIX", PREFIX)
    fresh.setenv("TELEMETRY_BUFFER_MAX_EVENT_BYTES", "64")
    told: list[tuple[TelemetryError, int, int]] = []
    collector.set_on_error(lambda e, n: told.append((e, n, threading.get_ident())))
    for i in range(3):
        collector.collect("g", {"seq": i})
    collector.collect("g", {"blob": "x" * 100})
    collector.collect("g", {"seq": 9}, dedup_key="seq 2")
    collector.collect("g", {"seq": 10}, "seq 2")  # merged into the one before
    assert collector.flush(timeout=10)
    assert [e["seq"] for e in queue_events(r, SCHEMA, "g")] == [0, 1, 2, 9]
    stats = collector.stats()
    assert (stats["accepted"], stats["stored"], stats["dropped_too_large"]) == (5, 5, 1)
    assert stats["merged"] == 1
    [(error, count, thread)] = told  # the callback set before the collector was built
    assert isinstance(error, EventsDropped) and error.reason == Counter.DROPPED_TOO_LARGE
    assert count == 1 and thread != threading.get_ident()

    collector.close()
    collector.collect("g", {"seq": 3})  # after close: dropped and counted, no error
    assert collector.stats()["dropped_closed"] == 1
    assert collector.flush(timeout=0) is True  # closed with nothing left
    assert len(queue_events(r, SCHEMA, "g")) == 4


def test_set_on_error_reaches_a_default_collector_already_built(
    fresh: pytest.MonkeyPatch, redis_url: str
) -> None:
    fresh.setenv("TELEMETRY_REDIS_URL", redis_url)
    fresh.setenv("TELEMETRY_REDIS_KEY_PREFIX", PREFIX)
    fresh.setenv("TELEMETRY_BUFFER_MAX_EVENT_BYTES", "64")
    collector.collect("g", {"seq": 0})
    told: list[int] = []
    collector.set_on_error(lambda e, n: told.append(n))
    collector.collect("g", {"blob": "x" * 100})
    assert collector.flush(timeout=10)
    assert told == [1]
    collector.set_on_error(None)
    collector.collect("g", {"blob": "x" * 100})
    assert collector.flush(timeout=10)
    assert told == [1]
    with pytest.raises(TypeError, match="on_error must be a callable"):
        collector.set_on_error("print")  # type: ignore[arg-type]


def test_the_environment_disables_the_module_level_collector(fresh: pytest.MonkeyPatch) -> None:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        sock.setblocking(False)
        fresh.setenv("TELEMETRY_REDIS_URL", f"redis://127.0.0.1:{sock.getsockname()[1]}/0")
        fresh.setenv("TELEMETRY_COLLECTOR_DISABLED", "true")
        collector.collect("g", {"seq": 1})
        assert collector.flush(timeout=10)
        collector.close()
        stats = collector.stats()
        assert (stats["accepted"], stats["dropped_disabled"], stats["stored"]) == (1, 1, 0)
        with pytest.raises(BlockingIOError):
            sock.accept()  # nothing ever tried to connect
