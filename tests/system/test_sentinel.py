"""Redis managed by Sentinel: a primary, one replica and three sentinels started by the tests.

The SDK and the reporter find the primary through the sentinels, deliver through it, and the
CLI's ``status``, ``dead`` and ``check-config`` work on it; a demoted primary's READONLY
replies send the client back to the sentinels.  The failover under load is in
``test_sentinel_failover.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from collector import Collector
from collector.store import BackendUnavailable, Collect, open_store
from reporter._commands.cli import main, startup_line
from reporter._config import ReporterConfig
from tests.support.fixtures import MakeEndpoint, StartService
from tests.support.markers import secret
from tests.support.polling import wait_until
from tests.support.scenarios import (
    assert_reconciled,
    config_toml,
    drained,
    event,
    make_config,
    received_keys,
    schema_of,
)
from tests.support.sentinel import sentinel_config
from tests.support.servers import SentinelGroup, Server, default_binary, free_port

pytestmark = pytest.mark.usefixtures("restore_logging")

SENTINEL_PW = secret("sentinel-pw")
DATA_PW = secret("data-pw")


def test_sdk_and_reporter_deliver_through_sentinel(
    sentinel_group: SentinelGroup, make_endpoint: MakeEndpoint, start_service: StartService
) -> None:
    endpoint = make_endpoint()
    config = sentinel_config(sentinel_group, endpoint.url)
    games = [f"s-game-{i}" for i in range(6)]
    collector = Collector(config=config)
    for seq in range(300):
        for game in games:
            collector.collect(game, event(game, seq))
    collector.close(timeout=20)
    stats = collector.stats()
    assert stats["stored"] == stats["accepted"] == 300 * len(games), stats

    service = start_service(config)
    assert service.store.describe().startswith(f"sentinel service {group_name(config)!r} via")
    [memory] = service.store.memory()  # status and /metrics name the primary found
    assert memory.node == f"127.0.0.1:{sentinel_group.primary.port}"
    primary = sentinel_group.primary.client()
    schema = schema_of(config)
    totals = wait_until(lambda: drained(primary, schema), what="every batch delivered")
    assert_reconciled(totals)
    assert totals.counter("delivered") == 300 * len(games)
    assert set(received_keys(endpoint)) == {(g, s) for g in games for s in range(300)}
    # It went to the primary the sentinels name, and reached the replica from there.
    replica = sentinel_group.replicas[0].client()
    wait_until(
        lambda: replica.hget(schema.for_game(games[0]).stats, "delivered"),
        what="the replica in step",
    )


def group_name(config: ReporterConfig) -> str:
    return config.redis.sentinel_service


def test_the_cli_works_through_sentinel(
    sentinel_group: SentinelGroup,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in [v for v in os.environ if v.startswith("TELEMETRY_")]:
        monkeypatch.delenv(var)
    password = sentinel_group.password
    assert password  # the sentinels ask for it
    config = sentinel_config(sentinel_group)
    path = tmp_path / "sentinel.toml"
    path.write_text(config_toml(config), encoding="utf-8")
    collector = Collector(config=config)
    collector.collect("cli-game", event("cli-game", 1))
    collector.close(timeout=20)
    assert collector.stats()["stored"] == 1

    assert main(["status", "--config", str(path)]) == 0
    out, err = capsys.readouterr()
    expected = f"sentinel service {sentinel_group.service!r} via " + ", ".join(
        sentinel_group.addresses
    )
    assert f"redis: {expected}" in out
    assert main(["dead", "--config", str(path), "list"]) == 0
    assert capsys.readouterr().out.strip() == "no dead-lettered batches"
    assert main(["check-config", str(path)]) == 0
    out, err = capsys.readouterr()
    shown = json.loads(out.split("\n", 1)[1])["redis"]
    assert shown["sentinels"] == sentinel_group.addresses
    assert shown["sentinel_password"] == "***"
    assert password not in out + err

    # A wrong password for the sentinels: one line naming the problem, the password hidden.
    wrong = "wrong-" + password
    config = sentinel_config(sentinel_group, redis={"sentinel_password": wrong})
    path.write_text(config_toml(config), encoding="utf-8")
    assert main(["status", "--config", str(path)]) == 3
    out, err = capsys.readouterr()
    assert "Redis unavailable" in err and "sentinel" in err and wrong not in err


def test_a_demoted_primary_sends_the_client_back_to_the_sentinels() -> None:
    """The primary turns into a replica under the client's open connection: the write meets
    READONLY, which counts as "unavailable" (the SDK keeps the events), not as a refusal;
    once a primary is back, the same store and collector carry on."""
    binary = default_binary()
    # Sentinels slow to react, so the demotion here is all that happens.
    group = SentinelGroup(binary, down_after_ms=60_000).start()
    elsewhere = Server(binary, extra=["--repl-diskless-sync-delay", "0"]).start()
    try:
        config = sentinel_config(group, redis={"retries": 1})
        store = open_store(config.redis)
        collector = Collector(config=config, retry_max_delay_ms=100)
        shard = schema_of(config).for_game("ro-game")
        request = Collect(shard, "ro-game", [b"1700000000000{}"], cap=1000, ttl_seconds=3600)
        store.call(request)
        primary = group.primary.client()
        primary.replicaof("127.0.0.1", elsewhere.port)
        wait_until(
            lambda: primary.info("replication")["master_link_status"] == "up",
            what="the primary demoted",
        )
        with pytest.raises(BackendUnavailable, match="previous master is now a slave"):
            store.call(request)
        for seq in range(50):
            collector.collect("ro-game", event("ro-game", seq))
        wait_until(lambda: collector.stats()["backend_errors"], what="a failed flush")
        assert collector.stats()["stored"] == 0
        primary.replicaof("NO", "ONE")
        store.call(request)
        collector.close(timeout=20)
        stats = collector.stats()
        assert stats["stored"] == stats["accepted"] == 50, stats
        assert primary.llen(shard.queue("ro-game")) == 51
        store.close()
    finally:
        elsewhere.cleanup()
        group.cleanup()


def test_no_sentinel_answering_is_unavailable() -> None:
    """No sentinel answers: a store call fails as BackendUnavailable naming the service."""
    config = make_config(
        "redis://127.0.0.1:1/0",
        redis={
            "sentinels": [f"127.0.0.1:{free_port()}"],
            "sentinel_service": "nowhere",
            "connect_timeout_seconds": 0.2,
            "retries": 0,
        },
    )
    store = open_store(config.redis)
    try:
        with pytest.raises(BackendUnavailable, match="No master found for 'nowhere'"):
            store.ping()
    finally:
        store.close()


def test_the_start_up_line_names_the_sentinels_not_the_password() -> None:
    config = make_config(
        f"redis://:{DATA_PW}@127.0.0.1:1/0",
        redis={
            "sentinels": ["10.0.0.1:26379", "10.0.0.2:26379"],
            "sentinel_service": "telemetry",
            "sentinel_password": SENTINEL_PW,
        },
    )
    message, fields = startup_line(config, "no rate limit")
    expected = "sentinel service 'telemetry' via 10.0.0.1:26379, 10.0.0.2:26379"
    assert fields["redis"] == expected and expected in message
    assert DATA_PW not in message + repr(fields) and SENTINEL_PW not in message + repr(fields)
