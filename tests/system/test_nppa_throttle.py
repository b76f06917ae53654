"""The interface's throttle honoured by every reporter, end to end: three reporters (services
sharing one Redis, as processes would) drain a backlog of twelve games into the mock of the
interface (``reporter._demo.nppa_mock``); each game has one request on its way at a time,
so twelve games keep about a second of slots reserved ahead.  After a 1006 nothing arrives
until the penalty is over, slots reserved before it included; and when Redis loses the
rate's state (a restart without persistence, a failover) no second holds more than the
rate, and a pause it held is not forgotten."""

from __future__ import annotations

import time

import redis

from collector import Collector, nppa
from reporter._config import ReporterConfig
from reporter._demo.nppa_mock import NppaEndpoint, RequestLog
from reporter._service.service import ReporterService
from tests.support.entries import make_config
from tests.support.fixtures import StartService
from tests.support.polling import wait_until

SECRET = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
APP_ID = "app-throttle"
GAMES = {f"game-{k}": f"11019999{k:02d}" for k in range(12)}
PI = "1" * 38
THROTTLE = 2.0
LONG_THROTTLE = 8.0  # longer than the pause of a lost state (the slot horizon, 5 s)
# A request that passed its check a moment before the pause was written still arrives a
# moment after the 1006 (on a loaded host, up to a few tenths of a second).
ON_ITS_WAY = 0.25


def throttle_config(
    redis_url: str,
    endpoint: NppaEndpoint,
    games: dict[str, str] = GAMES,
    throttle: float = THROTTLE,
    hot: bool = True,
) -> ReporterConfig:
    return make_config(
        redis_url,
        shards=8,
        sink={"kind": "nppa"},
        nppa={
            "base_url": endpoint.url,
            "app_id": APP_ID,
            "secret_key": SECRET,
            "throttle_seconds": throttle,
        },
        games={game: {"biz_id": biz} for game, biz in games.items()},
        reporter={
            "linger_ms": 100,
            "poll_interval_ms": 20,
            "max_batches_per_claim": 1,
            "hot_games": {"game-0": 2, "game-1": 2} if hot else {},
        },
    )


def backlog(config: ReporterConfig, per_game: int, games: dict[str, str] = GAMES) -> None:
    now = int(time.time())
    c = Collector(config=config)
    try:
        for game in games:
            for i in range(per_game):
                make = nppa.login if i % 2 == 0 else nppa.logout
                c.collect(game, make(si=f"{game}-{i // 2:05d}", ot=now, pi=PI))
        assert c.flush(timeout=20)
    finally:
        c.close(timeout=1)


def requests(endpoint: NppaEndpoint) -> list[RequestLog]:
    with endpoint.lock:
        return list(endpoint.requests)


def accepted(endpoint: NppaEndpoint) -> int:
    with endpoint.lock:
        return len(endpoint.accepted)


def during_penalties(
    log: list[RequestLog], throttle: float = THROTTLE
) -> list[tuple[float, float]]:
    """(1006 at, request at) for every request that arrived within a penalty: after a 1006
    (and the time one already on its way needs) and before the throttle's end."""
    return [
        (throttled.at, r.at)
        for throttled in log
        if throttled.errcode == 1006
        for r in log
        if throttled.at + ON_ITS_WAY < r.at < throttled.at + throttle - 0.05
    ]


def start(config: ReporterConfig, start_service: StartService) -> list[ReporterService]:
    return [start_service(config) for _ in range(3)]


def test_nothing_arrives_during_a_penalty_from_any_reporter(
    redis_url: str, start_service: StartService
) -> None:
    """The interface allows 4 requests a second here, the reporters believe 10: it answers
    1006 and throttles for 2 s.  Each reporter's threads have slots reserved ahead when it
    comes; none of them is used until the penalty is over."""
    with NppaEndpoint(
        app_id=APP_ID,
        secret_key=SECRET,
        biz_ids=GAMES.values(),
        requests_per_second=4,
        throttle_seconds=THROTTLE,
    ) as endpoint:
        config = throttle_config(redis_url, endpoint)
        backlog(config, 384)  # 3 requests a game: 36
        start(config, start_service)
        wait_until(lambda: accepted(endpoint) == 384 * len(GAMES), timeout=90, what="all accepted")
        log = requests(endpoint)
    assert any(r.errcode == 1006 for r in log)
    assert during_penalties(log) == []


