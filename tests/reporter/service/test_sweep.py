"""``ShardSweeper.loop()`` and ``HotGameWorker.loop()`` called directly, with a fixed clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
import redis

from collector.store import BackendRefused, Claim, KeySchema
from reporter._monitoring.accounting import read_totals
from reporter._service.service import ReporterService
from reporter._service.workers import BUSY_SWEEPS
from tests.support.clock import Clock
from tests.support.entries import ids_of, make_config, now_ms, numbered, store
from tests.support.fixtures import MakeService
from tests.support.polling import wait_until
from tests.support.recorder import Recorder
from tests.support.scriptcalls import Scripts, store_of
from tests.support.stored import shard_stats

LINGER_MS = 1000
GAME = "game-1"


Build = Callable[..., tuple[ReporterService, Recorder, Clock]]


@pytest.fixture
def build(redis_url: str, client: redis.Redis, make_service: MakeService) -> Build:
    def make(owned: bool = True, **reporter: Any) -> tuple[ReporterService, Recorder, Clock]:
        config = make_config(redis_url, reporter={"linger_ms": LINGER_MS, **reporter})
        recorder, clock = Recorder(), Clock(now_ms() / 1000)
        service = make_service(config, client=client, transport=recorder.transport(), clock=clock)
        if owned:
            service.ownership.loop()
        return service, recorder, clock

    return make


def sweep(service: ReporterService, game: str) -> bool:
    return service.sweepers[service.schema.shard_of(game)].loop()


def test_the_only_process_owns_every_shard(build: Build) -> None:
    service, _, _ = build()
    assert service.ownership.owned() == frozenset(range(service.schema.shards))


def test_a_full_batch_is_claimed_at_once(build: Build, client: redis.Redis) -> None:
    service, recorder, _ = build()
    entries = numbered(GAME, 128)
    keys = store(Scripts(service.store), service.schema, GAME, entries)

    assert sweep(service, GAME) is False

    [post] = recorder.posts
    assert (post.game, len(post.events)) == (GAME, 128)
    assert ids_of(post.events) == [f"{GAME}#{i}" for i in range(128)]
    assert post.idempotency_key == post.batch_id
    assert client.llen(keys.queue(GAME)) == 0
    assert client.zcard(keys.inflight) == 0
    assert shard_stats(client, keys)["delivered"] == 128
    assert service.tally.snapshot()["delivered"] == 128


def test_a_partial_batch_waits_for_linger(build: Build, client: redis.Redis) -> None:
    service, recorder, clock = build()
    born = now_ms() - 5_000  # old enough for Redis too; the sweeper's clock decides
    keys = store(Scripts(service.store), service.schema, GAME, numbered(GAME, 5, born_ms=born))

    clock.at_ms(born)
    sweep(service, GAME)
    clock.at_ms(born + LINGER_MS - 1)
    sweep(service, GAME)
    assert recorder.posts == []
    assert client.llen(keys.queue(GAME)) == 5

    clock.at_ms(born + LINGER_MS)
    sweep(service, GAME)
    [post] = recorder.posts
    assert ids_of(post.events) == [f"{GAME}#{i}" for i in range(5)]
    assert client.llen(keys.queue(GAME)) == 0


def test_linger_zero_sends_a_partial_batch_at_once(build: Build) -> None:
    service, recorder, clock = build(linger_ms=0)
    born = now_ms()
    store(Scripts(service.store), service.schema, GAME, numbered(GAME, 3, born_ms=born))
    clock.at_ms(born)
    sweep(service, GAME)
    assert len(recorder.events(GAME)) == 3


def test_a_sweeper_does_nothing_in_a_shard_it_does_not_own(
    build: Build, client: redis.Redis
) -> None:
    service, recorder, _ = build(owned=False)
    keys = store(Scripts(service.store), service.schema, GAME, numbered(GAME, 200))
    assert sweep(service, GAME) is False
    assert recorder.posts == []
    assert client.llen(keys.queue(GAME)) == 200


def test_a_flooding_game_gets_one_claim_per_sweep(build: Build, client: redis.Redis) -> None:
    service, recorder, _ = build(max_batches_per_claim=4)
    flood = GAME
    keys = service.schema.for_game(flood)
    small = [g for g in (f"small-{i}" for i in range(200)) if service.schema.for_game(g) == keys][
        :5
    ]
    scripts = Scripts(service.store)
    store(scripts, service.schema, flood, numbered(flood, 2000))
    for game in small:
        store(scripts, service.schema, game, numbered(game, 2, born_ms=now_ms() - 5_000))

    assert sweep(service, flood) is True  # work left: run again at once

    sent = [p.game for p in recorder.posts]
    assert sent.count(flood) == 4
    assert sorted(g for g in sent if g != flood) == sorted(small)
    assert client.llen(keys.queue(flood)) == 2000 - 4 * 128

    while sweep(service, flood):
        pass
    assert len(recorder.events(flood)) == 2000
    assert max(len(p.events) for p in recorder.posts) == 128


def test_an_emptied_game_is_unregistered_by_the_next_sweep(
    build: Build, client: redis.Redis
) -> None:
    service, _, _ = build()
    keys = service.schema.for_game(GAME)
    client.sadd(keys.active, GAME)
    client.zadd(keys.ring, {GAME: 0})  # registered, but the buffer expired
    sweep(service, GAME)
    assert client.zrange(keys.ring, 0, -1) == []
    assert client.smembers(keys.active) == set()


def test_sweepers_never_claim_a_hot_game(build: Build, client: redis.Redis) -> None:
    service, recorder, clock = build(hot_games={"hot": 2})
    scripts = Scripts(service.store)
    hot_keys = store(scripts, service.schema, "hot", numbered("hot", 300))
    store(scripts, service.schema, "cold", numbered("cold", 300))
    clock.at_ms(now_ms() + 60_000)

    for _ in range(5):
        for sweeper in service.sweepers:
            sweeper.loop()

    assert {p.game for p in recorder.posts} == {"cold"}
    assert len(recorder.events("cold")) == 300
    assert client.llen(hot_keys.queue("hot")) == 300
    assert client.zscore(hot_keys.ring, "hot") == 0

    assert [w.game for w in service.hot_workers] == ["hot", "hot"]
    while service.hot_workers[0].loop():
        pass
    assert ids_of(recorder.events("hot")) == [f"hot#{i}" for i in range(300)]
    assert client.llen(hot_keys.queue("hot")) == 0


def test_sweep_takes_due_retries_first(build: Build, client: redis.Redis) -> None:
    service, recorder, _ = build()
    entries = numbered(GAME, 10, born_ms=now_ms() - 5_000)
    keys = store(Scripts(service.store), service.schema, GAME, entries)
    claimed = service.batches.claim(keys, GAME, "crashed-worker", 1)
    [(batch_id, _)] = claimed.batches
    assert service.batches.release(keys, batch_id, "crashed-worker")

    assert sweep(service, GAME) is False

    [post] = recorder.posts
    assert post.batch_id == batch_id
    assert len(post.events) == 10
    assert client.zcard(keys.retry) == 0
    assert shard_stats(client, keys)["delivered"] == 10


def test_failed_posts_are_retried_then_delivered(
    redis_url: str, client: redis.Redis, make_service: MakeService
) -> None:
    answers = [503, 500, 200]
    recorder = Recorder(lambda _: httpx.Response(answers.pop(0)))
    config = make_config(
        redis_url, reporter={"linger_ms": 0}, retry={"initial_delay_ms": 1, "max_delay_ms": 1}
    )
    service = make_service(config, client=client, transport=recorder.transport())
    service.ownership.loop()
    keys = store(Scripts(service.store), service.schema, GAME, numbered(GAME, 10))

    for _ in range(3):
        # a failure pauses claims for initial_delay_ms (1 ms here)
        wait_until(service.gate.is_open, what="the sink gate to open")
        sweep(service, GAME)
        client.zadd(keys.retry, {p.batch_id: 0 for p in recorder.posts}, xx=True)  # due now

    assert len({p.batch_id for p in recorder.posts}) == 1
    assert [p.attempt for p in recorder.posts] == ["1", "2", "3"]
    assert shard_stats(client, keys)["delivered"] == 10
    assert shard_stats(client, keys)["batches_retried"] == 2
    assert service.tally.snapshot()["batches_retried"] == 2
    assert read_totals(service.store).unaccounted == 0


def test_a_rejected_batch_is_dead_lettered(
    redis_url: str, client: redis.Redis, make_service: MakeService
) -> None:
    recorder = Recorder(lambda _: httpx.Response(400, content=b"schema mismatch"))
    config = make_config(redis_url, reporter={"linger_ms": 0})
    service = make_service(config, client=client, transport=recorder.transport())
    service.ownership.loop()
    keys = store(Scripts(service.store), service.schema, GAME, numbered(GAME, 10))

    sweep(service, GAME)

    assert len(recorder.posts) == 1
    [dead] = client.lrange(keys.dead, 0, -1)
    assert dead.decode() == recorder.posts[0].batch_id
    totals = read_totals(store_of(client, KeySchema(config.redis.key_prefix, config.redis.shards)))
    assert totals.dead_now == 10
    assert totals.unaccounted == 0


def test_a_sweep_pages_through_the_ring(build: Build) -> None:
    """Games behind a page of games that are not ready yet are still reached."""
    service, recorder, clock = build(games_per_sweep=2)
    keys = service.schema.for_game(GAME)
    games = sorted(g for g in (f"g-{i}" for i in range(300)) if service.schema.for_game(g) == keys)[
        :5
    ]
    lingering, ready = games[:2], games[2:]  # the ring is in name order: these come first
    now = now_ms()
    for game in games:
        born = now if game in lingering else now - 5_000
        store(Scripts(service.store), service.schema, game, numbered(game, 2, born_ms=born))
    clock.at_ms(now + LINGER_MS // 2)

    per_sweep = []
    for _ in range(10):
        before = len(recorder.posts)
        sweep(service, GAME)
        per_sweep.append(len(recorder.posts) - before)
        if len(recorder.posts) == len(ready):
            break
    assert sorted(p.game for p in recorder.posts) == sorted(ready)
    assert max(per_sweep) <= 2  # games_per_sweep bounds one sweep
    assert [g.decode() for g in service.store.backend.client.zrange(keys.ring, 0, -1)] == lingering


def test_a_ring_of_an_older_version_is_moved_into_the_sorted_set(
    build: Build, client: redis.Redis
) -> None:
    """Before the sorted set the ring was a list (``{p:n}:ring``): its games are still swept."""
    service, recorder, _ = build()
    keys = service.schema.for_game(GAME)
    store(Scripts(service.store), service.schema, GAME, numbered(GAME, 5, now_ms() - 5_000))
    client.delete(keys.ring)  # as an older version left it: the game only in the list
    client.rpush(keys.legacy_ring, GAME)

    sweep(service, GAME)

    assert ids_of(recorder.events(GAME)) == [f"{GAME}#{i}" for i in range(5)]
    assert not client.exists(keys.legacy_ring)


def test_a_game_whose_claim_is_refused_does_not_stop_its_shard(
    build: Build, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, recorder, _ = build()
    keys = service.schema.for_game(GAME)
    bad, *good = sorted(
        g for g in (f"g-{i}" for i in range(200)) if service.schema.for_game(g) == keys
    )[:3]  # bad swept first
    scripts = Scripts(service.store)
    for game in (bad, *good):
        store(scripts, service.schema, game, numbered(game, 128))
    real = service.store.call

    def call(request: Any) -> Any:
        if isinstance(request, Claim) and request.game == bad:
            raise BackendRefused("ERR refused for this game only")
        return real(request)

    monkeypatch.setattr(service.store, "call", call)
    sweep(service, bad)
    assert sorted(p.game for p in recorder.posts) == sorted(good)


def test_a_page_reads_its_games_states_with_the_ring(
    build: Build, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The games a page held last time have their states read with the page: a sweep takes
    one round trip before its claims; a game new to the page costs one more, and states
    read with the page are as fresh as the page."""
    service, recorder, clock = build(max_batches_per_claim=1)
    keys = service.schema.for_game(GAME)
    other, waiting = [
        g for g in (f"g-{i}" for i in range(200)) if service.schema.for_game(g) == keys
    ][:2]
    scripts = Scripts(service.store)
    store(scripts, service.schema, GAME, numbered(GAME, 3 * 128))
    store(scripts, service.schema, waiting, numbered(waiting, 5))  # lingers throughout
    separate: list[list[str]] = []
    real = service.batches.game_states

    def game_states(shard: Any, games: list[str]) -> Any:
        separate.append(sorted(games))
        return real(shard, games)

    monkeypatch.setattr(service.batches, "game_states", game_states)

    assert sweep(service, GAME) is True
    assert separate == [sorted([GAME, waiting])]  # the page's first read: its games are new
    assert sweep(service, GAME) is True
    assert separate == [sorted([GAME, waiting])]  # read with the ring
    assert len(recorder.events(GAME)) == 2 * 128

    store(scripts, service.schema, other, numbered(other, 128))
    sweep(service, GAME)
    assert separate == [sorted([GAME, waiting]), [other]]
    assert len(recorder.events(other)) == 128
    assert len(recorder.events(GAME)) == 3 * 128

    born = now_ms() - 5_000  # old enough for Redis too; the sweeper's clock decides
    store(scripts, service.schema, GAME, numbered(GAME, 5, born_ms=born))
    clock.at_ms(born + LINGER_MS - 1)  # lingering: the state read with the page says so
    sweep(service, GAME)
    assert len(recorder.events(GAME)) == 3 * 128
    clock.at_ms(born + LINGER_MS)
    sweep(service, GAME)
    assert len(recorder.events(GAME)) == 3 * 128 + 5
    assert separate == [sorted([GAME, waiting]), [other]]
    assert recorder.events(waiting) == []


