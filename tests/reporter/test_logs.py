"""Logs: level and format options, JSON lines with structured fields, the start-up and stopped
lines, and no secret or event payload in any line at any level (a whole ``run -v`` against a
server that wants a password, a sink URL with a key in its query, a secret header, and the
anti-addiction key)."""

from __future__ import annotations

import io
import json
import logging
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from collector import Collector, nppa
from collector.counters import REPORTER
from collector.store import KeySchema
from reporter._commands.cli import startup_line, stopped_line
from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint
from reporter._demo.nppa_mock import NppaEndpoint
from reporter._logging import (
    JsonFormatter,
    batch_fields,
    config_secrets,
    configure_logging,
    log_settings,
    masked_url,
    note_secrets,
)
from reporter._service.stopping import Stopped
from tests.support.fixtures import MakeLockedServer
from tests.support.polling import wait_until
from tests.support.processes import start_run, stop_run
from tests.support.servers import Server

pytestmark = pytest.mark.usefixtures("restore_logging")

REDIS_PASSWORD = "S3CRET-redis-pw-4711"
API_KEY = "k3y-in-the-query-9f8e7d"
HEADER_TOKEN = "hdr-token-7a6b5c4d"
NPPA_KEY = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
PAYLOAD = "PLAYER-payload-5c1e"  # a value inside every event: never to be logged
PI = "3" * 38
PREFIX = "logs"


# -- units -------------------------------------------------------------------------------------


def record(
    msg: str, *args: object, level: int = logging.INFO, **extra: object
) -> logging.LogRecord:
    rec = logging.LogRecord("reporter", level, __file__, 1, msg, args, None)
    rec.__dict__.update(extra)
    return rec


def test_json_lines_carry_the_structured_fields() -> None:
    line = JsonFormatter().format(
        record(
            "batch %s dead", "b.0", game="g", shard=3, batch_id="b.0", attempt=2, status_code=400
        )
    )
    parsed = json.loads(line)
    assert "\n" not in line
    assert {
        k: parsed[k]
        for k in (
            "level",
            "logger",
            "message",
            "game",
            "shard",
            "batch_id",
            "attempt",
            "status_code",
        )
    } == {
        "level": "INFO",
        "logger": "reporter",
        "message": "batch b.0 dead",
        "game": "g",
        "shard": 3,
        "batch_id": "b.0",
        "attempt": 2,
        "status_code": 400,
    }
    assert parsed["time"].endswith("Z") and "T" in parsed["time"]
    assert set(parsed) == {
        "time",
        "level",
        "logger",
        "message",
        "game",
        "shard",
        "batch_id",
        "attempt",
        "status_code",
    }


def test_json_lines_hold_a_traceback_on_one_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        rec = logging.LogRecord(
            "reporter", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    line = JsonFormatter().format(rec)
    assert "\n" not in line
    assert "ValueError: boom" in json.loads(line)["exception"]


def test_batch_fields_read_the_status_code() -> None:
    assert batch_fields("g", "b", 1, 2, "HTTP 503: busy", retry_in=1.5) == {
        "game": "g",
        "batch_id": "b",
        "shard": 1,
        "attempt": 2,
        "status_code": 503,
        "retry_in": 1.5,
    }
    assert batch_fields("g", "b", reason="ConnectError: refused") == {"game": "g", "batch_id": "b"}


def test_log_settings_come_from_the_options_then_the_environment() -> None:
    assert log_settings(None, None, {}) == ("info", "text")
    env = {"TELEMETRY_LOG_LEVEL": "WARNING", "TELEMETRY_LOG_FORMAT": "json"}
    assert log_settings(None, None, env) == ("warning", "json")
    assert log_settings("debug", "text", env) == ("debug", "text")
    with pytest.raises(ValueError, match=r"TELEMETRY_LOG_FORMAT.*'xml'"):
        log_settings(None, None, {"TELEMETRY_LOG_FORMAT": "xml"})


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://h:1/ingest?api_key=abc&x=1", "http://h:1/ingest?api_key=***&x=***"),
        ("https://u:pw@h/i", "https://u:***@h/i"),
        ("redis://:pw@127.0.0.1:6379/0?password=pw", "redis://:***@127.0.0.1:6379/0?password=***"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ],
)
def test_masked_urls(url: str, shown: str) -> None:
    assert masked_url(url) == shown