def test_a_lost_rate_state_never_puts_more_than_ten_requests_in_a_second(
    redis_url: str, client: redis.Redis, start_service: StartService
) -> None:
    """The rate's state is deleted (as a restart without persistence would) while every
    thread has a slot reserved ahead: no second at the interface holds more than 10."""
    games = {f"game-{k}": f"11019998{k:02d}" for k in range(24)}  # 2 s of slots ahead
    with NppaEndpoint(
        app_id=APP_ID, secret_key=SECRET, biz_ids=games.values(), throttle_seconds=THROTTLE
    ) as endpoint:
        config = throttle_config(redis_url, endpoint, games)
        backlog(config, 384, games)  # 3 requests a game: 72, over 7 s at the rate
        services = start(config, start_service)
        key = services[0].store.schema.limiter("nppa:" + APP_ID)
        wait_until(lambda: len(requests(endpoint)) >= 12, timeout=30, what="a second of sending")
        client.delete(key)
        wait_until(lambda: accepted(endpoint) == 384 * len(games), timeout=90, what="all accepted")
        busiest = endpoint.busiest_second
        log = requests(endpoint)
    assert busiest <= 10
    assert {r.errcode for r in log} == {0}


def test_a_pause_survives_a_lost_rate_state(
    redis_url: str, client: redis.Redis, start_service: StartService
) -> None:
    """A 1006 with a penalty of 8 s, then Redis loses the rate's state during it, and a
    fourth reporter starts (it knows nothing of the pause): the reporters that knew of it
    put it back (a lost state alone pauses for 5 s), and nothing arrives before it is
    over.  The mock answers its fifth request 1006 whatever the rate (a forced answer
    starts no throttle of its own: only the reporters' pause keeps requests out of the
    penalty); a 1006 of its own (a loaded host bunching requests) throttles as long."""
    with NppaEndpoint(
        app_id=APP_ID,
        secret_key=SECRET,
        biz_ids=GAMES.values(),
        throttle_seconds=LONG_THROTTLE,
        force=lambda n: 1006 if n == 5 else None,
    ) as endpoint:
        config = throttle_config(redis_url, endpoint, throttle=LONG_THROTTLE)
        backlog(config, 384)
        services = start(config, start_service)
        key = services[0].store.schema.limiter("nppa:" + APP_ID)
        wait_until(
            lambda: any(r.errcode == 1006 for r in requests(endpoint)),
            timeout=30,
            what="a 1006",
        )
        client.delete(key)
        wait_until(lambda: client.exists(key) == 1, timeout=10, what="the state found lost")
        start_service(config)
        wait_until(lambda: accepted(endpoint) == 384 * len(GAMES), timeout=90, what="all accepted")
        log = requests(endpoint)
    assert during_penalties(log, LONG_THROTTLE) == []


def test_an_idle_reporter_finds_a_lost_rate_state_within_a_second(
    redis_url: str, client: redis.Redis, start_service: StartService
) -> None:
    """Nothing to send, and the rate's state vanishes: every reporter looks at it once a
    second, so the loss is found (and every scope paused) before anyone sends again."""
    with NppaEndpoint(app_id=APP_ID, secret_key=SECRET, biz_ids=GAMES.values()) as endpoint:
        config = throttle_config(redis_url, endpoint, hot=False)  # hot pools look all along
        service = start_service(config)
        key = service.store.schema.limiter("nppa:" + APP_ID)
        wait_until(lambda: client.exists(key) == 1, timeout=5, what="the state looked at")
        client.delete(key)
        began = time.monotonic()
        wait_until(lambda: client.hexists(key, "paused_until"), timeout=5, what="found lost")
        assert time.monotonic() - began < 2.5
        assert requests(endpoint) == []
