"""The flusher's writes on a single server: one socket write per flush, NOSCRIPT recovered."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.connection import Connection

import collector
import collector._writer
import collector.store._bulk
from collector import Collector
from collector._config import TelemetryConfig
from collector._config_loader import build_config, raw_settings
from collector.store import KeySchema
from tests.collector.conftest import MakeCollector
from tests.collector.helpers import balanced, queue_events

PREFIX = "tw"
SCHEMA = KeySchema(PREFIX, 16)
GAMES = [f"game-{n}" for n in range(50)]


@pytest.fixture
def sends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes of every command buffer any connection sends, in order."""
    sizes: list[int] = []
    real = Connection.send_packed_command

    def counting(self: Connection, command: Any, check_health: bool = True) -> None:
        sizes.append(sum(len(part) for part in command) if isinstance(command, list)
                     else len(command))
        real(self, command, check_health)

    monkeypatch.setattr(Connection, "send_packed_command", counting)
    return sizes


def collect_all(c: Collector, per_game: int) -> None:
    for i in range(per_game):
        for game in GAMES:
            c.collect(game, {"seq": i})


def test_a_flush_of_many_games_is_one_socket_write(
        redis_url: str, r: redis.Redis, make_collector: MakeCollector,
        sends: list[int]) -> None:
    c = make_collector(url=redis_url, key_prefix=PREFIX, flush_interval_ms=60_000)
    c.collect("warm-up", {})
    assert c.flush(timeout=10)
    sends.clear()
    collect_all(c, 20)  # 1,000 events over 50 games, fewer than wake the flusher early
    assert c.flush(timeout=10)
    assert len(sends) == 1
    for game in GAMES:
        assert [e["seq"] for e in queue_events(r, SCHEMA, game)] == list(range(20))


def test_a_large_flush_is_split_into_bounded_writes(
        redis_url: str, r: redis.Redis, make_collector: MakeCollector, sends: list[int],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collector._writer, "EVENTS_PER_CALL", 30)
    monkeypatch.setattr(collector.store._bulk, "WRITE_BYTES", 8000)
    c = make_collector(url=redis_url, key_prefix=PREFIX, flush_interval_ms=60_000)
    c.collect("warm-up", {})
    assert c.flush(timeout=10)
    sends.clear()
    collect_all(c, 40)  # 2,000 events of about 25 bytes: two calls per game, 100 calls
    assert c.flush(timeout=10)
    assert 5 < len(sends) < 50
    largest_call = max(sends[-1], 2000)
    assert all(size < 8000 + largest_call for size in sends)
    for game in GAMES:
        assert [e["seq"] for e in queue_events(r, SCHEMA, game)] == list(range(40))
    assert balanced(c.stats())


def test_scripts_flushed_from_the_server_are_loaded_again(
        redis_url: str, r: redis.Redis, make_collector: MakeCollector) -> None:
    for mode in ("background", "sync"):
        c = make_collector(url=redis_url, key_prefix=mode, mode=mode)
        c.collect("g", {"seq": 1})
        assert c.flush(timeout=10)
        r.script_flush()
        c.collect("g", {"seq": 2})
        c.collect("h", {"seq": 3})
        assert c.flush(timeout=10)
        schema = KeySchema(mode, 16)
        assert [e["seq"] for e in queue_events(r, schema, "g")] == [1, 2]
        assert [e["seq"] for e in queue_events(r, schema, "h")] == [3]
        stats = c.stats()
        assert stats["backend_errors"] == 0
        assert stats["stored"] == 3


@pytest.mark.parametrize("retries", [0, 1])
def test_calls_a_broken_connection_left_unanswered_are_retried(
        redis_url: str, r: redis.Redis, make_collector: MakeCollector,
        monkeypatch: pytest.MonkeyPatch, retries: int) -> None:
    """As redis-py does for its own commands: [redis] retries more tries on a new connection."""
    raw = raw_settings(TelemetryConfig())
    raw["redis"].update(url=redis_url, key_prefix=PREFIX, retries=retries)
    raw["collector"].update(mode="sync")
    c = make_collector(config=build_config(raw, "test", env={}, interpolate=False))
    c.collect("g", {"seq": 0})
    real = Connection.send_packed_command
    broken = [True]

    def breaks_once(self: Connection, command: Any, check_health: bool = True) -> None:
        if broken:
            broken.clear()
            self.disconnect()
            raise redis.ConnectionError("connection reset (test)")
        real(self, command, check_health)

    monkeypatch.setattr(Connection, "send_packed_command", breaks_once)
    if retries:
        c.collect("g", {"seq": 1})
        assert [e["seq"] for e in queue_events(r, SCHEMA, "g")] == [0, 1]
        assert c.stats()["backend_errors"] == 0
    else:
        with pytest.raises(collector.BackendError, match="connection reset"):
            c.collect("g", {"seq": 1})
        assert [e["seq"] for e in queue_events(r, SCHEMA, "g")] == [0]
