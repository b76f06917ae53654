"""``telemetry-reporter`` as users run it: separate processes for the game code, the reporter
and the endpoint (this process), then ``status``, ``check-config`` and ``dead``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from collector.store import KeySchema
from reporter._commands.cli import main
from reporter._demo.endpoint import LocalEndpoint
from reporter._monitoring.accounting import read_totals
from tests.support.entries import dead_letter, ids_of, now_ms, numbered, store
from tests.support.markers import secret
from tests.support.polling import wait_until
from tests.support.processes import child_env, reporter_cli, start_run
from tests.support.scriptcalls import Scripts, store_of
from tests.support.servers import Server

pytestmark = pytest.mark.usefixtures("restore_logging")

PW = secret("pw")
TOKEN = secret("token")

PREFIX = "e2e"
SHARDS = 4
GAMES = [f"game-{i}" for i in range(5)]
PER_GAME = 700
GRACE_SECONDS = 10

COLLECT_SCRIPT = textwrap.dedent("""
    import sys
    from collector import Collector

    url, per_game, games = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    collector = Collector(url=url, key_prefix="e2e", shards=4, max_events_per_game=10_000)
    for i in range(per_game):
        for game in games:
            collector.collect(game, {"id": f"{game}#{i}", "game": game,
                                     "detail": {"name": "玩家", "seq": [i, i * 0.5]}})
    collector.close(timeout=30)
    stats = collector.stats()
    assert stats["stored"] == per_game * len(games), stats