def test_every_config_secret_is_masked_in_whatever_the_handler_writes() -> None:
    config = ReporterConfig.load(
        None,
        env={
            "TELEMETRY_REDIS_URL": f"redis://u:{REDIS_PASSWORD}@h:1/0",
            "TELEMETRY_SINK_URL": f"https://h/i?api_key={API_KEY}&format=json",
            "TELEMETRY_SINK_HEADERS": f'{{ Authorization = "Bearer {HEADER_TOKEN}", '
            f'X-Tenant = "acme" }}',
            "TELEMETRY_NPPA_SECRET_KEY": NPPA_KEY,
        },
    )
    assert set(config_secrets(config)) == {
        REDIS_PASSWORD,
        API_KEY,
        f"Bearer {HEADER_TOKEN}",
        HEADER_TOKEN,
        NPPA_KEY,
    }
    out = io.StringIO()
    configure_logging("debug", "text", out)  # the handler and level: put back by the fixture
    note_secrets(config)
    logging.getLogger("reporter.test").warning(
        "leak %s %s %s %s acme json", REDIS_PASSWORD, API_KEY, HEADER_TOKEN, NPPA_KEY
    )
    written = out.getvalue()
    assert "leak *** *** *** *** acme json" in written


def test_the_start_up_line_names_everything_masked(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(
        textwrap.dedent(f"""
        [redis]
        url = "redis://reporter:{REDIS_PASSWORD}@cache:6379/0"
        shards = 8
        [reporter]
        workers = 3
        [reporter.hot_games]
        "big" = 2
        [sink]
        url = "https://ingest.example/v1?api_key={API_KEY}"
    """),
        encoding="utf-8",
    )
    config = ReporterConfig.load(str(path), env={})
    message, fields = startup_line(config, "no rate limit")
    assert message == (
        f"telemetry-reporter: config {path}; redis redis://reporter:***@cache:6379/0; key "
        "prefix 'telemetry'; 8 shards; sink json https://ingest.example/v1?api_key=*** (no "
        "rate limit); pools default=3, control=2, hot:big=2; metrics "
        f"{fields['metrics']}; version {fields['version']}"
    )
    assert fields["pools"] == {"default": 3, "control": 2, "hot:big": 2}
    assert (fields["config"], fields["shards"]) == (str(path), 8)
    assert REDIS_PASSWORD not in str(fields) and API_KEY not in str(fields)


def test_the_stopped_line_has_every_reporter_counter() -> None:
    message, fields = stopped_line(Stopped({"delivered": 10, "batches_delivered": 1}))
    counters = fields["counters"]
    assert isinstance(counters, dict)
    assert list(counters) == [str(c) for c in REPORTER]
    assert (counters["delivered"], counters["batches_released"]) == (10, 0)
    assert message.startswith("stopped: stale=0, delivered=10, batches_delivered=1, ")
    assert "left to lease" not in message and fields["left_to_lease"] == []


def test_the_stopped_line_lists_what_was_left_to_lease_expiry() -> None:
    left = tuple(f"b{i}" for i in range(12))
    message, fields = stopped_line(Stopped({}, left, ("sweep:3",)))
    assert message.endswith(
        "; left to lease expiry: 12 batches (b0, b1, b2, b3, b4, b5, b6, "
        "b7, b8, b9, and 2 more); still blocked: 1 job (sweep:3)"
    )
    assert fields["left_to_lease"] == list(left) and fields["blocked_jobs"] == ["sweep:3"]


# -- a whole run -------------------------------------------------------------------------------


@pytest.fixture
def locked_server(make_locked_server: MakeLockedServer) -> Server:
    """A server every client must log in to (user ``reporter``, ``REDIS_PASSWORD``)."""
    return make_locked_server(REDIS_PASSWORD)


def redis_url(server: Server) -> str:
    return f"redis://reporter:{REDIS_PASSWORD}@127.0.0.1:{server.port}/0"


def assert_clean(text: str, *secrets: str) -> None:
    for secret in (REDIS_PASSWORD, API_KEY, HEADER_TOKEN, PAYLOAD, *secrets):
        assert secret not in text, f"{secret!r} is in the log"


def answer(number: int, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    """The bad game is refused for good; two early requests fail and are retried."""
    if body.get("game") == "bad-game":
        return 400, {}, b'{"error":"schema"}'
    if number <= 2:
        return 503, {}, b"busy"
    return 200, {}, b'{"ok":true}'


def test_a_debug_run_logs_json_lines_without_secrets_or_payloads(
    tmp_path: Path, locked_server: Server
) -> None:
    endpoint = LocalEndpoint(answer).start()
    config = tmp_path / "run.toml"
    config.write_text(
        textwrap.dedent(f"""
        [redis]
        url = "{redis_url(locked_server)}"
        key_prefix = "{PREFIX}"
        shards = 4
        [reporter]
        linger_ms = 50
        poll_interval_ms = 20
        [retry]
        initial_delay_ms = 20
        max_delay_ms = 100
        [sink]
        url = "{endpoint.url}?api_key={API_KEY}"
        [sink.headers]
        Authorization = "Bearer {HEADER_TOKEN}"
    """),
        encoding="utf-8",
    )
    with Collector(url=redis_url(locked_server), key_prefix=PREFIX, shards=4, mode="sync") as c:
        for i in range(300):
            c.collect("good-game", {"player": PAYLOAD, "n": i})
        for i in range(5):
            c.collect("bad-game", {"player": PAYLOAD, "n": i})
    log = tmp_path / "reporter.log"
    reporter = start_run(config, log, "-v", "--log-format", "json")
    try:
        wait_until(
            lambda: len(endpoint.events()) >= 300, timeout=60, what="the good game delivered"
        )
        dead = [k.dead for k in KeySchema(PREFIX, 4).all_shards()]
        with redis.Redis.from_url(redis_url(locked_server)) as client:
            wait_until(
                lambda: sum(client.llen(k) for k in dead) == 1, what="the bad game dead-lettered"
            )
        wait_until(
            lambda: "dead-lettered" in log.read_text(encoding="utf-8"),
            what="the dead letter logged",
        )
    finally:
        code = stop_run(reporter)
        endpoint.stop()
    text = log.read_text(encoding="utf-8")
    assert code == 0, text
    assert endpoint.request_headers[0]["Authorization"] == f"Bearer {HEADER_TOKEN}"  # sent
    assert_clean(text)
    lines = [json.loads(line) for line in text.splitlines()]  # every line is one object
    assert {"time", "level", "logger", "message"} <= set(lines[0])
    [start] = [line for line in lines if line["message"].startswith("telemetry-reporter:")]
    assert start["redis"] == f"redis redis://reporter:***@127.0.0.1:{locked_server.port}/0"
    assert start["sink"] == f"json {endpoint.url}?api_key=***"
    assert (start["shards"], start["pools"]) == (4, {"default": 4, "control": 2})
    assert start["config"] == str(config) and "metrics" in start
    [dead_line] = [line for line in lines if "dead-lettered" in line["message"]]
    assert {k: dead_line[k] for k in ("level", "game", "attempt", "status_code")} == {
        "level": "ERROR",
        "game": "bad-game",
        "attempt": 1,
        "status_code": 400,
    }
    assert dead_line["batch_id"] in dead_line["message"] and "shard" in dead_line
    retries = [line for line in lines if line.get("status_code") == 503]
    assert retries and all(line["game"] == "good-game" for line in retries)
    [stopped] = [line for line in lines if line["message"].startswith("stopped: ")]
    assert stopped["counters"]["delivered"] == 300
    assert stopped["counters"]["dead_events"] == 5


def test_an_nppa_debug_run_logs_no_secret_key_or_player_data(
    tmp_path: Path, locked_server: Server
) -> None:
    endpoint = NppaEndpoint(app_id="app-logs", secret_key=NPPA_KEY, biz_ids=["1101999999"]).start()
    config = tmp_path / "nppa.toml"
    config.write_text(
        textwrap.dedent(f"""
        [redis]
        url = "{redis_url(locked_server)}"
        key_prefix = "{PREFIX}"
        shards = 4
        [reporter]
        linger_ms = 50
        poll_interval_ms = 20
        [sink]
        kind = "nppa"
        [nppa]
        base_url = "{endpoint.url}"
        app_id = "app-logs"
        secret_key = "{NPPA_KEY}"
        [games."farm"]
        biz_id = "1101999999"
    """),
        encoding="utf-8",
    )
    sessions = [f"{PAYLOAD[:20]}{i:02d}" for i in range(20)]
    with Collector(url=redis_url(locked_server), key_prefix=PREFIX, shards=4, mode="sync") as c:
        for si in sessions:
            c.collect("farm", nppa.login(si=si, ot=int(time.time()), pi=PI))
    log = tmp_path / "nppa.log"
    reporter = start_run(config, log, "--log-level", "debug")
    try:
        wait_until(lambda: len(endpoint.accepted) >= 20, timeout=60, what="every login accepted")
    finally:
        code = stop_run(reporter)
        endpoint.stop()
    text = log.read_text(encoding="utf-8")
    assert code == 0, text
    assert_clean(text, NPPA_KEY, PI, *sessions)
    assert f"sink nppa {endpoint.url}/behavior/collection/loginout app app-logs" in text
    assert "stopped: stale=0, delivered=20," in text


def test_the_log_level_variable_reaches_the_run(tmp_path: Path, locked_server: Server) -> None:
    config = tmp_path / "quiet.toml"
    config.write_text(
        f'[redis]\nurl = "{redis_url(locked_server)}"\nkey_prefix = "q"\n'
        '[sink]\nurl = "http://127.0.0.1:9/ingest"\n',
        encoding="utf-8",
    )
    config.chmod(0o600)  # it holds Redis's password: readable by others, that is a WARNING
    log = tmp_path / "quiet.log"
    reporter = start_run(config, log, env={"TELEMETRY_LOG_LEVEL": "warning"})
    try:
        with redis.Redis.from_url(redis_url(locked_server)) as client:
            wait_until(
                lambda: client.zcard(KeySchema("q", 16).reporters) == 1,
                what="the reporter's heartbeat",
            )
    finally:
        code = stop_run(reporter)
    assert code == 0
    assert log.read_text(encoding="utf-8") == ""  # info lines (start, stopped) left out
