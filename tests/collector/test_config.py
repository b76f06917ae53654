"""The SDK's part of the config (``TelemetryConfig``): its sections of the shared file, the
reporter's left alone, and ``Collector()`` keyword arguments.  The file as a whole (every
section, errors, environment, secrets) is tested with the reporter's config in
``tests/reporter/test_config.py``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import redis

from collector import Collector, ConfigError, TelemetryConfig, TelemetryError
from collector.store import KeySchema
from tests.support import config_files
from tests.support.config_files import write
from tests.support.fixtures import MakeCollector
from tests.support.markers import secret
from tests.support.stored import queue_events, stats_of

PW = secret("pw")


def load_error(path: Path, env: Mapping[str, str] | None = None) -> str:
    return config_files.load_error(path, env, TelemetryConfig)


# -- the SDK's sections -------------------------------------------------------------------------


def test_the_reporters_sections_are_left_to_the_reporter(tmp_path: Path) -> None:
    """One file tunes both; the SDK neither reads nor judges what it does not use."""
    path = write(
        tmp_path,
        """
[buffer]
max_events_per_game = 50
[reporter]
batch_size = 64
[sink]
url = "http://ingest.invalid/"
[retry]
max_attempts = 3
[dead]
max_batches = 10
""",
    )
    config = TelemetryConfig.load(str(path), env={"TELEMETRY_REPORTER_BATCH_SIZE": "oops"})
    assert config.buffer.max_events_per_game == 50
    assert not hasattr(config, "reporter")
    assert set(config.masked()) == {"redis", "buffer", "collector", "games"}


SDK_ERRORS = [
    ("[bogus]\na = 1\n", ["unknown section [bogus]"]),
    ("[buffer]\nmax_event_byte = 100\n", ["[buffer]", "'max_event_byte'"]),
    ("[redis]\nshards = 3\n", ["[redis] shards", "power of two"]),
    ("[collector]\nmode = 'async'\n", ["[collector] mode", "'async'"]),
    ('[games."a b"]\nttl_seconds = 600\n', ["games", "'a b'", "game name"]),
    ("[redis]\nkey_prefix = '{tele}'\n", ["[redis] key_prefix", "'{tele}'"]),
]


@pytest.mark.parametrize(("text", "expected"), SDK_ERRORS, ids=[t for t, _ in SDK_ERRORS])
def test_sdk_errors_name_the_file_and_the_key(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    path = write(tmp_path, text)
    message = load_error(path)
    assert str(path) in message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        ("TELEMETRY_REDIS_SHARDS", "3", "power of two"),
        ("TELEMETRY_COLLECTOR_MODE", "fast", "'background'"),
        ("TELEMETRY_BUFFER_MAX_EVENT_BYTE", "100", "'max_event_byte'"),
    ],
)
def test_sdk_env_errors_name_the_variable(
    tmp_path: Path, var: str, value: str, expected: str
) -> None:
    message = load_error(write(tmp_path, ""), env={var: value})
    assert var in message
    assert expected in message


def test_secrets_of_the_sdk_are_masked(tmp_path: Path) -> None:
    path = write(tmp_path, '[redis]\nurl = "redis://user:${PW}@cache:6379/0"\n')
    config = TelemetryConfig.load(str(path), env={"PW": PW})
    assert config.redis.url == f"redis://user:{PW}@cache:6379/0"
    for text in (repr(config), repr(config.redis), repr(config.masked())):
        assert PW not in text


def test_redis_url_scheme_is_checked_on_load(tmp_path: Path) -> None:
    """A scheme typo must not wait for the first write (only a log line in background mode)."""
    path = write(tmp_path, f'[redis]\nurl = "http://user:{PW}@127.0.0.1:6379/0"\n')
    message = load_error(path)
    assert "[redis] url" in message
    assert PW not in message
    with pytest.raises(ConfigError, match=r"\[redis\] url"):
        Collector(url="http://127.0.0.1:6379/0")


def test_collector_from_config_reads_file_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "[redis]\nkey_prefix = 'fromfile'\n")
    monkeypatch.setenv("TELEMETRY_REDIS_SHARDS", "4")
    c = Collector.from_config(str(path), url="redis://127.0.0.1:1/0")
    try:
        assert c.config.redis.key_prefix == "fromfile"
        assert c.config.redis.shards == 4
        assert c.config.redis.url == "redis://127.0.0.1:1/0"
    finally:
        c.close()


def test_collector_repr_and_errors_mask_the_password() -> None:
    c = Collector(
        url=f"redis://user:{PW}@127.0.0.1:1/0",
        mode="sync",
        socket_timeout_seconds=0.2,
        connect_timeout_seconds=0.2,
    )
    try:
        assert PW not in repr(c)
        with pytest.raises(TelemetryError) as info:
            c.collect("g", {"a": 1})
        assert PW not in str(info.value)
    finally:
        c.close()


# -- Collector keyword arguments ----------------------------------------------------------------


def test_unknown_keyword_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="bogus"):
        Collector(url="redis://127.0.0.1:1/0", bogus=1)
    with pytest.raises(TypeError, match="batch_size"):
        Collector(batch_size=64)  # a reporter setting, not the collector's


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"shards": 3}, "[redis] shards"),
        ({"shards": "4"}, "[redis] shards"),
        ({"mode": "async"}, "[collector] mode"),
        ({"max_buffer_events": 0}, "[collector] max_buffer_events"),
        ({"ttl_seconds": 0}, "[buffer] ttl_seconds"),
        ({"key_prefix": "a{b}"}, "[redis] key_prefix"),
        ({"cluster": 1}, "[redis] cluster"),
        ({"socket_timeout_seconds": True}, "[redis] socket_timeout_seconds"),
    ],
)
def test_bad_keyword_value_is_a_config_error(settings: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        Collector(**settings)
    assert key in str(info.value)
    assert "Collector()" in str(info.value)


def test_keywords_apply_over_a_config(tmp_path: Path) -> None:
    base = TelemetryConfig.load(
        str(
            write(
                tmp_path,
                """