""")


def write_config(path: Path, redis_url: str, sink_url: str) -> Path:
    path.write_text(
        textwrap.dedent(f"""
        [redis]
        url = "{redis_url}"
        key_prefix = "{PREFIX}"
        shards = {SHARDS}

        [buffer]
        max_events_per_game = 10000

        [reporter]
        linger_ms = 100
        poll_interval_ms = 50
        grace_seconds = {GRACE_SECONDS}

        [reporter.hot_games]
        "game-0" = 1

        [sink]
        url = "{sink_url}"

        [sink.headers]
        Authorization = "Bearer not-for-printing"
    """),
        encoding="utf-8",
    )
    return path


def test_end_to_end_across_processes(
    tmp_path: Path, own_server: Server, own_client: redis.Redis, endpoint: LocalEndpoint
) -> None:
    config = write_config(tmp_path / "reporter.toml", own_server.url, endpoint.url)
    schema = KeySchema(PREFIX, SHARDS)
    # events collected 200 s ago, waiting in the buffers: never to be sent
    old_ms = now_ms() - 200_000
    scripts = Scripts(own_client)
    store(scripts, schema, "game-old", numbered("game-old", 40, born_ms=old_ms))
    store(scripts, schema, "game-1", numbered("game-1", 30, born_ms=old_ms, start=10_000))

    log = tmp_path / "reporter.log"
    reporter = start_run(config, log)
    try:
        collect = subprocess.run(
            [sys.executable, "-c", COLLECT_SCRIPT, own_server.url, str(PER_GAME), *GAMES],
            cwd=tmp_path,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert collect.returncode == 0, collect.stderr

        expected = Counter(f"{g}#{i}" for g in GAMES for i in range(PER_GAME))
        wait_until(
            lambda: len(endpoint.events()) >= expected.total(),
            timeout=60,
            step=0.05,
            what="every event delivered",
        )

        def settled() -> bool:
            totals = read_totals(store_of(own_client, schema))
            return (totals.buffered, totals.pending_events, totals.counter("stale")) == (0, 0, 70)

        wait_until(settled, what="every batch acked and the stale events counted")
        status = reporter_cli("status", "--json", "--config", str(config))
        table = reporter_cli("status", "--config", str(config))

        reporter.send_signal(signal.SIGTERM)
        code = reporter.wait(timeout=GRACE_SECONDS)  # idle: nothing to wait for
    finally:
        if reporter.poll() is None:
            reporter.kill()
            reporter.wait()

    stderr = log.read_text(encoding="utf-8")
    assert code == 0, stderr
    assert "telemetry-reporter: config " + str(config) in stderr
    assert "not-for-printing" not in stderr
    assert "stopped" in stderr

    received = list(endpoint.received)
    ids = ids_of(e for r in received for e in r.events)
    assert Counter(ids) == expected  # exactly once, nothing old
    for post in received:
        assert 1 <= len(post.events) <= 128
        assert {e["game"] for e in post.events} == {post.game}
        assert post.idempotency_key == post.batch_id
    assert received[0].events[0]["detail"]["name"] == "玩家"
    assert all(o is None for o in own_client.mget([k.owner for k in schema.all_shards()]))

    assert status.returncode == 0, status.stderr
    counters: dict[str, Any] = json.loads(status.stdout)
    assert counters["unaccounted"] == 0
    assert counters["stored"] == expected.total() + 70
    assert counters["delivered"] == expected.total()
    assert counters["stale"] == 70
    assert counters["stored"] == (
        counters["delivered"]
        + counters["evicted"]
        + counters["stale"]
        + counters["dead_events"]
        - counters["replayed"]
        + counters["buffered"]
        + counters["pending_events"]
    )
    assert table.returncode == 0, table.stderr
    for heading in ("shards", "counters", "hot games: game-0 (1 thread, shard", "unaccounted"):
        assert heading in table.stdout
    assert "not-for-printing" not in table.stdout


def test_check_config_names_a_misspelled_key(tmp_path: Path) -> None:
    path = tmp_path / "typo.toml"
    path.write_text("[reporter]\nlinger_msec = 100\n", encoding="utf-8")
    result = reporter_cli("check-config", str(path))
    assert result.returncode == 2
    assert "linger_msec" in result.stderr
    assert str(path) in result.stderr
    assert "[reporter]" in result.stderr


def test_check_config_prints_the_config_with_secrets_masked(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text(
        textwrap.dedent(f"""
        [redis]
        url = "redis://app:{PW}@cache.internal:6379/0"
        [reporter]
        linger_ms = 250
        [sink]
        url = "https://ingest.example/v1"
        [sink.headers]
        Authorization = "Bearer {TOKEN}"
        X-Tenant = "acme"
    """),
        encoding="utf-8",
    )
    result = reporter_cli("check-config", str(path))
    assert result.returncode == 0, result.stderr
    first, _, rest = result.stdout.partition("\n")
    assert first == f"# {path}: valid"
    printed = json.loads(rest)
    assert printed["reporter"]["linger_ms"] == 250
    assert printed["sink"]["headers"] == {"Authorization": "***", "X-Tenant": "acme"}
    assert printed["redis"]["url"] == "redis://app:***@cache.internal:6379/0"
    assert TOKEN not in result.stdout
    assert PW not in result.stdout


def test_run_with_a_bad_config_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[reporter]\nbatch_size = 129\n", encoding="utf-8")
    result = reporter_cli("run", "--config", str(path))
    assert result.returncode == 2
    assert "batch_size" in result.stderr


def test_dead_letter_commands(
    tmp_path: Path,
    redis_url: str,
    client: redis.Redis,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in [v for v in os.environ if v.startswith("TELEMETRY_")]:
        monkeypatch.delenv(var)
    config = write_config(tmp_path / "dead.toml", redis_url, "http://127.0.0.1:9/ingest")
    schema, scripts = KeySchema(PREFIX, SHARDS), Scripts(client)
    batch_id, keys = dead_letter(scripts, schema, "game-1", 3, "b", reason="HTTP 400: bad schema")

    def run(*args: str) -> tuple[int, str]:
        code = main(["dead", "--config", str(config), *args])
        return code, capsys.readouterr().out

    code, out = run("list")
    assert code == 0
    assert batch_id in out and "HTTP 400: bad schema" in out
    code, out = run("show", batch_id)
    assert code == 0
    shown = json.loads(out)
    assert ids_of(shown["events"]) == ["game-1#0", "game-1#1", "game-1#2"]
    assert main(["dead", "--config", str(config), "show", "nope"]) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("", "telemetry-reporter: no batch 'nope'\n")  # not found: stderr
    code, out = run("replay", batch_id)
    assert (code, out.strip().split()[:2]) == (0, ["replayed", "1"])
    assert client.zrange(keys.retry, 0, -1) == [batch_id.encode()]
    assert read_totals(store_of(client, schema)).unaccounted == 0
    assert run("purge") == (0, "no dead-lettered batches to purge\n")
    assert run("list")[1].strip() == "no dead-lettered batches"


# -- the demo ------------------------------------------------------------------------------


def demo_processes(tmp: Path) -> list[int]:
    """Pids of server processes working in a ``telemetry-demo-*`` directory under ``tmp``
    (the server's ``--dir`` is its working directory; its command line is rewritten into a
    process title, so it cannot be matched)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            continue  # gone, or not ours to read
        if cwd.parent == tmp and cwd.name.startswith("telemetry-demo-"):
            found.append(int(pid))
    return found


