"""What the full ``status`` reads, against a real server: counts for what it only counts (dead
letters: LLEN), the metadata of the pending batches alone (their events are shown), never a
dead letter's."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import redis

from collector.store import KeySchema
from reporter._commands.cli import main
from tests.reporter.helpers import numbered, store
from tests.reporter.logstate import restore_logging  # noqa: F401 - autouse
from tests.reporter.test_status_dead import no_telemetry_env  # noqa: F401 - autouse
from tests.scriptcalls import Scripts

PREFIX = "reads"
SHARDS = 4


def config_file(tmp_path: Path, redis_url: str) -> str:
    path = tmp_path / "reads.toml"
    path.write_text(textwrap.dedent(f"""
        [redis]
        url = "{redis_url}"
        key_prefix = "{PREFIX}"
        shards = {SHARDS}
    """), encoding="utf-8")
    return str(path)


def claim(scripts: Scripts, schema: KeySchema, game: str, events: int, tag: str) -> str:
    keys = store(scripts, schema, game, numbered(game, events))
    [(batch_id, _)] = scripts.claim(keys, game, tag, "t", events, 1, 30_000, 180_000,
                                    0).batches
    return batch_id


def calls(client: redis.Redis) -> dict[str, int]:
    return {name.removeprefix("cmdstat_"): stat["calls"]
            for name, stat in client.info("commandstats").items()}


def test_status_reads_no_dead_letters_metadata(
        tmp_path: Path, redis_url: str, client: redis.Redis,
        capsys: pytest.CaptureFixture[str]) -> None:
    schema, scripts = KeySchema(PREFIX, SHARDS), Scripts(client)
    game = "g"
    keys = schema.for_game(game)
    for i in range(30):  # 30 dead letters of 2 events
        batch_id = claim(scripts, schema, game, 2, f"d{i}")
        scripts.nack(keys, batch_id, "t", permanent=True, min_delay_ms=0, initial_ms=1,
                     max_ms=1, max_attempts=3, jitter=0.0, dead_max=100, reason="HTTP 400")
    claim(scripts, schema, game, 3, "flight")  # in flight
    retry_id = claim(scripts, schema, game, 4, "retry")
    scripts.nack(keys, retry_id, "t", permanent=False, min_delay_ms=60_000, initial_ms=60_000,
                 max_ms=60_000, max_attempts=5, jitter=0.0, dead_max=100, reason="HTTP 503")
    path = config_file(tmp_path, redis_url)
    client.config_resetstat()
    assert main(["status", "--json", "--config", path]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["batches_dead_listed"], shown["batches_in_flight"],
            shown["batches_retry"]) == (30, 1, 1)
    assert shown["pending_events"] == 7 and shown["unaccounted"] == 0
    read = calls(client)
    # Every shard's counters and the alerts; no batch hash read whole.
    assert read["hgetall"] == SHARDS + 1, read
    # The shard with pending batches reads their two metadata records, in one HMGET.
    assert read["hmget"] == 1, read
    assert read["llen"] >= SHARDS and "hvals" not in read and "hscan" not in read, read
