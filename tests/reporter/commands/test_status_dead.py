"""``status`` (the cheap ``--no-shards`` form, live reporters, ``--watch``) and ``dead`` (the
``--json``, ``--game`` and ``--older-than`` filters, ``purge`` that asks first), against real
servers."""

from __future__ import annotations

import argparse
import io
import json
import textwrap
import threading
import time
from pathlib import Path

import pytest
import redis

from collector.counters import STORE, Counter
from collector.store import (
    BackendUnavailable,
    Collect,
    KeySchema,
    PurgeIds,
    ShardLease,
    Store,
)
from reporter._commands.cli import main
from reporter._commands.dead import duration, run_dead
from reporter._commands.status import run_status, watch
from reporter._config import ReporterConfig
from reporter._monitoring.accounting import read_totals
from tests.support.entries import dead_letter, numbered, store
from tests.support.scriptcalls import Scripts, store_of

pytestmark = pytest.mark.usefixtures("no_telemetry_env", "restore_logging")

PREFIX = "sd"
SHARDS = 4


def config_file(tmp_path: Path, redis_url: str, shards: int = SHARDS) -> str:
    path = tmp_path / "sd.toml"
    path.write_text(
        textwrap.dedent(f"""
        [redis]
        url = "{redis_url}"
        key_prefix = "{PREFIX}"
        shards = {shards}
    """),
        encoding="utf-8",
    )
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- status ------------------------------------------------------------------------------------


