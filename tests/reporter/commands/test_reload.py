"""SIGHUP to ``telemetry-reporter run``, as an operator sends it: the secret files are read
again and the process goes on, whatever the sink.  With the anti-addiction sink, a reporter
started with a key the system no longer accepts holds (no dead letter, one probe per
interval, ``status`` names 1011) until the key file is rewritten and SIGHUP sent; then the
same process sends the whole backlog."""

from __future__ import annotations

import json
import signal
import textwrap
import threading
import time
from pathlib import Path

import redis

from collector import Collector, nppa
from collector.store import KeySchema
from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint
from reporter._demo.nppa_mock import NppaEndpoint
from reporter._monitoring.accounting import read_totals
from reporter._pacing.send_hold import read_hold
from reporter._sinks.nppa.routes import fingerprint
from tests.support.polling import wait_until
from tests.support.processes import reporter_cli, start_run, stop_run
from tests.support.scriptcalls import store_of
from tests.support.servers import Server

OLD = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
NEW = "5a" * 16
APP = "reload-app"
GAMES = {f"game-{i}": f"110199999{i}" for i in range(4)}
PREFIX = "reload"
PI = "1" * 38
PROBE_SECONDS = 2.0


def nppa_file(tmp_path: Path, redis_url: str, base_url: str) -> Path:
    games = "".join(f'[games."{g}"]\nbiz_id = "{b}"\n' for g, b in GAMES.items())
    path = tmp_path / "nppa.toml"
    path.write_text(
        textwrap.dedent(f"""
        [redis]
        url = "{redis_url}"
        key_prefix = "{PREFIX}"
        shards = 4
        [reporter]
        linger_ms = 100
        poll_interval_ms = 20
        [sink]
        kind = "nppa"
        [nppa]
        base_url = "{base_url}"
        app_id = "{APP}"
        secret_key_file = "{tmp_path / "nppa.key"}"
        probe_interval_seconds = {PROBE_SECONDS}
    """)
        + games,
        encoding="utf-8",
    )
    return path


def test_a_held_reporter_sends_its_backlog_after_sighup_with_the_new_key(
    tmp_path: Path, own_server: Server, own_client: redis.Redis
) -> None:
    key_file = tmp_path / "nppa.key"
    key_file.write_text(OLD + "\n", encoding="utf-8")
    log = tmp_path / "reporter.log"
    store = store_of(own_client, KeySchema(PREFIX, 4))
    with NppaEndpoint(app_id=APP, secret_key=NEW, biz_ids=GAMES.values()) as endpoint:
        path = nppa_file(tmp_path, own_server.url, endpoint.url)
        collector = Collector(config=ReporterConfig.load(str(path), env={}))
        now = int(time.time())
        for i in range(2000):
            game = f"game-{i % 4}"
            collector.collect(
                game,
                (nppa.login if i % 8 < 4 else nppa.logout)(si=f"{game}-{i // 8}", ot=now, pi=PI),
            )
        assert collector.flush(timeout=20)
        collector.close(timeout=5)
        reporter = start_run(path, log)
        try:
            old_key = f"key:{APP}:{fingerprint(OLD)}"  # the hold of the reporters that use it
            wait_until(
                lambda: read_hold(store, f"nppa:{APP}", old_key).held, timeout=30, what="held"
            )
            began = time.monotonic()
            status = reporter_cli("status", "--json", "--no-shards", "--config", str(path))
            assert json.loads(status.stdout)["hold"]["cause"] == "nppa 1011", status.stderr
            first = len(endpoint.requests)
            threading.Event().wait(3 * PROBE_SECONDS)
            probes = len(endpoint.requests) - first
            assert probes <= (time.monotonic() - began) / PROBE_SECONDS + 1
            assert read_totals(store).counter("dead_events") == 0
            assert {r.errcode for r in endpoint.requests} == {1011}

            key_file.write_text(NEW + "\n", encoding="utf-8")
            reporter.send_signal(signal.SIGHUP)
            wait_until(
                lambda: len(endpoint.accepted) == 2000,
                timeout=30,
                what="the whole backlog accepted",
            )
            assert reporter.poll() is None  # the same process
        finally:
            code = stop_run(reporter)
    text = log.read_text(encoding="utf-8")
    assert code == 0, text
    assert "SIGHUP: re-read [nppa] secret_key_file" in text
    assert f"sending held for key {fingerprint(OLD)} of app reload-app" in text
    assert f"the new key {fingerprint(NEW)} proved" in text and "sending resumed" in text
    assert OLD not in text and NEW not in text
    totals = read_totals(store)
    assert (totals.counter("delivered"), totals.counter("dead_events")) == (2000, 0)


def test_a_json_reporter_survives_sighup_and_takes_a_new_token(
    tmp_path: Path, own_server: Server, own_client: redis.Redis
) -> None:
    token = tmp_path / "token"
    token.write_text("Bearer first-token-value\n", encoding="utf-8")
    log = tmp_path / "reporter.log"
    with LocalEndpoint() as endpoint:
        path = tmp_path / "json.toml"
        path.write_text(
            textwrap.dedent(f"""
            [redis]
            url = "{own_server.url}"
            key_prefix = "{PREFIX}"
            shards = 4
            [reporter]
            linger_ms = 50
            poll_interval_ms = 20
            [sink]
            url = "{endpoint.url}"
            [sink.header_files]
            Authorization = "{token}"
        """),
            encoding="utf-8",
        )
        reporter = start_run(path, log)
        try:
            collector = Collector(url=own_server.url, key_prefix=PREFIX, shards=4)
            collector.collect("game", {"n": 1})
            assert collector.flush(timeout=10)
            wait_until(lambda: len(endpoint.received) == 1, timeout=30, what="first POST")
            reporter.send_signal(signal.SIGHUP)  # nothing changed
            wait_until(
                lambda: "SIGHUP: re-read" in log.read_text(encoding="utf-8"),
                timeout=30,
                what="the re-read logged",
            )
            token.write_text("Bearer second-token-value", encoding="utf-8")
            reporter.send_signal(signal.SIGHUP)
            wait_until(
                lambda: (
                    "(changed)" in log.read_text(encoding="utf-8")
                    or "changed: the new" in log.read_text(encoding="utf-8")
                ),
                timeout=30,
                what="the change logged",
            )  # by SIGHUP or the file watch
            collector.collect("game", {"n": 2})
            assert collector.flush(timeout=10)
            collector.close(timeout=5)
            wait_until(lambda: len(endpoint.received) == 2, timeout=30, what="second POST")
            assert reporter.poll() is None
        finally:
            code = stop_run(reporter)
    text = log.read_text(encoding="utf-8")
    assert code == 0, text
    tokens = [r.headers.get("Authorization") for r in endpoint.received]
    assert tokens == ["Bearer first-token-value", "Bearer second-token-value"]
    assert "[sink] header_files.Authorization (unchanged)" in text
    assert "[sink] header_files.Authorization (changed)" in text or "changed: the new" in text
    assert "token-value" not in text
