"""Where a collector's settings came from: ``Collector.config_source`` and the log line its
first write says, a WARNING when nobody chose the Redis it writes to."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from collector import Collector, TelemetryConfig
from collector import _collector as collector_module
from collector.store import RedisSettings, Store, open_store


def test_each_way_of_building_names_its_source(
    tmp_path: Path, no_telemetry_env: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "game.toml"
    path.write_text('[redis]\nurl = "redis://cache.invalid:6379/0"\n', encoding="utf-8")
    built = {
        "<defaults>": Collector(),
        "Collector() arguments over <defaults>": Collector(
            url="redis://cache.invalid/0", disabled=True
        ),
        "<packaged telemetry.toml>": Collector.from_config(),
        str(path): Collector.from_config(str(path)),
        f"Collector() arguments over {path}": Collector.from_config(str(path), disabled=True),
    }
    no_telemetry_env.setenv("TELEMETRY_CONFIG", str(path))
    built[f"{path} (by $TELEMETRY_CONFIG)"] = Collector.from_config()
    for expected, made in built.items():
        try:
            assert made.config_source == expected.removesuffix(" (by $TELEMETRY_CONFIG)")
        finally:
            made.close(timeout=0)


def test_unconfigured_means_nobody_chose_the_redis(no_telemetry_env: pytest.MonkeyPatch) -> None:
    assert TelemetryConfig().unconfigured()
    assert TelemetryConfig.load().unconfigured()  # the packaged file
    no_telemetry_env.setenv("TELEMETRY_REDIS_URL", "redis://cache.invalid:6379/0")
    assert not TelemetryConfig.load().unconfigured()
    no_telemetry_env.delenv("TELEMETRY_REDIS_URL")
    no_telemetry_env.setenv("TELEMETRY_REDIS_SHARDS", "8")  # another key: still the default Redis
    assert TelemetryConfig.load().unconfigured()


def test_the_first_write_logs_where_and_why(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="collector")
    with Collector(url=redis_url) as telemetry:
        telemetry.collect("g", {"n": 1})
        telemetry.collect("g", {"n": 2})
        assert telemetry.flush(timeout=10)
    lines = [r for r in caplog.records if r.getMessage().startswith("writing to")]
    assert len(lines) == 1
    assert lines[0].levelno == logging.INFO
    assert lines[0].getMessage().endswith("(config: Collector() arguments over <defaults>)")


def test_a_redis_nobody_chose_is_a_warning(
    redis_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The defaults point at 127.0.0.1:6379, which tests never use: the connection goes to the
    # test's server instead, while the config stays the unconfigured default.
    def test_server(settings: RedisSettings) -> Store:
        return open_store(RedisSettings(url=redis_url))

    monkeypatch.setattr(collector_module, "open_store", test_server)
    caplog.set_level(logging.INFO, logger="collector")
    with Collector() as telemetry:
        telemetry.collect("g", {"n": 1})
        assert telemetry.flush(timeout=10)
    [line] = [r for r in caplog.records if r.getMessage().startswith("writing to")]
    assert line.levelno == logging.WARNING
    assert "redis://127.0.0.1:6379/0 (config: <defaults>)" in line.getMessage()
    assert "no config file, $TELEMETRY_CONFIG, TELEMETRY_REDIS_URL or url= chose it" in (
        line.getMessage()
    )
