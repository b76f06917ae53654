"""The anti-addiction profile end to end: events made with collector.nppa, collected, drained
by reporters and sent over real HTTP to a mock of the interface (reporter._demo.nppa_mock,
written from the interface's description, not from the sender)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from reporter._demo.nppa_mock import NppaEndpoint
from reporter._monitoring.accounting import read_totals
from tests.support.fixtures import StartService
from tests.support.nppa_runs import (
    APP_ID,
    GAMES,
    PI,
    SECRET,
    accepted_count,
    codes,
    collect,
    nppa_config,
)
from tests.support.polling import wait_until
from tests.support.windows import busiest


def test_a_backlog_of_two_games_is_accepted_in_full_requests(
    redis_url: str, start_service: StartService
) -> None:
    with NppaEndpoint(app_id=APP_ID, secret_key=SECRET, biz_ids=GAMES.values()) as endpoint:
        config = nppa_config(redis_url, endpoint)
        collect(config, 600)
        start_service(config)
        wait_until(lambda: accepted_count(endpoint) == 1200, timeout=30, what="every item accepted")
        with endpoint.lock:
            requests, accepted = list(endpoint.requests), list(endpoint.accepted)
    assert codes(endpoint) == Counter({0: len(requests)})  # no 1006, no 1011, no item errors
    assert all(r.items <= 128 for r in requests)
    assert sum(1 for r in requests if r.items == 128) >= 8  # 2 x 600 = 8 full + 2 partial
    by_game = Counter((a.biz_id, a.item["si"]) for a in accepted)
    assert len(by_game) == 600 and set(by_game.values()) == {2}  # login and logout each
    assert all(a.request_ms / 1000 - a.item["ot"] < 180 for a in accepted)
    assert all(set(a.item) == {"no", "si", "bt", "ot", "ct", "pi"} for a in accepted)


def test_expired_timestamps_are_sent_again(redis_url: str, start_service: StartService) -> None:
    with NppaEndpoint(
        app_id=APP_ID,
        secret_key=SECRET,
        biz_ids=GAMES.values(),
        force=lambda n: 1007 if n == 1 else None,
    ) as endpoint:
        config = nppa_config(redis_url, endpoint)
        collect(config, 4)
        start_service(config)
        wait_until(lambda: accepted_count(endpoint) == 8, timeout=30, what="all accepted")
    assert codes(endpoint)[1007] == 1


def test_over_the_limit_every_reporter_backs_off(
    redis_url: str, start_service: StartService
) -> None:
    """The interface allows 2 requests/s here; the reporters believe 10. After each 1006 the
    shared bucket pauses both reporters for throttle_seconds: nothing reaches the interface
    in that time (but what was already on its way)."""
    with NppaEndpoint(
        app_id=APP_ID,
        secret_key=SECRET,
        biz_ids=GAMES.values(),
        requests_per_second=2,
        throttle_seconds=0.5,
    ) as endpoint:
        # Both games hot: both reporters send both (hot pools do not look at shard leases).
        config = nppa_config(
            redis_url,
            endpoint,
            {"batch_size": 2, "max_batches_per_claim": 1, "hot_games": dict.fromkeys(GAMES, 1)},
            throttle_seconds=1.0,
        )
        collect(config, 10)  # 20 events in batches of 2: 10 requests, claimed one by one
        first, second = start_service(config), start_service(config)
        wait_until(lambda: accepted_count(endpoint) == 20, timeout=60, what="all accepted")
        throttled = codes(endpoint)[1006]
        with endpoint.lock:
            answered = [(r.at, r.errcode) for r in endpoint.requests]
    assert throttled >= 1
    for at, code in answered:
        if code == 1006:
            assert not [t for t, _ in answered if at + 0.3 < t < at + 0.9], "sent in a pause"
    assert (
        first.tally.counted().get("batches_retried", 0)
        + second.tally.counted().get("batches_retried", 0)
        == throttled
    )


@pytest.mark.parametrize("partial_errcode", [0, 3001])
def test_items_the_system_refuses_are_dead_lettered_one_by_one(
    redis_url: str, r: redis.Redis, start_service: StartService, partial_errcode: int
) -> None:
    unknown = "9" * 38

    def unknown_pi(item: dict[str, Any]) -> int | None:
        return 3010 if item.get("pi") == unknown else None

    with NppaEndpoint(
        app_id=APP_ID,
        secret_key=SECRET,
        biz_ids=GAMES.values(),
        partial_errcode=partial_errcode,
        unknown=unknown_pi,
    ) as endpoint:
        config = nppa_config(redis_url, endpoint)
        collect(config, 30, pi=lambda i: unknown if i % 10 == 3 else PI)
        service = start_service(config)
        wait_until(
            lambda: accepted_count(endpoint) == 54,
            timeout=30,
            what="the known players' events accepted",
        )
        wait_until(
            lambda: read_totals(service.store).counter("rejected_items") == 6,
            timeout=30,
            what="the unknown ones refused",
        )
    totals = read_totals(service.store)
    assert (totals.counter("delivered"), totals.counter("dead_events")) == (54, 6)
    assert totals.unaccounted == 0 and totals.pending_events == 0
    dead = service.store.dead_batches(100)
    assert sum(b.events for b in dead) == 6 and all(".x" in b.batch_id for b in dead)
    keys = service.store.find_batch(dead[0].batch_id)
    assert keys is not None
    detail = service.store.batch(keys, dead[0].batch_id)
    assert detail is not None and all(r.startswith("nppa 3010") for r in detail.item_reasons)


def test_an_item_error_for_the_whole_request_dead_letters_the_batch_at_once(
    redis_url: str, start_service: StartService
) -> None:
    """3005 with no results to say which item: the same data would meet it at every
    attempt, so the batch is a dead letter after one request, and the rest goes on."""
    with NppaEndpoint(
        app_id=APP_ID,
        secret_key=SECRET,
        biz_ids=GAMES.values(),
        force=lambda n: 3005 if n == 1 else None,
    ) as endpoint:
        config = nppa_config(redis_url, endpoint)
        collect(config, 4)
        service = start_service(config)
        wait_until(
            lambda: read_totals(service.store).counter("dead_events") == 4,
            timeout=30,
            what="the batch refused as a whole dead-lettered",
        )
        wait_until(lambda: accepted_count(endpoint) == 4, timeout=30, what="the other accepted")
    assert codes(endpoint) == Counter({3005: 1, 0: 1})  # sent once, never retried
    totals = read_totals(service.store)
    assert (totals.counter("dead_batches"), totals.counter("batches_retried")) == (1, 0)
    [dead] = service.store.dead_batches(10)
    assert dead.reason.startswith("nppa 3005")


def test_an_audit_trail_that_cannot_be_written_is_counted_and_reports_go_on(
    redis_url: str, start_service: StartService, tmp_path: Path
) -> None:
    """A missing report is the worse breach: the lines that cannot be written are counted
    (audit_lines_lost) and every event is still sent."""
    (tmp_path / "a-file").write_text("not a directory", encoding="utf-8")
    with NppaEndpoint(app_id=APP_ID, secret_key=SECRET, biz_ids=GAMES.values()) as endpoint:
        config = nppa_config(
            redis_url, endpoint, audit_directory=str(tmp_path / "a-file" / "audit")
        )
        collect(config, 10)
        service = start_service(config)
        wait_until(lambda: accepted_count(endpoint) == 20, timeout=30, what="all accepted")
        wait_until(
            lambda: read_totals(service.store).counter("delivered") == 20,
            timeout=30,
            what="acknowledged",
        )
        requests = len(codes(endpoint))
    lost = service.stop().counts["audit_lines_lost"]
    assert lost >= 2 * sum(codes(endpoint).values()) >= 2 * requests  # a request, an answer


@pytest.mark.parametrize("offset", [4.0, -4.0])
def test_a_system_clock_a_few_seconds_off_is_fine(
    redis_url: str, start_service: StartService, offset: float
) -> None:
    with NppaEndpoint(
        app_id=APP_ID, secret_key=SECRET, biz_ids=GAMES.values(), clock=lambda: time.time() + offset
    ) as endpoint:
        config = nppa_config(redis_url, endpoint)
        collect(config, 6)
        start_service(config)
        wait_until(lambda: accepted_count(endpoint) == 12, timeout=30, what="all accepted")
    assert set(codes(endpoint)) == {0}


def test_events_from_a_game_server_clock_ahead_wait_until_they_are_valid(
    redis_url: str, start_service: StartService
) -> None:
    with NppaEndpoint(app_id=APP_ID, secret_key=SECRET, biz_ids=GAMES.values()) as endpoint:
        config = nppa_config(redis_url, endpoint)
        ahead = int(time.time()) + 3
        collect(config, 2, ot=ahead)
        service = start_service(config)
        wait_until(lambda: accepted_count(endpoint) == 4, timeout=30, what="accepted later")
        with endpoint.lock:
            sent = [(a.request_ms, a.item["ot"]) for a in endpoint.accepted]
    assert all(ot * 1000 <= ms for ms, ot in sent)  # never sent before its time
    assert set(codes(endpoint)) == {0}
    assert read_totals(service.store).counter("batches_retried") >= 1


def test_three_reporters_together_keep_under_ten_requests_a_second(
    redis_url: str, start_service: StartService
) -> None:
    """The interface's limit holds across processes: three reporters (services sharing the
    Redis, as processes would) draw from one bucket; none of them meets a 1006."""
    with NppaEndpoint(app_id=APP_ID, secret_key=SECRET, biz_ids=GAMES.values()) as endpoint:
        config = nppa_config(redis_url, endpoint, {"hot_games": {"farm": 1}})
        collect(config, 896)  # 7 full requests a game (the cap keeps 1,000)
        for _ in range(3):
            start_service(config)
        wait_until(lambda: accepted_count(endpoint) == 1792, timeout=60, what="all accepted")
        with endpoint.lock:
            requests = list(endpoint.requests)
    assert set(codes(endpoint)) == {0}
    assert busiest([r.at for r in requests], 1.0) <= 10
    assert [r.items for r in requests] == [128] * 14
