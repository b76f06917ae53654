"""Who goes first when requests are scarce: one sweep of a shard (``ShardSweeper.loop()``,
called directly on a fixed clock, games stored in real Redis) under a request limit claims a
game whose oldest event would go stale before its next chance first, then by
``[games."x"] priority`` (higher first), then the fullest.  The order is read from the
requests the endpoint received; a limiter that grants every request keeps timing out of it."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from collector.store import GameState, KeySchema
from reporter._service.service import ReporterService
from reporter._service.workers import NEXT_REQUEST_MS
from tests.support.clock import Clock
from tests.support.entries import make_config, now_ms, numbered, store
from tests.support.fixtures import MakeService
from tests.support.recorder import Recorder
from tests.support.scriptcalls import Scripts

LINGER_MS = 1000


def same_shard(count: int) -> list[str]:
    """``count`` game names that live in one shard (of the services made here)."""
    config = make_config("redis://127.0.0.1:1/0")
    schema = KeySchema(config.redis.key_prefix, config.redis.shards)
    names = (f"game-{i}" for i in range(10_000))
    first = next(names)
    others = [g for g in names if schema.shard_of(g) == schema.shard_of(first)]
    return [first, *others[: count - 1]]


def service_with(
    make_service: MakeService, client: redis.Redis, redis_url: str, priorities: dict[str, int]
) -> tuple[ReporterService, Recorder, Clock]:
    # A limited sink whose limiter grants every request (a local bucket of 100): the sweep
    # orders its games as under a scarce rate, and every claim goes through.
    games: dict[str, dict[str, Any]] = {g: {"priority": p} for g, p in priorities.items()}
    config = make_config(
        redis_url,
        reporter={"linger_ms": LINGER_MS, "poll_interval_ms": 100},
        sink={"requests_per_second": 1000.0, "request_burst": 100, "rate_limit_scope": "process"},
        games=games,
    )
    recorder, clock = Recorder(), Clock(now_ms() / 1000)
    service = make_service(config, client=client, transport=recorder.transport(), clock=clock)
    service.ownership.loop()
    return service, recorder, clock


def test_stale_soon_then_priority_then_the_fullest(
    make_service: MakeService, client: redis.Redis, redis_url: str
) -> None:
    urgent, vip, fullest, fuller, plain = same_shard(5)
    service, recorder, clock = service_with(make_service, client, redis_url, {vip: 5})
    now = now_ms()
    max_age_ms = service.batches.freshness.max_age_ms
    scripts = Scripts(service.store)
    # stale before the next round plus a wait for a request: it goes first, with 3 events
    store(
        scripts,
        service.schema,
        urgent,
        numbered(urgent, 3, born_ms=now - max_age_ms + NEXT_REQUEST_MS // 2),
    )
    store(scripts, service.schema, vip, numbered(vip, 5, born_ms=now - 5_000))
    store(scripts, service.schema, fullest, numbered(fullest, 300, born_ms=now - 5_000))
    store(scripts, service.schema, fuller, numbered(fuller, 130, born_ms=now - 5_000))
    store(scripts, service.schema, plain, numbered(plain, 10, born_ms=now - 5_000))
    clock.at_ms(now)

    service.sweepers[service.schema.shard_of(urgent)].loop()

    order = list(dict.fromkeys(p.game for p in recorder.posts))
    assert order == [urgent, vip, fullest, fuller, plain]
    assert [len(p.events) for p in recorder.posts if p.game == urgent] == [3]


def test_a_game_waiting_for_linger_is_claimed_when_it_would_go_stale(
    make_service: MakeService, client: redis.Redis, redis_url: str
) -> None:
    """Not ready (its linger is long), yet its oldest event would not live to the next
    round: it is claimed now."""
    service, recorder, clock = service_with(make_service, client, redis_url, {})
    [game] = same_shard(1)
    now = now_ms()
    max_age_ms = service.batches.freshness.max_age_ms
    store(
        Scripts(service.store),
        service.schema,
        game,
        numbered(game, 2, born_ms=now - max_age_ms + NEXT_REQUEST_MS // 2),
    )
    sweeper = service.sweepers[service.schema.shard_of(game)]
    clock.at_ms(now - max_age_ms + NEXT_REQUEST_MS // 2 + LINGER_MS - 1)  # linger not over
    state = service.batches.game_states(sweeper.keys, [game])[0]
    assert sweeper.rank(state, now)[0] == 0  # at `now` it is urgent

    clock.at_ms(now)
    sweeper.loop()
    assert [p.game for p in recorder.posts] == [game]


@pytest.mark.parametrize(
    ("priority", "length", "rank"),
    [(0, 300, (1, 0, -300)), (7, 3, (1, -7, -3)), (-2, 128, (1, 2, -128))],
)
def test_rank_of_a_fresh_game(
    make_service: MakeService,
    client: redis.Redis,
    redis_url: str,
    priority: int,
    length: int,
    rank: tuple[int, int, int],
) -> None:
    service, _, _ = service_with(make_service, client, redis_url, {"g": priority})
    sweeper = service.sweepers[0]
    assert sweeper.rank(GameState("g", length, now_ms() - 1_000), now_ms()) == rank
