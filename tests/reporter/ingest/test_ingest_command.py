"""``telemetry-reporter ingest --config FILE`` as an operator runs it, and its ``[ingest]``
section: validated in one place with the others, loopback by default."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest
import redis

from collector import ConfigError
from reporter._config import ReporterConfig
from tests.support.ingest_requests import TOKEN, StartIngest, as_array, headers, ingest_config
from tests.support.polling import wait_until
from tests.support.processes import child_env
from tests.support.servers import free_port


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_the_command_serves_until_sigterm_then_stores_what_it_took(
    tmp_path: Path, redis_url: str, r: redis.Redis, token_file: str
) -> None:
    port = free_port()
    config = write(
        tmp_path / "ingest.toml",
        f"""
        [redis]
        url = "{redis_url}"
        key_prefix = "cmd"

        [collector]
        flush_interval_ms = 60000  # stored only by the flush at SIGTERM

        [ingest]
        listen = "127.0.0.1:{port}"
        token_file = "{token_file}"
        """,
    )
    log = tmp_path / "ingest.log"
    with open(log, "w", encoding="utf-8") as err:
        child = subprocess.Popen(
            [sys.executable, "-m", "reporter", "ingest", "--config", str(config)],
            cwd=tmp_path,
            env=child_env(),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        wait_until(lambda: "serving" in log.read_text(encoding="utf-8"), what="the server up")
        url = f"http://127.0.0.1:{port}/v1/games/arena/events"
        events = as_array([{"seq": i} for i in range(300)])
        answer = httpx.post(url, content=events, headers=headers(), timeout=10)
        assert answer.status_code == 202, answer.text
        child.send_signal(signal.SIGTERM)
        code = child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    text = log.read_text(encoding="utf-8")
    assert code == 0, text
    assert TOKEN not in text
    assert re.search(r"ingest stopped: .*events taken 300; SDK accepted=300 stored=300", text)
    (queue,) = r.keys("{cmd:*}:q:arena")
    assert r.llen(queue) == 300


def test_it_binds_where_configured_and_loopback_by_default(
    redis_url: str, start_ingest: StartIngest
) -> None:
    assert ReporterConfig().ingest.listen == "127.0.0.1:8088"
    ingest = start_ingest(ingest_config(redis_url))
    assert ingest.url.startswith("http://127.0.0.1:")


def test_a_port_taken_is_an_error_naming_the_address(
    redis_url: str, start_ingest: StartIngest
) -> None:
    first = start_ingest(ingest_config(redis_url))
    taken = first.url.removeprefix("http://")
    with pytest.raises(Exception, match=r"\[ingest\] listen: cannot serve on 127\.0\.0\.1:"):
        start_ingest(ingest_config(redis_url, ingest={"listen": taken}))


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ('listen = "8088"', r"\[ingest\] listen: expected \"host:port\""),
        ("lisen = 1", r"\[ingest\] unknown key 'lisen'"),
        ("max_body_bytes = 10", r"\[ingest\] max_body_bytes"),
        ("max_events_per_request = 200000", r"at most \[collector\] max_buffer_events \(100000\)"),
        ('token_file = "/no/such/file"', r"\[ingest\] token_file: cannot read"),
        ('token_file = "{empty}"', r"\[ingest\] token_file: .* is empty"),
        ('token_file = "{spaced}"', r"\[ingest\] token_file: .*does not hold one bearer token"),
    ],
)
def test_the_section_is_checked_with_the_file_and_key_named(
    tmp_path: Path, section: str, message: str
) -> None:
    empty = write(tmp_path / "empty", " \n")
    spaced = write(tmp_path / "spaced", "two words-0123456789abcdef\n")
    path = write(
        tmp_path / "bad.toml", "[ingest]\n" + section.format(empty=empty, spaced=spaced) + "\n"
    )
    with pytest.raises(ConfigError, match=message) as caught:
        ReporterConfig.load(str(path), env={})
    assert str(path) in str(caught.value)
    assert "two words" not in str(caught.value)


def test_a_small_buffer_keeps_a_config_without_ingest_valid(tmp_path: Path) -> None:
    path = write(tmp_path / "small.toml", "[collector]\nmax_buffer_events = 1000\n")
    config = ReporterConfig.load(str(path), env={})
    assert config.ingest.max_events_per_request > config.collector.max_buffer_events
    assert config.ingest.events_per_request(config.collector.max_buffer_events) == 1000


def test_every_interface_without_a_token_is_a_warning(tmp_path: Path) -> None:
    path = write(tmp_path / "open.toml", '[ingest]\nlisten = "0.0.0.0:8088"\n')
    notices = ReporterConfig.load(str(path), env={}).notices
    assert any("anyone who reaches it can send events" in n for n in notices)
    token = write(tmp_path / "token", "x" * 32)
    path.write_text(f'[ingest]\nlisten = "0.0.0.0:8088"\ntoken_file = "{token}"\n')
    assert not any("[ingest]" in n for n in ReporterConfig.load(str(path), env={}).notices)
    token.write_text("s3cret!")  # taken, with a warning
    notices = ReporterConfig.load(str(path), env={}).notices
    assert any("a token of 7 characters is easy to guess" in n for n in notices)
    assert not any("s3cret" in n for n in notices)


def test_sighup_reads_the_token_again(
    redis_url: str, token_file: str, start_ingest: StartIngest
) -> None:
    ingest = start_ingest(ingest_config(redis_url, token_file))
    url = f"{ingest.url}/v1/games/arena/events"
    new = "rotated-token-0123456789abcdef"
    Path(token_file).write_text(new)
    ingest.reload()
    deadline = time.monotonic() + 5
    assert httpx.post(url, content=b"[]", headers=headers(), timeout=10).status_code == 401
    assert httpx.post(url, content=b"[]", headers=headers(new), timeout=10).status_code == 202
    Path(token_file).write_text("two words")  # not a token: the one in use is kept
    ingest.reload()
    assert httpx.post(url, content=b"[]", headers=headers(new), timeout=10).status_code == 202
    assert time.monotonic() < deadline
