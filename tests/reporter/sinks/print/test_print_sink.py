"""The ``print`` sink: each batch as a JSON line on standard output, in a sender of its own and
in ``telemetry-reporter run`` as a user starts it to try the reporter without an endpoint."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path
from typing import BinaryIO

import orjson
import pytest

from collector import Collector, ConfigError
from collector.config import build_config, raw_settings
from reporter._config import ReporterConfig
from reporter._senders.outcome import DELIVERED, RETRY
from reporter._sinks.print.sender import PrintSender
from tests.support.polling import wait_until
from tests.support.processes import child_env, reporter_cli
from tests.support.servers import Server
from tests.support.sources import ROOT


def print_config(**sink: object) -> ReporterConfig:
    raw = raw_settings(ReporterConfig())
    raw["sink"].update({"kind": "print", **sink})
    return build_config(raw, "test", env={}, cls=ReporterConfig)


def test_a_batch_is_one_line_holding_what_the_json_sink_would_post() -> None:
    out = io.BytesIO()
    sender = PrintSender(lambda: out)
    events = [orjson.dumps({"player": "p1", "名字": "玩家"}), b'{"n":2}']
    outcome = sender.send("my-game", "b-1.0", events)
    assert outcome.kind == DELIVERED
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert orjson.loads(lines[0]) == {
        "game": "my-game",
        "batch_id": "b-1.0",
        "events": [{"player": "p1", "名字": "玩家"}, {"n": 2}],
    }


def test_concurrent_batches_never_share_a_line() -> None:
    out = io.BytesIO()
    sender = PrintSender(lambda: out)
    event = orjson.dumps({"pad": "x" * 4000})

    def send_many(worker: int) -> None:
        for i in range(50):
            sender.send(f"game-{worker}", f"{worker}.{i}", [event] * 8)

    threads = [threading.Thread(target=send_many, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    bodies = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert sorted(b["batch_id"] for b in bodies) == sorted(
        f"{w}.{i}" for w in range(4) for i in range(50)
    )
    assert all(len(b["events"]) == 8 for b in bodies)


def test_a_write_that_fails_is_retried_not_delivered() -> None:
    closed = io.BytesIO()
    closed.close()

    class Broken(io.BytesIO):
        def write(self, data: object) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    broken: BinaryIO = Broken()
    for stream in (closed, broken):
        outcome = PrintSender(lambda s=stream: s).send("g", "b.0", [b"{}"])  # type: ignore[misc]
        assert outcome.kind == RETRY
        assert outcome.reason.startswith("print: cannot write to standard output")


def test_an_unknown_kind_names_every_kind() -> None:
    with pytest.raises(ConfigError) as info:
        print_config(kind="stdout")
    message = str(info.value)
    assert "[sink] kind" in message
    for kind in ("json", "nppa", "print"):
        assert repr(kind) in message or f'"{kind}"' in message


def test_check_config_accepts_it_and_says_a_url_is_not_used(tmp_path: Path) -> None:
    path = tmp_path / "print.toml"
    path.write_text('[sink]\nkind = "print"\n', encoding="utf-8")
    quiet = reporter_cli("check-config", str(path))
    assert quiet.returncode == 0, quiet.stderr
    assert "warning" not in quiet.stderr
    path.write_text('[sink]\nkind = "print"\nurl = "http://ingest.invalid/"\n', encoding="utf-8")
    noted = reporter_cli("check-config", str(path))
    assert noted.returncode == 0, noted.stderr
    assert "[sink] url is not used" in noted.stderr


def test_run_prints_every_collected_event_once(tmp_path: Path, own_server: Server) -> None:
    config = tmp_path / "try.toml"
    config.write_text(
        textwrap.dedent(f"""
        [redis]
        url = "{own_server.url}"

        [reporter]
        linger_ms = 100
        poll_interval_ms = 50

        [sink]
        kind = "print"
    """),
        encoding="utf-8",
    )
    games = ["game-a", "game-b"]
    with Collector(url=own_server.url) as telemetry:
        for i in range(300):
            for game in games:
                telemetry.collect(game, {"id": f"{game}#{i}"})
        assert telemetry.flush(timeout=30)

    out_path = tmp_path / "stdout.jsonl"
    with open(out_path, "wb") as out, open(tmp_path / "stderr.log", "wb") as err:
        reporter = subprocess.Popen(
            [sys.executable, "-m", "reporter", "run", "--config", str(config)],
            cwd=ROOT,
            env=child_env(),
            stdout=out,
            stderr=err,
        )
    try:

        def lines() -> list[bytes]:
            return out_path.read_bytes().splitlines()

        wait_until(
            lambda: sum(len(orjson.loads(line)["events"]) for line in lines()) >= 600,
            timeout=60,
            step=0.05,
            what="every event printed",
        )
        reporter.send_signal(signal.SIGTERM)
        assert reporter.wait(timeout=30) == 0
    finally:
        if reporter.poll() is None:
            reporter.kill()
            reporter.wait()

    bodies = [orjson.loads(line) for line in lines()]
    ids = Counter(e["id"] for body in bodies for e in body["events"])
    assert ids == Counter(f"{g}#{i}" for g in games for i in range(300))
    assert all({e["id"].split("#")[0] for e in b["events"]} == {b["game"]} for b in bodies)
    stderr = (tmp_path / "stderr.log").read_text(encoding="utf-8")
    assert "sink print (standard output)" in stderr
    assert "delivered=600" in stderr  # the stopped line counts them as delivered