[buffer]
max_events_per_game = 77
[games."big"]
max_events_per_game = 5
""",
            )
        ),
        env={},
    )
    c = Collector(config=base, url="redis://127.0.0.1:1/0", shards=8)
    try:
        assert c.config.redis.shards == 8
        assert c.config.buffer.max_events_per_game == 77
        assert c.config.cap_for("big") == 5
        assert c.config.cap_for("other") == 77
    finally:
        c.close()


def test_per_game_override_caps_that_game_only(
    tmp_path: Path, redis_url: str, r: redis.Redis, make_collector: MakeCollector
) -> None:
    base = TelemetryConfig.load(
        str(
            write(
                tmp_path,
                """
[games."big"]
max_events_per_game = 5
ttl_seconds = 7200
""",
            )
        ),
        env={},
    )
    c = make_collector(config=base, url=redis_url, key_prefix="cfg")
    for i in range(20):
        c.collect("big", {"seq": i})
        c.collect("small", {"seq": i})
    assert c.flush(timeout=10)

    schema = KeySchema("cfg", 16)
    assert [e["seq"] for e in queue_events(r, schema, "big")] == list(range(15, 20))
    assert [e["seq"] for e in queue_events(r, schema, "small")] == list(range(20))
    assert 3600 < r.ttl(schema.for_game("big").queue("big")) <= 7200
    assert 0 < r.ttl(schema.for_game("small").queue("small")) <= 3600
    assert c.stats()["evicted"] == 15
    assert stats_of(r, schema, "big")["evicted"] == 15
    assert "evicted" not in stats_of(r, schema, "small") or (
        schema.for_game("small") is schema.for_game("big")
    )
