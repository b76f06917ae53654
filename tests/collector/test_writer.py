"""The flusher's writes on a single server: one socket write per flush, NOSCRIPT recovered."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.connection import Connection

import collector
import collector._buffer
import collector._calls
import collector.store._bulk
from collector import Collector
from collector.config import TelemetryConfig, build_config, raw_settings
from collector.store import KeySchema
from tests.support.fixtures import MakeCollector
from tests.support.servers import Server, default_binary
from tests.support.stored import balanced, queue_events

PREFIX = "tw"
SCHEMA = KeySchema(PREFIX, 16)
GAMES = [f"game-{n}" for n in range(50)]


@pytest.fixture
def sends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes of every command buffer any connection sends, in order."""
    sizes: list[int] = []
    real = Connection.send_packed_command

    def counting(self: Connection, command: Any, check_health: bool = True) -> None:
        sizes.append(
            sum(len(part) for part in command) if isinstance(command, list) else len(command)
        )
        real(self, command, check_health)

    monkeypatch.setattr(Connection, "send_packed_command", counting)
    return sizes


def collect_all(c: Collector, per_game: int) -> None:
    for i in range(per_game):
        for game in GAMES:
            c.collect(game, {"seq": i})


def test_a_flush_of_many_games_is_one_socket_write(
    redis_url: str, r: redis.Redis, make_collector: MakeCollector, sends: list[int]
) -> None:
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
    redis_url: str,
    r: redis.Redis,
    make_collector: MakeCollector,
    sends: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(collector._calls, "EVENTS_PER_CALL", 30)
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
    redis_url: str, r: redis.Redis, make_collector: MakeCollector
) -> None:
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


@pytest.mark.parametrize(("retries", "resend"), [(0, 0.0), (1, 0.0), (0, 5.0)])
def test_calls_a_broken_connection_left_unanswered_are_retried(
    redis_url: str,
    r: redis.Redis,
    make_collector: MakeCollector,
    monkeypatch: pytest.MonkeyPatch,
    retries: int,
    resend: float,
) -> None:
    """As redis-py does for its own commands: [redis] retries more tries on a new connection;
    and sync mode's own resend of a write whose outcome is unknown (sync_resend_seconds)."""
    raw = raw_settings(TelemetryConfig())
    raw["redis"].update(url=redis_url, key_prefix=PREFIX, retries=retries)
    raw["collector"].update(mode="sync", sync_resend_seconds=resend)
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
    if retries or resend:
        c.collect("g", {"seq": 1})
        assert [e["seq"] for e in queue_events(r, SCHEMA, "g")] == [0, 1]
        assert c.stats()["stored"] == 2
    else:  # the write broke while it was being sent: it may have reached Redis
        with pytest.raises(collector.BackendUnconfirmed, match="connection reset"):
            c.collect("g", {"seq": 1})
        assert [e["seq"] for e in queue_events(r, SCHEMA, "g")] == [0]


def test_calls_are_cut_by_bytes_as_well_as_by_count() -> None:
    entries = [b"x" * 40_000] * 40 + [b"y" * 100] * 2
    calls = collector._calls.plan_calls(
        {"big": entries}, collector._buffer.no_pending(), lambda game: 1000
    )
    sizes = [sum(map(len, c.entries)) for c in calls]
    assert [len(c.entries) for c in calls] == [13, 13, 13, 3]
    assert max(sizes) <= collector._calls.CALL_BYTES
    assert [e for c in calls for e in c.entries] == entries


def test_events_too_large_for_one_write_together_are_all_stored_beside_other_games(
    make_collector: MakeCollector,
) -> None:
    """40 events of 40 KB (1.6 MB) against a server whose largest argument is 1 MB (the
    smallest proto-max-bulk-len Redis accepts): written in bounded calls, never refused, and
    the other games' events beside them all stored too."""
    srv = Server(default_binary(), extra=["--proto-max-bulk-len", "1mb"]).start()
    try:
        client = srv.client()
        c = make_collector(
            url=srv.url, key_prefix=PREFIX, flush_interval_ms=60_000, max_event_bytes=65_536
        )
        for seq in range(40):
            c.collect("big", {"seq": seq, "blob": "b" * 40_000})
        for seq in range(1040):
            c.collect(f"small-{seq % 8}", {"seq": seq})
        assert c.flush(timeout=10)
        stats = c.stats()
        assert (stats["stored"], stats["backend_errors"], stats["dropped_buffer_full"]) == (
            1080,
            0,
            0,
        )
        assert [e["seq"] for e in queue_events(client, SCHEMA, "big")] == list(range(40))
        assert sum(len(queue_events(client, SCHEMA, f"small-{n}")) for n in range(8)) == 1040
    finally:
        srv.cleanup()
