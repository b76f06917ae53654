"""Text from outside never reaches a terminal raw: an endpoint's answer full of escape
sequences, an anti-addiction ``errmsg`` with a newline, and names and ids read back from
Redis leave no control character in ``dead list``, ``dead show``, ``status`` or the text log
of a real ``run``, and a newline forges no log line."""

from __future__ import annotations

import json
import logging
import re
import sys
import textwrap
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

import orjson
import pytest
import redis

from collector import Collector, nppa
from collector.store import KeySchema
from collector.text import printable, printable_json
from reporter._commands.cli import main
from reporter._demo.endpoint import LocalEndpoint
from reporter._logging import make_formatter
from tests.support.nppa_sends import PI, SECRET
from tests.support.polling import wait_until
from tests.support.processes import start_run, stop_run

pytestmark = pytest.mark.usefixtures("restore_logging")

PREFIX = "clean"
SHARDS = 4
# A terminal title, a cleared screen, red text, a bell, DEL, a C1 CSI, a bidi override.
HOSTILE = "\x1b]0;PWNED\x07\x1b[2J\x1b[31m bad\x7f\x9b\u202e"
FORGED = "2026-11-26 10:00:00,000 ERROR reporter: FORGED"
# Every control character but the newline that ends a line (C0, DEL, C1), and the line and
# paragraph separators some terminals and log viewers take for a newline.
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202e]")


def assert_clean(text: str) -> None:
    found = CONTROL.findall(text)
    assert not found, f"control characters {found!r} in {text!r}"
    assert not any(line.startswith("2026-11-26 10:00:00") for line in text.splitlines()), text


@pytest.fixture
def hostile_endpoint() -> Iterator[LocalEndpoint]:
    """Refuses every batch with the hostile text, and a newline, in its error field."""
    body = orjson.dumps({"error": f"{HOSTILE}\n{FORGED}"})
    with LocalEndpoint(lambda _n, _b: (400, {}, body)) as endpoint:
        yield endpoint


def config_text(redis_url: str, sink: str) -> str:
    return textwrap.dedent(f"""
        [redis]
        url = "{redis_url}"
        key_prefix = "{PREFIX}"
        shards = {SHARDS}
        [reporter]
        linger_ms = 50
        poll_interval_ms = 20
    """) + textwrap.dedent(sink)


def run_until_dead(config: Path, log: Path, redis_url: str, dead: int) -> str:
    """``telemetry-reporter run`` (text log) until ``dead`` batches are dead-lettered."""
    reporter = start_run(config, log, "--log-format", "text")
    try:
        keys = KeySchema(PREFIX, SHARDS).all_shards()
        with redis.Redis.from_url(redis_url) as client:
            wait_until(
                lambda: sum(client.llen(k.dead) for k in keys) >= dead,
                timeout=60,
                what="the refused batches dead-lettered",
            )
        wait_until(
            lambda: "dead-lettered" in log.read_text(encoding="utf-8"),
            what="the dead letter logged",
        )
    finally:
        code = stop_run(reporter)
    text = log.read_text(encoding="utf-8")
    assert code == 0, text
    return text


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert_clean(err)
    return out


def plant(client: redis.Redis, batch_id: str) -> None:
    """What anyone with write access to Redis can leave for ``status`` and ``dead`` to show:
    a game name in a dead letter's metadata, a shard's lease holder, a reporter id and an
    alert, each full of escapes and newlines."""
    schema = KeySchema(PREFIX, SHARDS)
    [keys] = [k for k in schema.all_shards() if client.hexists(k.batches, batch_id)]
    meta = json.loads(client.hget(keys.batches, batch_id))
    meta["g"] = f"game{HOSTILE}\n{FORGED}"
    client.hset(keys.batches, batch_id, json.dumps(meta))
    client.set(keys.owner, f"owner{HOSTILE}\n{FORGED}")
    client.zadd(schema.reporters, {f"reporter{HOSTILE}\n{FORGED}": time.time() * 1000 + 60_000})
    client.hset(
        schema.alerts,
        mapping={
            f"alert{HOSTILE}": json.dumps({"message": f"{HOSTILE}\n{FORGED}", "at": time.time()}),
            f"alert{HOSTILE}#count": 1,
        },
    )


def assert_commands_clean(capsys: pytest.CaptureFixture[str], config: Path) -> str:
    """Every command that shows dead letters or the shards; returns ``dead show``'s text."""
    out = cli(capsys, "dead", "list", "--config", str(config))
    assert_clean(out)
    listed = json.loads(cli(capsys, "dead", "list", "--json", "--config", str(config)))
    assert listed
    for shown in (
        cli(capsys, "dead", "list", "--json", "--config", str(config)),
        cli(capsys, "status", "--config", str(config)),
        cli(capsys, "status", "--json", "--config", str(config)),
        cli(capsys, "status", "--no-shards", "--config", str(config)),
    ):
        assert_clean(shown)
    detail = cli(capsys, "dead", "show", listed[0]["batch_id"], "--config", str(config))
    assert_clean(detail)
    return detail


