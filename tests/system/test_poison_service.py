"""The issue's three poisoned records under a running reporter and SDK: a string at a
registered game's buffer, unreadable metadata of a due retry, a counters hash of another type
(and a ring member that is not a game name).  Every other game is delivered, each event once;
`status` exits 0 and shows the quarantine; /metrics counts it; the reporter logs it once."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import httpx
import pytest
import redis

from collector import Collector
from collector.store import KeySchema, ShardKeys, encode_entry
from reporter._commands.cli import main
from reporter._config import ReporterConfig
from tests.support.fixtures import MakeEndpoint, StartService
from tests.support.polling import wait_until
from tests.support.scenarios import config_toml, drained, make_config, received_keys, schema_of
from tests.support.servers import free_port

GAMES = [f"game-{i}" for i in range(12)]
BAD_GAME = GAMES[0]
EVENTS = 20


def poison(r: redis.Redis, schema: KeySchema) -> tuple[ShardKeys, ShardKeys, ShardKeys]:
    """The junk, in three shards: (a), (b), (c)."""
    a = schema.for_game(BAD_GAME)
    b = next(s for s in schema.all_shards() if s.shard != a.shard)
    c = next(s for s in schema.all_shards() if s.shard not in (a.shard, b.shard))
    # (a) a string at a registered game's buffer
    r.set(a.queue(BAD_GAME), "not a list")
    r.sadd(a.active, BAD_GAME)
    r.zadd(a.ring, {BAD_GAME: 0})
    # (b) a due retry whose metadata does not decode (its one event kept in the books)
    r.hset(b.batches, "x.0", b"{not json")
    r.hset(b.payloads, "x.0", encode_entry(1, b'{"game":"lost"}'))
    r.zadd(b.retry, {"x.0": 0})
    r.hincrby(b.stats, "stored", 1)
    # (c) the counters of a shard are a list; and a ring member that is not a game name
    r.rpush(c.stats, "junk")
    r.zadd(c.ring, {b"\xff\x1b[2J": 0})
    return a, b, c


def collect_all(redis_url: str, config: ReporterConfig) -> dict[str, int]:
    sdk = Collector(
        url=redis_url,
        key_prefix=config.redis.key_prefix,
        shards=config.redis.shards,
        flush_interval_ms=10,
    )
    try:
        for seq in range(EVENTS):
            for game in GAMES:
                sdk.collect(game, {"game": game, "seq": seq})
        assert sdk.flush(timeout=10)
        return sdk.stats()
    finally:
        sdk.close(timeout=5)


def check_status(path: Path, capsys: pytest.CaptureFixture[str], must_show: list[str]) -> None:
    """`status` in its three forms exits 0 and shows the quarantine, with no escape byte."""
    capsys.readouterr()
    assert main(["status", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "quarantine: records the scripts set aside" in out
    assert all(text in out for text in must_show)
    assert "\x1b" not in out
    assert main(["status", "--config", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert len(shown["quarantine"]) == 4 and shown["quarantined_records"] == 4
    assert main(["status", "--config", str(path), "--no-shards"]) == 0
    assert "4 records set aside in the quarantine" in capsys.readouterr().out


def test_poisoned_records_are_set_aside_and_every_other_game_is_delivered_once(
    redis_url: str,
    r: redis.Redis,
    make_endpoint: MakeEndpoint,
    start_service: StartService,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    endpoint = make_endpoint()
    config = make_config(
        redis_url,
        endpoint.url,
        metrics={"listen": f"127.0.0.1:{free_port()}", "cache_seconds": 0.0},
    )
    schema = schema_of(config)
    a, b, c = poison(r, schema)
    path = tmp_path / "poison.toml"
    path.write_text(config_toml(config), encoding="utf-8")
    capsys.readouterr()
    assert main(["status", "--config", str(path)]) == 0  # before any script met the junk
    before = capsys.readouterr().out
    assert f"{a.queue(BAD_GAME)} is a string" in before and "x.0" in before
    assert f"{c.stats} is a list" in before
    sdk_stats = collect_all(redis_url, config)
    assert sdk_stats["stored"] == EVENTS * len(GAMES)
    assert sdk_stats["backend_errors"] == 0  # no write failed half-way, none sent again

    def logged() -> list[str]:
        return [m for m in caplog.messages if "set aside in its quarantine" in m]

    with caplog.at_level(logging.WARNING, logger="reporter"):
        service = start_service(config)
        final = wait_until(lambda: drained(r, schema), timeout=30)
        # one line per shard whose count rose, each record once: the due retry's shard logs
        # at the sweep after the one that set it aside
        wait_until(lambda: len(logged()) >= 3, timeout=30)
    assert received_keys(endpoint) == Counter({(g, s): 1 for g in GAMES for s in range(EVENTS)})
    summary = final.summary()
    assert summary["stored"] == EVENTS * len(GAMES) + 1
    assert (summary["delivered"], summary["quarantined_events"]) == (EVENTS * len(GAMES), 1)
    assert (summary["unaccounted"], summary["quarantined_records"]) == (0, 4)
    assert {(q.shard, q.key, q.field, q.reason) for q in service.store.quarantine(10)} == {
        (a.shard, a.queue(BAD_GAME), "", "a string where a list belongs"),
        (b.shard, b.batches, "x.0", "metadata that is not JSON"),
        (c.shard, c.stats, "", "a list where a hash belongs"),
        (c.shard, c.ring, "\\xff\\x1b[2J", "a ring member that is not a game name"),
    }
    assert sorted(int(m.split(":")[0].removeprefix("shard ")) for m in logged()) == sorted(
        {a.shard, b.shard, c.shard}
    )

    assert service.endpoint is not None
    metrics = httpx.get(f"{service.endpoint.url}/metrics", timeout=10).text
    assert 'telemetry_quarantined_records_total{scope="cluster"} 4.0' in metrics
    assert 'telemetry_quarantined_events_total{scope="cluster"} 1.0' in metrics
    check_status(path, capsys, [a.queue(BAD_GAME), "metadata that is not JSON"])