VERDICT = re.compile(r"^all (\d+) events accounted for: (.+)$", re.MULTILINE)


def verdict_states(out: str) -> tuple[int, dict[str, int]]:
    """The demo's verdict line: the total, and each end state it lists with its count."""
    match = VERDICT.search(out)
    assert match, out[-2000:]
    states = dict(re.findall(r"([a-z][a-z -]*?) (\d+)(?:, |$)", match[2]))
    return int(match[1]), {name: int(count) for name, count in states.items()}


def test_demo_runs_and_cleans_up(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**child_env(), "TMPDIR": str(tmp)}
    demo = subprocess.Popen(
        [sys.executable, "-m", "reporter", "demo", "--seconds", "3"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # while it runs, its server lives in a telemetry-demo-* directory under our TMPDIR
        started = wait_until(
            lambda: demo.poll() is not None or demo_processes(tmp),
            timeout=30,
            what="the demo's server",
        )
        assert started is not True, "the demo ended before its server was seen"
        assert [p.name for p in tmp.iterdir() if p.name.startswith("telemetry-demo-")]
        out, err = demo.communicate(timeout=90)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.communicate()

    assert demo.returncode == 0, err
    assert "summary" in out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines() if len(line.split()) > 1}
    assert int(rows["delivered"]) > 0
    assert int(rows["accepted"]) >= int(rows["delivered"])
    assert int(rows["unaccounted"]) == 0
    total, states = verdict_states(out)
    assert total == int(rows["accepted"])
    assert states["delivered"] == int(rows["delivered"]) > 0
    assert sum(states.values()) == total
    assert set(states) <= {
        "delivered",
        "evicted",
        "stale",
        "dead-lettered",
        "dropped in the SDK",
        "still buffered or pending",
    }
    assert out.rstrip().splitlines()[-2].startswith("next: copy config/telemetry.toml")
    assert "telemetry-reporter check-config" in out.rstrip().splitlines()[-1]
    assert not [p.name for p in tmp.iterdir() if p.name.startswith("telemetry-demo-")]
    assert demo_processes(tmp) == []


def test_check_config_prints_deprecation_notices_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "old.toml"
    path.write_text(
        '[sink]\nurl = "http://127.0.0.1:9/ingest"\ntransport = "stdlib"\n', encoding="utf-8"
    )
    assert main(["check-config", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "deprecated" in err and "[sink] transport" in err
    assert '"transport": "builtin"' in out


def test_check_config_names_the_nppa_games_without_a_biz_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = "0123456789abcdef0123456789abcdef"
    path = tmp_path / "nppa.toml"
    path.write_text(
        textwrap.dedent(f"""
        [sink]
        kind = "nppa"
        [nppa]
        app_id = "app-1"
        secret_key = "{key}"
        [games."farm"]
        biz_id = "1101999999"
        [games."kart"]
        max_events_per_game = 100
        [reporter.hot_games]
        "arena" = 2
    """),
        encoding="utf-8",
    )
    assert main(["check-config", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "games named in the file without a biz_id: kart, arena" in err
    assert key not in out + err

    every_game = (
        path.read_text(encoding="utf-8")
        .replace("max_events_per_game = 100", 'biz_id = "1101999998"')
        .replace('"arena" = 2', "")
    )
    path.write_text(every_game, encoding="utf-8")
    assert main(["check-config", str(path)]) == 0
    assert "biz_id" not in capsys.readouterr().err  # every game has one: nothing to say

    path.write_text(every_game.split('[games."farm"]')[0], encoding="utf-8")
    assert main(["check-config", str(path)]) == 0
    assert "no game has a biz_id" in capsys.readouterr().err


def test_the_nppa_demo_reports_to_a_mock_of_the_interface() -> None:
    import io

    from reporter._demo.run import run_demo

    out = io.StringIO()
    assert run_demo(2.0, out, "nppa") == 0
    rows = {
        line.split()[0]: line.split()[1]
        for line in out.getvalue().splitlines()
        if len(line.split()) > 1
    }
    assert int(rows["accepted"]) > 0
    assert int(rows["delivered"]) == int(rows["accepted"])
    assert (int(rows["unaccounted"]), int(rows["dead_events"])) == (0, 0)
    assert "anti-addiction" in out.getvalue()
    assert verdict_states(out.getvalue()) == (
        int(rows["accepted"]),
        {"delivered": int(rows["delivered"])},
    )
    assert "docs/nppa.md" in out.getvalue().rstrip().splitlines()[-1]
