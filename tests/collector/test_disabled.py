"""``disabled``: collect() validates and counts, and nothing ever connects."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from collector import Collector, EventsDropped, TelemetryError
from collector.counters import Counter
from tests.support.fixtures import MakeCollector
from tests.support.stored import balanced


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A port that accepts connections but is never served: any connection attempt by the
    SDK would be waiting in its backlog."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        sock.setblocking(False)
        yield sock


def url_of(sock: socket.socket) -> str:
    return f"redis://127.0.0.1:{sock.getsockname()[1]}/0"


def connection_attempted(sock: socket.socket) -> bool:
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def flusher_threads() -> int:
    return sum(t.name == "telemetry-collector-flusher" for t in threading.enumerate())


@pytest.mark.parametrize("mode", ["background", "sync"])
def test_a_disabled_collector_counts_and_never_connects(
    mode: str,
    listener: socket.socket,
    make_collector: MakeCollector,
    caplog: pytest.LogCaptureFixture,
) -> None:
    told: list[tuple[TelemetryError, int, int]] = []
    threads = flusher_threads()
    with caplog.at_level(logging.WARNING, logger="collector"):
        c = make_collector(
            url=url_of(listener),
            disabled=True,
            mode=mode,
            max_event_bytes=64,
            on_error=lambda e, n: told.append((e, n, threading.get_ident())),
        )
        for i in range(10):
            assert c.collect(f"g{i % 2}", {"seq": i}) == 0
        assert c.collect("g0", {"blob": "x" * 100}) == 0  # too large: refused, as usual
        assert c.flush(timeout=10)
        stats = c.stats()
        c.close()
    assert (stats["accepted"], stats["dropped_disabled"], stats["dropped_too_large"]) == (10, 10, 1)
    assert stats["stored"] == stats["buffered"] == stats["flushes"] == 0
    assert stats["backend_errors"] == 0
    assert balanced(stats)
    assert not connection_attempted(listener)
    assert flusher_threads() == threads  # no thread was started
    assert not [r for r in caplog.records if "store" in r.getMessage()]  # no write, no drop
    # No flusher to defer to: the refusal is reported at the call, in the caller's thread.
    [(error, count, thread)] = told
    assert isinstance(error, EventsDropped) and error.reason == Counter.DROPPED_TOO_LARGE
    assert (count, thread) == (1, threading.get_ident())


@pytest.mark.parametrize(
    ("game", "event", "error"),
    [
        (None, {}, TypeError),
        ("no spaces", {}, ValueError),
        ("g", ["not", "a", "mapping"], TypeError),
        ("g", {"s": {1, 2}}, TypeError),
    ],
)
def test_a_disabled_collector_still_refuses_bad_input(
    game: Any,
    event: Any,
    error: type[Exception],
    listener: socket.socket,
    make_collector: MakeCollector,
) -> None:
    c = make_collector(url=url_of(listener), disabled=True)
    with pytest.raises(error):
        c.collect(game, event)
    assert c.stats()["accepted"] == c.stats()["dropped_disabled"] == 0


def test_after_close_a_disabled_collector_counts_dropped_closed(listener: socket.socket) -> None:
    c = Collector(url=url_of(listener), disabled=True)
    c.collect("g", {"seq": 1})
    c.close()
    c.collect("g", {"seq": 2})
    stats = c.stats()
    assert (stats["accepted"], stats["dropped_disabled"], stats["dropped_closed"]) == (1, 1, 1)
    assert not connection_attempted(listener)


def test_the_environment_disables_a_collector_built_from_config(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TELEMETRY_CONFIG", raising=False)
    monkeypatch.setenv("TELEMETRY_REDIS_URL", url_of(listener))
    monkeypatch.setenv("TELEMETRY_COLLECTOR_DISABLED", "true")
    c = Collector.from_config()
    try:
        assert c.config.collector.disabled
        assert "disabled=True" in repr(c)
        c.collect("g", {"seq": 1})
        assert c.flush(timeout=10)
        assert c.stats()["dropped_disabled"] == 1
    finally:
        c.close()
    assert not connection_attempted(listener)