def ring_reads(service: ReporterService, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of each sweep's reads of the ring, as they happen (a list to read from)."""
    reads: list[int] = []
    real = service.batches.ring

    def ring(*args: Any) -> Any:
        reads.append(1)
        return real(*args)

    monkeypatch.setattr(service.batches, "ring", ring)
    return reads


def test_a_shard_whose_games_all_keep_a_full_batch_is_swept_without_reading_its_ring(
    build: Build, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every game left with a full batch: the next sweeps claim them again at once, and the
    ring is read again after BUSY_SWEEPS of them (or poll_interval_ms); a retry that came
    due meanwhile is taken then, first."""
    service, recorder, clock = build(max_batches_per_claim=1)
    keys = service.schema.for_game(GAME)
    second = next(g for g in (f"g-{i}" for i in range(200)) if service.schema.for_game(g) == keys)
    scripts = Scripts(service.store)
    for game in (GAME, second):
        store(scripts, service.schema, game, numbered(game, 20 * 128))
    reads = ring_reads(service, monkeypatch)

    for _ in range(1 + BUSY_SWEEPS):
        assert sweep(service, GAME) is True
    assert len(reads) == 1
    assert len(recorder.events(GAME)) == len(recorder.events(second)) == (1 + BUSY_SWEEPS) * 128

    claimed = service.batches.claim(keys, GAME, "crashed-worker", 1)
    [(retry_id, _)] = claimed.batches
    assert service.batches.release(keys, retry_id, "crashed-worker")  # due at once
    sweep(service, GAME)
    assert len(reads) == 2
    assert recorder.posts[-3].batch_id == retry_id  # the retry first, then the two games
    assert sweep(service, GAME) is True
    assert len(reads) == 3  # a sweep that took a retry leaves the ring to be read again
    sweep(service, GAME)
    assert len(reads) == 3  # busy again

    clock.at_ms(now_ms() + LINGER_MS)  # poll_interval_ms since the ring was read: read now
    sweep(service, GAME)
    sweep(service, GAME)
    assert len(reads) == 4


def test_a_shard_with_a_game_not_left_full_reads_its_ring_every_sweep(
    build: Build, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, _, _ = build(max_batches_per_claim=1)
    keys = service.schema.for_game(GAME)
    small = next(g for g in (f"g-{i}" for i in range(200)) if service.schema.for_game(g) == keys)
    scripts = Scripts(service.store)
    store(scripts, service.schema, GAME, numbered(GAME, 10 * 128))
    store(scripts, service.schema, small, numbered(small, 5))  # lingering: not claimed
    reads = ring_reads(service, monkeypatch)
    for n in range(1, 5):
        sweep(service, GAME)
        assert len(reads) == n