def test_an_endpoints_escape_sequences_reach_no_terminal(
    tmp_path: Path,
    redis_url: str,
    hostile_endpoint: LocalEndpoint,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "json.toml"
    config.write_text(
        config_text(
            redis_url,
            f"""
        [sink]
        url = "{hostile_endpoint.url}"
    """,
        ),
        encoding="utf-8",
    )
    with Collector(url=redis_url, key_prefix=PREFIX, shards=SHARDS, mode="sync") as c:
        c.collect("victim", {"n": 1, "text": f"event{HOSTILE}"})
    log = run_until_dead(config, tmp_path / "json.log", redis_url, 1)
    assert_clean(log)
    assert "\\x1b]0;PWNED\\x07" in log  # shown escaped, not dropped: the operator sees it

    listed = json.loads(cli(capsys, "dead", "list", "--json", "--config", str(config)))
    assert [b["reason"].startswith("HTTP 400: \\x1b]0;PWNED\\x07") for b in listed] == [True]
    with redis.Redis.from_url(redis_url) as client:
        plant(client, listed[0]["batch_id"])
    detail = assert_commands_clean(capsys, config)
    shown = json.loads(detail)
    assert shown["events"] == [{"n": 1, "text": f"event{HOSTILE}"}]  # the event as it was


class NppaItemRefusals:
    """An anti-addiction interface that refuses every item (3005) with a hostile ``errmsg``."""

    def __init__(self) -> None:
        errmsg = f"{HOSTILE}\n{FORGED}"

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # small answers: no delayed-ACK wait

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = orjson.dumps(
                    {
                        "errcode": 0,
                        "errmsg": errmsg,
                        "data": {"results": [{"no": 1, "errcode": 3005, "errmsg": errmsg}]},
                    }
                )
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_an_errmsg_with_a_newline_forges_no_log_line(
    tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    interface = NppaItemRefusals()
    config = tmp_path / "nppa.toml"
    config.write_text(
        config_text(
            redis_url,
            f"""
        [sink]
        kind = "nppa"
        [nppa]
        base_url = "{interface.url}"
        app_id = "app-clean"
        secret_key = "{SECRET}"
        [games."farm"]
        biz_id = "1101999999"
    """,
        ),
        encoding="utf-8",
    )
    with Collector(url=redis_url, key_prefix=PREFIX, shards=SHARDS, mode="sync") as c:
        c.collect("farm", nppa.login(si="s" * 32, ot=int(time.time()), pi=PI))
    try:
        log = run_until_dead(config, tmp_path / "nppa.log", redis_url, 1)
        probed = cli(capsys, "check-config", "--connect", str(config))  # quotes errmsg too
    finally:
        interface.stop()
    assert_clean(log)
    assert "\\nFORGED" in log or "\\n2026-11-26" in log  # the newline is shown, escaped
    assert_clean(probed)
    assert "sink: ok" in probed and "\\x1b]0;PWNED" in probed
    detail = assert_commands_clean(capsys, config)
    assert "nppa 3005" in json.dumps(json.loads(detail))


# -- the helper and the formatters -------------------------------------------------------------


def test_printable_escapes_every_control_character_and_keeps_the_rest() -> None:
    for code in [*range(0x20), *range(0x7F, 0xA0)]:
        assert printable(chr(code)) == chr(code).encode("unicode_escape").decode()
    assert printable("a\nb", keep="\n") == "a\nb"
    assert printable('玩家 ok: {"x"} \\ é') == '玩家 ok: {"x"} \\ é'
    assert printable("\u202eevil") == "\\u202eevil"
    text = json.dumps({"s": "\x7f\x9b\u2028"}, ensure_ascii=False)
    assert json.loads(printable_json(text)) == {"s": "\x7f\x9b\u2028"}
    assert not CONTROL.search(printable_json(text))


def test_the_text_log_keeps_one_line_per_record_and_indents_a_traceback() -> None:
    formatter = make_formatter("text")
    record = logging.LogRecord(
        "reporter", logging.ERROR, __file__, 1, "refused: %s", (f"{HOSTILE}\n{FORGED}",), None
    )
    line = formatter.format(record)
    assert "\n" not in line and not CONTROL.search(line) and "\\nFORGED" not in line[:20]
    try:
        raise ValueError(f"peer said {HOSTILE}\n{FORGED}")
    except ValueError:
        record = logging.LogRecord(
            "reporter", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    lines = formatter.format(record).split("\n")
    assert lines[0].endswith("failed") and len(lines) > 2
    assert all(line.startswith("  ") for line in lines[1:]), lines
    assert not CONTROL.search("\n".join(lines))
    assert any("ValueError: peer said" in line for line in lines)
    json_line = make_formatter("json").format(record)
    assert not CONTROL.search(json_line) and "\n" not in json_line