def test_no_shards_reads_only_the_counters_and_the_registry(
    tmp_path: Path, redis_url: str, client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """16,384 shards and 10,000 games: one HGETALL and one GET (the lease holder) per shard,
    no ring, list or batch read."""
    shards = 16_384
    schema = KeySchema(PREFIX, shards)
    s = store_of(client, schema)
    games = [f"game-{i}" for i in range(10_000)]
    for first in range(0, len(games), 1000):
        s.call_many(
            [
                Collect(schema.for_game(g), g, numbered(g, 2), 100, 3600)
                for g in games[first : first + 1000]
            ]
        )
    s.heartbeat("host-a:1:aaaa", 10_000)
    path = config_file(tmp_path, redis_url, shards)
    client.config_resetstat()
    code, out, err = run(capsys, "status", "--no-shards", "--json", "--config", path)
    assert (code, err) == (0, "")
    calls = {
        name.removeprefix("cmdstat_"): stat["calls"]
        for name, stat in client.info("commandstats").items()
    }
    printed = json.loads(out)
    assert printed["stored"] == 20_000
    assert set(printed) == {
        *map(str, STORE),
        "alerts",
        "reporters",
        "redis_memory",
        "hot_games",
        "shards_without_owner",
        "shards_owned_by_no_live_reporter",
    }  # no levels
    assert [r["id"] for r in printed["reporters"]] == ["host-a:1:aaaa"]
    assert printed["shards_without_owner"] == shards
    assert calls["hgetall"] == shards + 1  # every shard's stats, and the alerts
    assert calls["get"] == shards  # every shard's lease holder
    read_more = {"llen", "lindex", "lrange", "zrange", "hmget", "zcard", "hget", "scan", "keys"}
    assert not read_more & set(calls), calls


def test_no_shards_counters_match_the_full_status(
    tmp_path: Path, redis_url: str, client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    schema, scripts = KeySchema(PREFIX, SHARDS), Scripts(client)
    for game in ("a", "b", "c"):
        store(scripts, schema, game, numbered(game, 10))
    dead_letter(scripts, schema, "d", 10, "x")
    path = config_file(tmp_path, redis_url)
    full = json.loads(run(capsys, "status", "--json", "--config", path)[1])
    cheap = json.loads(run(capsys, "status", "--json", "--no-shards", "--config", path)[1])
    assert {k: full[k] for k in map(str, STORE)} == {k: cheap[k] for k in map(str, STORE)}
    assert cheap["dead_events"] == 10 and full["batches_dead_listed"] == 1
    code, text, _ = run(capsys, "status", "--no-shards", "--config", path)
    assert code == 0
    assert "counters over 4 shards" in text and "need the per-shard reads" in text
    assert "\nshards\n" not in text  # no shard table


def test_status_lists_the_reporters_with_their_heartbeat_age(
    tmp_path: Path, redis_url: str, client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = KeySchema(PREFIX, SHARDS)
    s = store_of(client, schema)
    lease_ms = int(ReporterConfig.default().reporter.shard_lease_seconds * 1000)
    s.heartbeat("host-a:1:aaaa", lease_ms)
    now_ms = s.server_ms()
    client.zadd(schema.reporters, {"host-b:2:bbbb": now_ms - 60_000 + lease_ms})  # gone
    assert s.call(ShardLease(schema.shard(1), "host-a:1:aaaa", lease_ms)).held
    path = config_file(tmp_path, redis_url)
    printed = json.loads(run(capsys, "status", "--json", "--config", path)[1])
    a, b = printed["reporters"]
    assert (a["id"], a["live"], a["shards"]) == ("host-a:1:aaaa", True, 1)
    assert (b["id"], b["live"], b["shards"]) == ("host-b:2:bbbb", False, 0)
    assert 0 <= a["heartbeat_age_seconds"] < 30 and 60 <= b["heartbeat_age_seconds"] < 90
    code, text, _ = run(capsys, "status", "--config", path)
    assert code == 0 and "reporters (1 live)" in text
    assert "host-b:2:bbbb  expired" in text
    cheap = json.loads(run(capsys, "status", "--json", "--no-shards", "--config", path)[1])
    assert [(r["id"], r["shards"]) for r in cheap["reporters"]] == [
        ("host-a:1:aaaa", 1),
        ("host-b:2:bbbb", 0),
    ]
    assert cheap["shards_without_owner"] == SHARDS - 1


@pytest.mark.parametrize("form", [[], ["--no-shards"]])
def test_status_names_the_reporter_serving_each_hot_game(
    form: list[str],
    tmp_path: Path,
    redis_url: str,
    client: redis.Redis,
    capsys: pytest.CaptureFixture[str],
) -> None:
    schema = KeySchema(PREFIX, SHARDS)
    s = store_of(client, schema)
    served, idle = (
        "big",
        next(
            g for g in (f"g{i}" for i in range(100)) if schema.shard_of(g) != schema.shard_of("big")
        ),
    )
    s.heartbeat("host-a:1:aaaa", 10_000)
    assert s.call(ShardLease(schema.for_game(served), "host-a:1:aaaa", 10_000)).held
    path = Path(config_file(tmp_path, redis_url))
    path.write_text(path.read_text() + f"\n[reporter.hot_games]\n{served} = 3\n{idle} = 1\n")
    printed = json.loads(run(capsys, "status", "--json", *form, "--config", str(path))[1])
    assert printed["hot_games"] == [
        {
            "game": served,
            "threads": 3,
            "shard": schema.shard_of(served),
            "served_by": "host-a:1:aaaa",
        },
        {"game": idle, "threads": 1, "shard": schema.shard_of(idle), "served_by": ""},
    ]
    code, text, _ = run(capsys, "status", *form, "--config", str(path))
    assert code == 0
    assert (
        f"hot games: {served} (3 threads, shard {schema.shard_of(served)}, served by "
        f"host-a:1:aaaa), {idle} (1 thread, shard {schema.shard_of(idle)}, served by "
        "no reporter)"
    ) in text


def test_watch_prints_every_refresh_and_keeps_going_after_a_failure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    answers = iter(["first", BackendUnavailable("redis x: down"), "third"])

    def render() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    out = io.StringIO()
    assert watch(render, 0.01, out, threading.Event(), rounds=3) == 0
    blocks = out.getvalue().split("--- ")[1:]
    assert [b.splitlines()[1] for b in blocks] == [
        "first",
        "Redis unavailable: redis x: down",
        "third",
    ]
    assert "Redis unavailable: redis x: down" in capsys.readouterr().err


def test_watch_fails_at_once_when_the_first_refresh_fails() -> None:
    def render() -> str:
        raise BackendUnavailable("redis x: down")

    with pytest.raises(BackendUnavailable):
        watch(render, 0.01, io.StringIO(), threading.Event(), rounds=3)


def test_watched_json_is_one_object_per_line(
    tmp_path: Path, redis_url: str, client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    schema, scripts = KeySchema(PREFIX, SHARDS), Scripts(client)
    store(scripts, schema, "a", numbered("a", 3))
    config = ReporterConfig.load(config_file(tmp_path, redis_url))
    args = argparse.Namespace(json=True, no_shards=False, watch=0.01)
    s = Store(store_of(client).backend, schema)
    assert run_status(s, config, args, rounds=2) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["buffered"] for line in lines] == [3, 3]


# -- dead --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400), ("1.5h", 5400), (" 10S ", 10)],
)
def test_durations(text: str, seconds: float) -> None:
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10", "h", "1w", "-1h", "1h30m", "1 day"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="90s, 15m, 2h or 1d"):
        duration(text)


def test_dead_list_filters_and_json(
    tmp_path: Path, redis_url: str, client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    schema, scripts = KeySchema(PREFIX, SHARDS), Scripts(client)
    old_a, _ = dead_letter(scripts, schema, "game-a", 3, "oa", age_seconds=3 * 3600)
    new_a, _ = dead_letter(scripts, schema, "game-a", 4, "na")
    old_b, _ = dead_letter(scripts, schema, "game-b", 5, "ob", age_seconds=2 * 86400)
    path = config_file(tmp_path, redis_url)

    def listed(*filters: str) -> list[str]:
        code, out, _ = run(capsys, "dead", "list", "--json", *filters, "--config", path)
        assert code == 0
        return [b["batch_id"] for b in json.loads(out)]

    assert listed() == [old_b, old_a, new_a]  # oldest first
    assert listed("--game", "game-a") == [old_a, new_a]
    assert listed("--older-than", "1h") == [old_b, old_a]
    assert listed("--older-than", "1d", "--game", "game-a") == []
    assert listed("--game", "game-c") == []
    [shown] = json.loads(
        run(capsys, "dead", "list", "--json", "--game", "game-b", "--config", path)[1]
    )
    assert {k: shown[k] for k in ("game", "events", "attempts", "reason")} == {
        "game": "game-b",
        "events": 5,
        "attempts": 1,
        "reason": "HTTP 400: bad",
    }
    assert time.time() - shown["dead_at"] == pytest.approx(2 * 86400, abs=60)
    assert run(capsys, "dead", "list", "--game", "game-c", "--config", path)[1] == (
        "no dead-lettered batches of game 'game-c'\n"
    )


def test_purge_asks_first_and_takes_the_filters(
    tmp_path: Path,
    redis_url: str,
    client: redis.Redis,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schema, scripts = KeySchema(PREFIX, SHARDS), Scripts(client)
    old_a, _ = dead_letter(scripts, schema, "game-a", 3, "oa", age_seconds=3 * 3600)
    new_a, _ = dead_letter(scripts, schema, "game-a", 4, "na")
    old_b, _ = dead_letter(scripts, schema, "game-b", 5, "ob", age_seconds=4 * 3600)
    path = config_file(tmp_path, redis_url)
    s = store_of(client, schema)

    def remaining() -> list[str]:
        return [b.batch_id for b in s.dead_batches(None)]

    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    code, out, err = run(
        capsys, "dead", "purge", "--game", "game-a", "--older-than", "1h", "--config", path
    )
    assert (code, out) == (1, "")
    assert (
        "delete 1 dead-lettered batch (3 events) of game 'game-a' dead for more than 3600s in redis"
    ) in err and "[y/N]" in err
    assert "nothing purged" in err
    assert remaining() == [old_b, old_a, new_a]

    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no answer at all: a no
    assert run(capsys, "dead", "purge", "--config", path)[0] == 1
    assert remaining() == [old_b, old_a, new_a]

    monkeypatch.setattr("sys.stdin", io.StringIO("yes\n"))
    code, out, _ = run(
        capsys, "dead", "purge", "--game", "game-a", "--older-than", "1h", "--config", path
    )
    assert (code, out) == (0, "purged 1 batch (3 events)\n")
    assert remaining() == [old_b, new_a]

    code, out, err = run(capsys, "dead", "purge", "--older-than", "1h", "--yes", "--config", path)
    assert (code, out, err) == (0, "purged 1 batch (5 events)\n", "")
    assert remaining() == [new_a]
    totals = read_totals(s)
    assert totals.counter(Counter.PURGED) == 8
    assert totals.unaccounted == 0

    code, out, _ = run(capsys, "dead", "purge", "--older-than", "1h", "--yes", "--config", path)
    assert (code, out) == (0, "no dead-lettered batches to purge dead for more than 3600s\n")
    code, out, _ = run(capsys, "dead", "purge", "-y", "--config", path)  # no filter: all
    assert (code, out) == (0, "purged 1 batch (4 events)\n")
    assert remaining() == []


def test_purge_without_a_filter_asks_with_the_count(
    tmp_path: Path, redis_url: str, client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    schema, scripts = KeySchema(PREFIX, SHARDS), Scripts(client)
    for i in range(3):
        dead_letter(scripts, schema, f"game-{i}", 2, f"t{i}")
    config = ReporterConfig.load(config_file(tmp_path, redis_url))
    s = Store(store_of(client).backend, schema)
    asked: list[str] = []

    def ask(question: str) -> bool:
        asked.append(question)
        return False

    args = argparse.Namespace(action="purge", game=None, older_than=None, yes=False)
    assert run_dead(s, args, ask) == 1
    assert asked == [
        f"delete 3 dead-lettered batches in {s.describe()} (key prefix "
        f"{config.redis.key_prefix!r}) for good?"
    ]
    assert len(s.dead_batches(None)) == 3


def test_purge_ids_leaves_a_batch_replayed_meanwhile(client: redis.Redis) -> None:
    schema, scripts = KeySchema(PREFIX, SHARDS), Scripts(client)
    first, keys = dead_letter(scripts, schema, "game-a", 3, "a")
    second, _ = dead_letter(scripts, schema, "game-a", 4, "b")
    scripts.replay(keys, first)
    moved = scripts.store.call(PurgeIds(keys, [first, second, "no-such-batch"]))
    assert (moved.batches, moved.events) == (1, 4)
    assert client.hexists(keys.batches, first)  # on its way to a retry, untouched
    assert not client.hexists(keys.batches, second)
    assert not client.hexists(keys.payloads, second)
    assert client.lrange(keys.dead, 0, -1) == []
    assert int(client.hget(keys.stats, "purged") or 0) == 4
