"""What the full ``status`` reads and shows, against a real server: counts for what it only
counts (dead letters: LLEN), the metadata of the pending batches alone (their events are
shown), never a dead letter's; and the memory each shard keeps to answer repeats (remembered
writes, dedup keys)."""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest
import redis

from collector import Collector
from collector.logs import counted
from collector.store import KeySchema, open_store
from collector.store._remembered import DEDUP_KEY_BYTES, WRITE_RECORD_BYTES, WRITER_BYTES
from reporter._commands.cli import main
from tests.support.entries import dead_letter, make_config, numbered, store
from tests.support.scriptcalls import Scripts
from tests.support.servers import Cluster

pytestmark = pytest.mark.usefixtures("no_telemetry_env", "restore_logging")

PREFIX = "reads"
SHARDS = 4


def config_file(tmp_path: Path, redis_url: str) -> str:
    path = tmp_path / "reads.toml"
    path.write_text(
        textwrap.dedent(f"""
        [redis]
        url = "{redis_url}"
        key_prefix = "{PREFIX}"
        shards = {SHARDS}
    """),
        encoding="utf-8",
    )
    return str(path)


def claim(scripts: Scripts, schema: KeySchema, game: str, events: int, tag: str) -> str:
    keys = store(scripts, schema, game, numbered(game, events))
    [(batch_id, _)] = scripts.claim(keys, game, tag, "t", events, 1, 30_000, 180_000, 0).batches
    return batch_id


def calls(client: redis.Redis) -> dict[str, int]:
    return {
        name.removeprefix("cmdstat_"): stat["calls"]
        for name, stat in client.info("commandstats").items()
    }


def test_status_reads_no_dead_letters_metadata(
    tmp_path: Path, redis_url: str, client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    schema, scripts = KeySchema(PREFIX, SHARDS), Scripts(client)
    game = "g"
    keys = schema.for_game(game)
    for i in range(30):  # 30 dead letters of 2 events
        dead_letter(scripts, schema, game, 2, f"d{i}", reason="HTTP 400")
    claim(scripts, schema, game, 3, "flight")  # in flight
    retry_id = claim(scripts, schema, game, 4, "retry")
    scripts.nack(
        keys,
        retry_id,
        "t",
        permanent=False,
        min_delay_ms=60_000,
        initial_ms=60_000,
        max_ms=60_000,
        max_attempts=5,
        jitter=0.0,
        dead_max=100,
        reason="HTTP 503",
    )
    path = config_file(tmp_path, redis_url)
    client.config_resetstat()
    assert main(["status", "--json", "--config", path]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["batches_dead_listed"], shown["batches_in_flight"], shown["batches_retry"]) == (
        30,
        1,
        1,
    )
    assert shown["pending_events"] == 7 and shown["unaccounted"] == 0
    read = calls(client)
    # Every shard's counters and the alerts; no batch hash read whole.
    assert read["hgetall"] == SHARDS + 1, read
    # The shard with pending batches reads their two metadata records, in one HMGET.
    assert read["hmget"] == 1, read
    assert read["llen"] >= SHARDS and "hvals" not in read and "hscan" not in read, read


def test_status_shows_the_writes_and_dedup_keys_each_shard_keeps(
    tmp_path: Path, redis_url: str, client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    schema, scripts = KeySchema(PREFIX, SHARDS), Scripts(client)
    with Collector(url=redis_url, key_prefix=PREFIX, shards=SHARDS) as c:
        for i in range(50):
            c.collect("keyed-a", {"i": i}, dedup_key=f"a-{i}")
        for i in range(30):
            c.collect("keyed-b", {"i": i}, dedup_key=f"b-{i}")
            c.collect("keyed-b", {"i": i}, dedup_key=f"b-{i}")  # merged
        c.collect("plain", {"i": 0})
        assert c.flush(30)
    # A game whose buffer was drained leaves the ring; its keys stay for the window.
    keys_a = schema.for_game("keyed-a")
    for batch_id, _ in scripts.claim(
        keys_a, "keyed-a", "x", "t", 100, 1, 30_000, 180_000, 0
    ).batches:
        scripts.ack(keys_a, batch_id, "t")
    assert scripts.claim(keys_a, "keyed-a", "y", "t", 100, 1, 30_000, 180_000, 0).batches == []
    assert client.zscore(keys_a.ring, "keyed-a") is None
    client.set(f"{{{PREFIX}:0}}:seen:junk", "not a set")  # read as nothing, no failure
    client.zadd(f"{{{PREFIX}:x:0}}:seen:other", {"k": 1})  # another deployment's prefix
    path = config_file(tmp_path, redis_url)

    assert main(["status", "--json", "--config", path]) == 0
    kept = json.loads(capsys.readouterr().out)["remembered"]
    writes = sum(client.hlen(k.writes) - client.zcard(k.writers) for k in schema.all_shards())
    writers = sum(client.zcard(k.writers) for k in schema.all_shards())
    assert writers >= 1 and writes >= 0
    assert {
        k: kept[k] for k in ("dedup_keys", "dedup_games", "remembered_writes", "remembered_writers")
    } == {
        "dedup_keys": 80,
        "dedup_games": 2,
        "remembered_writes": writes,
        "remembered_writers": writers,
    }
    by_shard = {s["shard"]: s for s in kept["shards"]}
    for game, count in (("keyed-a", 50), ("keyed-b", 30)):
        assert by_shard[schema.shard_of(game)]["dedup_keys"] >= count
    records = sum(client.hlen(k.writes) for k in schema.all_shards())
    assert kept["remembered_bytes_estimate"] == (
        records * WRITE_RECORD_BYTES + writers * WRITER_BYTES + 80 * DEDUP_KEY_BYTES
    )

    assert main(["status", "--config", path]) == 0
    text = capsys.readouterr().out
    assert (
        f"kept to answer repeats: {counted(writes, 'write')} of "
        f"{counted(writers, 'SDK writer')}, 80 dedup keys of 2 games: about"
    ) in text
    header = next(line for line in text.splitlines() if line.startswith("shard "))
    assert header.split()[-4:] == ["writes", "kept", "dedup", "keys"]


def test_the_kept_keys_are_found_on_every_node_of_a_cluster(cluster: Cluster) -> None:
    prefix = f"kept{uuid.uuid4().hex[:8]}"  # the cluster is shared by the session
    config = make_config(cluster.url, shards=16, redis={"cluster": True, "key_prefix": prefix})
    games = [f"game-{i}" for i in range(24)]
    with Collector(url=cluster.url, key_prefix=prefix, shards=16, cluster=True) as c:
        for game in games:
            for i in range(3):
                c.collect(game, {"i": i}, dedup_key=f"{game}-{i}")
        assert c.flush(30)
    store = open_store(config.redis)
    try:
        kept = store.remembered()
    finally:
        store.close()
    schema = KeySchema(prefix, 16)
    assert len({schema.shard_of(g) for g in games}) > 8  # on every node
    assert sum(r.dedup_keys for r in kept) == 3 * len(games)
    assert sum(r.dedup_games for r in kept) == len(games)
    for r in kept:
        on_shard = [g for g in games if schema.shard_of(g) == r.shard]
        assert (r.dedup_keys, r.dedup_games) == (3 * len(on_shard), len(on_shard))
        assert r.writers == (1 if on_shard else 0)
