"""No event older than ``max_age_seconds`` is ever POSTed; each one dropped is counted stale."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
import redis

from reporter._delivery.freshness import Freshness, sink_freshness, split_fresh
from reporter._monitoring.accounting import read_totals
from reporter._service.service import ReporterService
from tests.support.entries import entry, ids_of, make_config, now_ms, numbered, store
from tests.support.fixtures import MakeService
from tests.support.recorder import Recorder
from tests.support.scriptcalls import Scripts, store_of
from tests.support.stored import stats_total

NOW_MS = 1_700_000_000_000
MAX_AGE_MS = 180_000


def settings(**reporter: Any) -> Freshness:
    return Freshness.of(make_config("redis://127.0.0.1:6379/0", reporter=reporter).reporter)


@pytest.mark.parametrize(
    ("age_ms", "fresh"),
    [
        (0, True),
        (1_000, True),
        (MAX_AGE_MS - 1, True),
        (MAX_AGE_MS, True),
        (MAX_AGE_MS + 1, False),
        (200_000, False),
        (-5_000, True),  # collected "in the future" (another host's clock): not stale
    ],
)
def test_split_fresh_by_collect_time(age_ms: int, fresh: bool) -> None:
    event = {"id": "e", "nested": {"x": [1, "ü"]}}
    sent, stale, _ = split_fresh([entry(event, NOW_MS - age_ms)], NOW_MS, settings())
    assert (sent, stale) == (([orjson.dumps(event)], 0) if fresh else ([], 1))


def test_split_fresh_keeps_order_and_counts() -> None:
    entries = [entry({"id": i}, NOW_MS - (200_000 if i % 3 == 0 else 10)) for i in range(10)]
    fresh = split_fresh(entries, NOW_MS, settings())
    assert [orjson.loads(e)["id"] for e in fresh.events] == [1, 2, 4, 5, 7, 8]
    assert fresh.stale == 4
    # where each sent event sits in the batch, for a partial outcome's item numbers
    assert [fresh.position(i) for i in range(6)] == [1, 2, 4, 5, 7, 8]


def test_split_fresh_positions_when_nothing_is_stale() -> None:
    fresh = split_fresh([entry({"id": i}, NOW_MS) for i in range(3)], NOW_MS, settings())
    assert (fresh.stale, fresh.positions) == (0, None)
    assert [fresh.position(i) for i in range(3)] == [0, 1, 2]


def test_split_fresh_follows_max_age_seconds() -> None:
    entries = [entry({"id": 1}, NOW_MS - 11_000), entry({"id": 2}, NOW_MS - 9_000)]
    sent, stale, _ = split_fresh(entries, NOW_MS, settings(max_age_seconds=10, linger_ms=100))
    assert (sent, stale) == ([b'{"id":2}'], 1)


@pytest.mark.parametrize(("unit", "scale"), [("s", 1000), ("ms", 1)])
def test_event_time_field_decides(unit: str, scale: int) -> None:
    config = settings(event_time_field="ot", event_time_unit=unit)
    now_s = NOW_MS // 1000
    cases = [
        # (event, collect time, sent?)
        ({"id": "old-ot", "ot": (now_s - 200) * 1000 // scale}, NOW_MS, False),
        ({"id": "fresh-ot", "ot": (now_s - 10) * 1000 // scale}, NOW_MS, True),
        ({"id": "fresh-ot-old-collect", "ot": now_s * 1000 // scale}, NOW_MS - 200_000, True),
        ({"id": "float-ot", "ot": (now_s - 200) * 1000 / scale}, NOW_MS, False),
        ({"id": "no-ot"}, NOW_MS, True),
        ({"id": "no-ot-old"}, NOW_MS - 200_000, False),
        ({"id": "bad-ot", "ot": "yesterday"}, NOW_MS, True),
        ({"id": "bool-ot", "ot": True}, NOW_MS, True),
    ]
    for event, born, expect_sent in cases:
        sent, stale, _ = split_fresh([entry(event, born)], NOW_MS, config)
        assert (len(sent), stale) == ((1, 0) if expect_sent else (0, 1)), event


# -- through the reporter ------------------------------------------------------------------


def service_with(
    make_service: MakeService,
    redis_url: str,
    client: redis.Redis,
    recorder: Recorder,
    clock: Any = time.time,
    **reporter: Any,
) -> ReporterService:
    config = make_config(redis_url, reporter={"linger_ms": 0, **reporter})
    service = make_service(config, client=client, transport=recorder.transport(), clock=clock)
    service.ownership.loop()
    return service


def sweep_all(service: ReporterService) -> None:
    for sweeper in service.sweepers:
        while sweeper.loop():
            pass


def test_old_events_are_never_sent(
    redis_url: str, client: redis.Redis, make_service: MakeService
) -> None:
    recorder = Recorder()
    service = service_with(make_service, redis_url, client, recorder)
    old_ms = now_ms() - 200_000  # 13 digits, 200 s ago
    scripts, schema = Scripts(service.store), service.schema
    store(
        scripts, schema, "g1", numbered("g1", 150, born_ms=old_ms) + numbered("g1", 20, start=150)
    )
    store(scripts, schema, "g2", numbered("g2", 5, born_ms=old_ms))

    sweep_all(service)

    assert sorted(ids_of(recorder.events())) == sorted(f"g1#{i}" for i in range(150, 170))
    assert stats_total(client, schema, "stale") == 155
    assert stats_total(client, schema, "delivered") == 20
    totals = read_totals(store_of(client, schema))
    assert (totals.unaccounted, totals.buffered, totals.pending_events) == (0, 0, 0)


def test_events_gone_stale_after_the_claim_are_dropped_before_the_post(
    redis_url: str, client: redis.Redis, make_service: MakeService
) -> None:
    recorder = Recorder()
    # Redis (claim) sees fresh events; the deliverer's clock is 200 s later
    service = service_with(
        make_service, redis_url, client, recorder, clock=lambda: time.time() + 200
    )
    keys = store(Scripts(service.store), service.schema, "g1", numbered("g1", 10))

    sweep_all(service)

    assert recorder.posts == []
    assert stats_total(client, service.schema, "stale") == 10
    assert client.zcard(keys.inflight) == 0
    assert client.hlen(keys.batches) == 0
    assert service.tally.snapshot()["stale"] == 10
    assert read_totals(service.store).unaccounted == 0


def test_the_events_own_time_decides(
    redis_url: str, client: redis.Redis, make_service: MakeService
) -> None:
    recorder = Recorder()
    service = service_with(
        make_service, redis_url, client, recorder, event_time_field="ot", event_time_unit="s"
    )
    now_s = time.time()
    entries = [
        entry({"id": "old-ot", "ot": int(now_s) - 200}),
        entry({"id": "fresh-ot", "ot": int(now_s) - 5}),
        entry({"id": "no-ot"}),
        entry({"id": "fresh-ot-old-collect", "ot": int(now_s)}, now_ms() - 200_000),
        entry({"id": "old-ot-old-collect", "ot": int(now_s) - 200}, now_ms() - 200_000),
    ]
    store(Scripts(service.store), service.schema, "g1", entries)

    sweep_all(service)

    assert sorted(ids_of(recorder.events())) == ["fresh-ot", "fresh-ot-old-collect", "no-ot"]
    assert stats_total(client, service.schema, "stale") == 2
    assert read_totals(service.store).unaccounted == 0


def test_the_nppa_sink_judges_the_behaviour_time_with_its_margin() -> None:
    """An item is stale once its ot is 180 s less the margin before the request."""
    config = make_config(
        "redis://127.0.0.1:6379/0",
        sink={"kind": "nppa"},
        nppa={"app_id": "app", "secret_key": "0" * 32, "freshness_margin_seconds": 10.0},
    )
    rule = sink_freshness(config)
    assert (rule.field, rule.scale) == ("ot", 1000)
    now_s = NOW_MS // 1000
    ages = {169: True, 170: False, 175: False, 1: True}
    for age, expect_sent in ages.items():
        event = {"ot": now_s - age}
        sent, stale, _ = split_fresh([entry(event, NOW_MS)], now_s * 1000, rule)
        assert (len(sent), stale) == ((1, 0) if expect_sent else (0, 1)), age
    # max_age_seconds still applies when it is the shorter of the two
    shorter = make_config(
        "redis://127.0.0.1:6379/0",
        sink={"kind": "nppa"},
        reporter={"max_age_seconds": 60.0, "linger_ms": 100},
        nppa={"app_id": "app", "secret_key": "0" * 32},
    )
    assert sink_freshness(shorter).max_age_ms == 60_000
