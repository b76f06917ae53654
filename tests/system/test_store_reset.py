"""Store reset detection: a Redis restarted empty under a running reporter and SDK is noticed
by both, logged with the events lost, counted, and shown by ``status``; a restart that kept
the data (append-only file) is not taken for a reset."""

from __future__ import annotations

import logging

import pytest

from collector import Collector
from reporter._service.service import ReporterService
from reporter._service.store_watch import ALERT_NAME
from tests.support.fixtures import MakeEndpoint, StartService
from tests.support.polling import wait_until
from tests.support.scenarios import Script, make_config
from tests.support.servers import Server

GAME = "reset"


def failing(_: int, __: dict[str, object]) -> tuple[int, dict[str, str]]:
    return 503, {}  # keeps every batch pending: what a reset then loses


def run_until_seen(
    server: Server, make_endpoint: MakeEndpoint, start_service: StartService, events: int
) -> tuple[Collector, ReporterService]:
    endpoint = make_endpoint(Script(failing))
    config = make_config(server.url, endpoint.url)
    collector = Collector(config=config)
    for seq in range(events):
        collector.collect(GAME, {"seq": seq})
    assert collector.flush(timeout=10)
    service = start_service(config)
    shard = service.schema.shard_of(GAME)
    # Until a sweep has seen the shard with every event outstanding.
    wait_until(
        lambda: service.store_watch._known.get(shard, ("", 0))[1] == events,
        timeout=20,
        what="a sweep to see the shard",
    )
    return collector, service


def test_a_redis_restarted_empty_is_reported_with_the_events_lost(
    own_server: Server,
    make_endpoint: MakeEndpoint,
    start_service: StartService,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR)
    collector, service = run_until_seen(own_server, make_endpoint, start_service, 500)
    try:
        own_server.stop()  # SIGKILL; started again without persistence: empty
        own_server.start()
        collector.collect(GAME, {"seq": "after"})
        assert collector.flush(timeout=20)

        wait_until(
            lambda: service.tally.snapshot().get("store_resets") == 1,
            timeout=20,
            what="the reporter to report the reset",
        )
        assert collector.stats()["store_resets"] == 1
        [reporter_line] = [
            r.getMessage()
            for r in caplog.records
            if r.name == "reporter" and "store reset detected" in r.getMessage()
        ]
        assert "about 500 events lost" in reporter_line
        assert any(
            r.name == "collector" and "store reset" in r.getMessage() for r in caplog.records
        )
        [alert] = [a for a in service.store.alerts() if a.name == ALERT_NAME]
        assert "about 500 events lost" in alert.message
    finally:
        collector.close(timeout=1)


def test_a_restart_that_kept_the_data_is_no_reset(
    durable_server: Server,
    make_endpoint: MakeEndpoint,
    start_service: StartService,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR)
    collector, service = run_until_seen(durable_server, make_endpoint, start_service, 200)
    try:
        durable_server.stop()
        durable_server.start()  # the append-only file brings everything back
        collector.collect(GAME, {"seq": "after"})
        assert collector.flush(timeout=20)
        shard = service.schema.shard_of(GAME)
        wait_until(
            lambda: service.store_watch._known[shard][1] == 201,
            timeout=20,
            what="a sweep after the restart",
        )
        assert service.store_watch.loop() is False
        assert "store_resets" not in service.tally.snapshot()
        assert collector.stats()["store_resets"] == 0
        assert not [r for r in caplog.records if "store reset" in r.getMessage()]
    finally:
        collector.close(timeout=1)


def test_the_sdk_alone_notices_a_reset_by_its_own_writes(own_server: Server) -> None:
    """No reporter re-marks the shard first: the SDK's next write finds it unmarked."""
    collector = Collector(config=make_config(own_server.url))
    try:
        collector.collect(GAME, {"seq": 1})
        assert collector.flush(timeout=10)
        own_server.stop()
        own_server.start()
        collector.collect(GAME, {"seq": 2})
        assert collector.flush(timeout=20)
        collector.collect(GAME, {"seq": 3})
        assert collector.flush(timeout=10)
        assert collector.stats()["store_resets"] == 1
    finally:
        collector.close(timeout=1)
