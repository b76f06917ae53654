"""``[redis] sentinels``, ``sentinel_service``, ``sentinel_password``: checked when the file
is loaded, each error naming the key; the Sentinel backend chosen from them; the password
never shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collector import Collector, TelemetryConfig
from collector.store import Sentinel, describe_settings, open_backend
from collector.store._modes import backend_class
from tests.support import config_files
from tests.support.config_files import write
from tests.support.markers import secret

DATA_PW = secret("data-pw")

SENTINELS = '["127.0.0.1:26379", "127.0.0.1:26380", "[::1]:26381"]'
SECRET = secret("sentinel-pw")


def sentinel_file(tmp_path: Path, extra: str = "") -> Path:
    return write(
        tmp_path,
        f"""
[redis]
url = "redis://:{DATA_PW}@/2"
sentinels = {SENTINELS}
sentinel_service = "telemetry"
sentinel_password = "{SECRET}"
{extra}
""",
    )


def test_the_sentinel_settings_select_the_sentinel_backend(tmp_path: Path) -> None:
    config = TelemetryConfig.load(str(sentinel_file(tmp_path)), env={})
    assert config.redis.sentinels == ("127.0.0.1:26379", "127.0.0.1:26380", "[::1]:26381")
    assert backend_class(config.redis) is Sentinel
    assert describe_settings(config.redis) == (
        "sentinel service 'telemetry' via 127.0.0.1:26379, 127.0.0.1:26380, [::1]:26381"
    )
    backend = open_backend(config.redis)  # builds the clients; connects on first use
    try:
        assert isinstance(backend, Sentinel)
        assert backend.describe() == describe_settings(config.redis)
        pool = backend.client.connection_pool.connection_kwargs
        assert (pool["password"], pool["db"]) == (DATA_PW, 2)
        assert "host" not in pool  # the primary's address comes from the sentinels
        sentinel_kwargs = backend.sentinels.sentinels[2].connection_pool.connection_kwargs
        assert (sentinel_kwargs["host"], sentinel_kwargs["port"]) == ("::1", 26381)
        assert sentinel_kwargs["password"] == SECRET
        assert sentinel_kwargs["socket_timeout"] == config.redis.socket_timeout_seconds
    finally:
        backend.close()


def test_the_sentinel_password_is_never_shown(tmp_path: Path) -> None:
    config = TelemetryConfig.load(str(sentinel_file(tmp_path)), env={})
    shown = [
        repr(config),
        repr(config.redis),
        json.dumps(config.masked()),
        describe_settings(config.redis),
    ]
    for text in shown:
        assert SECRET not in text and DATA_PW not in text
    assert config.masked()["redis"]["sentinel_password"] == "***"
    assert config.masked()["redis"]["sentinels"] == config.redis.sentinels


def test_the_sentinels_can_come_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "[redis]\nsentinel_service = 'telemetry'\n")
    config = TelemetryConfig.load(
        str(path), env={"TELEMETRY_REDIS_SENTINELS": '["10.0.0.1:26379", "10.0.0.2:26379"]'}
    )
    assert config.redis.sentinels == ("10.0.0.1:26379", "10.0.0.2:26379")
    error = config_files.load_error(path, {"TELEMETRY_REDIS_SENTINELS": '["10.0.0.1"]'})
    assert "environment variable TELEMETRY_REDIS_SENTINELS" in error
    assert "[redis] sentinels" in error and "host:port" in error


ERRORS = [
    ("cluster = true", ["[redis] sentinels", "cluster = true"]),
    ('url = "unix:///tmp/redis.sock"', ["[redis] url", "unix://"]),
]


@pytest.mark.parametrize(("extra", "expected"), ERRORS, ids=[e for e, _ in ERRORS])
def test_sentinels_with_what_cannot_go_with_them(
    tmp_path: Path, extra: str, expected: list[str]
) -> None:
    text = sentinel_file(tmp_path).read_text().replace(f'url = "redis://:{DATA_PW}@/2"', "")
    error = config_files.load_error(write(tmp_path, text + extra + "\n"))
    for part in expected:
        assert part in error
    assert SECRET not in error


BAD = [
    ('sentinels = ["127.0.0.1:26379"]', ["[redis] sentinel_service", "found none"]),
    ('sentinels = ["127.0.0.1:26379"]\nsentinel_service = " "', ["[redis] sentinel_service"]),
    ('sentinel_service = "telemetry"', ["[redis] sentinel_service", "sentinels is empty"]),
    (f'sentinel_password = "{SECRET}"', ["[redis] sentinel_password", "sentinels is empty"]),
    (
        'sentinels = "127.0.0.1:26379"\nsentinel_service = "t"',
        ["[redis] sentinels", "expected a list of strings"],
    ),
    ('sentinels = [26379]\nsentinel_service = "t"', ["[redis] sentinels[0]", "a string"]),
    ('sentinels = ["sentinel-1"]\nsentinel_service = "t"', ["[redis] sentinels", "host:port"]),
    ('sentinels = ["h:0"]\nsentinel_service = "t"', ["[redis] sentinels", "'h:0'"]),
    ('sentinels = ["h:65536"]\nsentinel_service = "t"', ["[redis] sentinels", "1 to 65535"]),
    ('sentinels = [":26379"]\nsentinel_service = "t"', ["[redis] sentinels", "host:port"]),
    ('sentinels = ["redis://h:26379"]\nsentinel_service = "t"', ["[redis] sentinels"]),
    (f'sentinels = ["u:{SECRET}@h:26379"]\nsentinel_service = "t"', ["[redis] sentinels"]),
    ('sentinels = ["h:1", "h:1"]\nsentinel_service = "t"', ["[redis] sentinels", "twice"]),
]


@pytest.mark.parametrize(("text", "expected"), BAD, ids=[t for t, _ in BAD])
def test_bad_sentinel_settings_name_the_key(tmp_path: Path, text: str, expected: list[str]) -> None:
    path = write(tmp_path, f"[redis]\n{text}\n")
    error = config_files.load_error(path)
    assert error.startswith(str(path))
    for part in expected:
        assert part in error, error
    assert SECRET not in error


def test_collector_keywords_take_the_sentinel_settings() -> None:
    collector = Collector(
        sentinels=["127.0.0.1:26379"],
        sentinel_service="telemetry",
        sentinel_password=SECRET,
        disabled=True,
    )
    try:
        assert collector.config.redis.sentinels == ("127.0.0.1:26379",)
        assert SECRET not in repr(collector.config)
    finally:
        collector.close()
