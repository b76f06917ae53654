"""Several reporter services on one store: shards and hot games are served by one at a time."""

from __future__ import annotations

import threading
import time
from collections import Counter

import httpx
import redis

from reporter._service.service import ReporterService
from tests.support.entries import make_config, numbered, store_many
from tests.support.fixtures import MakeService
from tests.support.polling import wait_until
from tests.support.recorder import Recorder

QUICK = {"linger_ms": 200, "poll_interval_ms": 50, "shard_lease_seconds": 1.0}
SHARDS = 8


class Concurrency:
    """Counts the POSTs of one game in progress at once, across every service."""

    def __init__(self, game: str) -> None:
        self.game = game
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0

    def reply(self, request: httpx.Request) -> httpx.Response:
        hot = b'"game":"' + self.game.encode() + b'"' in request.content
        if hot:
            with self.lock:
                self.now += 1
                self.most = max(self.most, self.now)
        time.sleep(0.005)  # long enough for overlapping POSTs to be seen overlapping
        if hot:
            with self.lock:
                self.now -= 1
        return httpx.Response(200, json={"ok": True})


def settled(services: list[ReporterService]) -> bool:
    """Every shard held by exactly one service, each within its fair share."""
    owned = [s.ownership.owned() for s in services]
    share = -(-SHARDS // len(services))
    return (
        sum(len(o) for o in owned) == SHARDS
        and len(set().union(*owned)) == SHARDS
        and all(len(o) <= share for o in owned)
    )


def test_only_the_shard_owner_serves_a_hot_game(
    redis_url: str, client: redis.Redis, make_service: MakeService
) -> None:
    concurrency = Concurrency("hot")
    config = make_config(
        redis_url,
        shards=SHARDS,
        reporter={**QUICK, "hot_games": {"hot": 2}},
        buffer={"max_events_per_game": 10_000},
    )
    recorders = [Recorder(concurrency.reply) for _ in range(3)]
    services = [make_service(config, client=client, transport=rec.transport()) for rec in recorders]
    for service in services:
        service.start()
    wait_until(lambda: settled(services), what="the three services to share the shards")
    hot_shard = services[0].schema.shard_of("hot")
    [owner] = [i for i, s in enumerate(services) if s.ownership.owns(hot_shard)]
    before = [s.ownership.owned() for s in services]
    served = [s.tally.snapshot()["hot_games_served"] for s in services]
    assert served == [int(i == owner) for i in range(3)]  # the metric says who serves it

    games = {
        "hot": numbered("hot", 3000),
        **{f"cold-{i}": numbered(f"cold-{i}", 200) for i in range(12)},
    }
    store_many(client, services[0], games)
    wait_until(
        lambda: sum(len(r.events()) for r in recorders) >= 3000 + 12 * 200,
        what="every event delivered",
    )

    assert [s.ownership.owned() for s in services] == before, "ownership moved during the test"
    hot_posts = [sum(p.game == "hot" for p in r.posts) for r in recorders]
    assert hot_posts[owner] > 0
    assert sum(hot_posts) == hot_posts[owner], f"hot POSTs per service: {hot_posts}"
    assert concurrency.most <= 2, "one pool of 2 threads serves the hot game"
    every = Counter(e["id"] for r in recorders for e in r.events())
    assert set(every) == {
        e for g, entries in games.items() for e in (f"{g}#{i}" for i in range(len(entries)))
    }
    for i, (service, recorder) in enumerate(zip(services, recorders, strict=True)):
        shards = service.ownership.owned()
        assert {service.schema.shard_of(p.game) for p in recorder.posts} <= shards, i
