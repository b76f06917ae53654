"""Claim limiters: the token bucket's rate as a figure with a tolerance, on an injected clock
(the local bucket) and on injected Redis times (the shared bucket's script); and the
Deliverer never claims a batch the limiter has not allowed."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

import pytest
import redis

from collector.store import KeySchema, TakeTokens
from reporter._delivery.batches import Batches
from reporter._pacing.limiter import LocalTokenBucket, SharedTokenBucket, Unlimited
from reporter._pacing.permits import make_limiter
from tests.support.clock import Clock
from tests.support.entries import make_config, numbered, store
from tests.support.scriptcalls import Scripts, store_of, store_on
from tests.support.windows import busiest
from tests.support.wiring import Sent, delivery_for

# A hair under a second: a grant one second after another (up to float rounding) is in the
# next second, as the bucket counts it.
ONE_SECOND = 1.0 - 1e-9

SECONDS = 5.0
STEP = 0.001


def run(take: Callable[[float], int], seconds: float = SECONDS, step: float = STEP) -> list[float]:
    """Call ``take(t)`` every ``step`` seconds for ``seconds``; the times of every grant."""
    granted: list[float] = []
    for i in range(round(seconds / step) + 1):
        t = i * step
        granted += [t] * take(t)
    return granted


@pytest.mark.parametrize(("rate", "burst"), [(10.0, 1), (10.0, 5), (3.5, 1), (200.0, 20)])
def test_local_bucket_rate_over_five_seconds(rate: float, burst: int) -> None:
    clock = Clock()
    start = clock.now
    bucket = LocalTokenBucket(rate, burst, clock)

    def take(t: float) -> int:
        clock.now = start + t
        return bucket.acquire(8).granted

    times = run(take)
    expected = burst + rate * SECONDS
    assert abs(len(times) - expected) <= max(1.0, 0.01 * expected)
    assert busiest(times, ONE_SECOND) <= burst + rate


def test_burst_one_spaces_requests_so_no_second_exceeds_the_rate() -> None:
    clock = Clock()
    bucket = LocalTokenBucket(10.0, 1, clock)
    times: list[float] = []
    for i in range(5001):
        clock.now = 1000.0 + i * STEP
        times += [clock.now] * bucket.acquire(3).granted
    assert busiest(times, ONE_SECOND) <= 10
    assert all(b - a >= 0.1 - 1e-9 for a, b in itertools.pairwise(times))


def test_local_bucket_refund_pause_and_wait() -> None:
    clock = Clock()
    bucket = LocalTokenBucket(4.0, 2, clock)
    grant = bucket.acquire(5)
    assert (grant.granted, grant.wait) == (2, pytest.approx(0.25))
    bucket.refund(1)
    assert bucket.acquire(5).granted == 1
    bucket.pause(3.0)
    clock.now += 2.0
    grant = bucket.acquire(1)
    assert (grant.granted, grant.wait) == (0, pytest.approx(1.0))
    clock.now += 1.0
    assert bucket.acquire(1).granted == 0  # the pause emptied it: one token takes 0.25 s
    clock.now += 0.25
    assert bucket.acquire(1).granted == 1


@pytest.mark.parametrize(("rate", "burst"), [(10.0, 1), (10.0, 5)])
def test_shared_bucket_script_rate_with_two_takers(r: redis.Redis, rate: float, burst: int) -> None:
    """The script's algorithm on injected times: two processes taking in turn together get
    what one bucket allows."""
    store = store_of(r, KeySchema("lim", 1))
    key = store.schema.limiter("sink")
    base_us = 1_700_000_000_000_000

    def take(t: float) -> int:
        now = base_us + round(t * 1_000_000)
        return store.call(TakeTokens(key, rate, burst, 8, now_us=now)).granted

    times = run(take, step=0.005)
    expected = burst + rate * SECONDS
    assert abs(len(times) - expected) <= max(1.0, 0.01 * expected)
    assert busiest(times, ONE_SECOND) <= burst + rate


def test_shared_bucket_refund_and_pause_on_redis_time(r: redis.Redis) -> None:
    store = store_of(r, KeySchema("lim", 1))
    calls: list[object] = []
    real = store.call

    def counted(request: object) -> object:
        calls.append(request)
        return real(request)  # type: ignore[arg-type]

    store.call = counted  # type: ignore[method-assign,assignment]
    clock = Clock()
    bucket = SharedTokenBucket(store, "sink", 1.0, 2, clock)
    assert bucket.acquire(3).granted == 2
    refused = bucket.acquire(1)
    assert refused.granted == 0 and 0 < refused.wait <= 1.0
    asked = len(calls)
    assert bucket.acquire(1).granted == 0  # not asked again before a token can be there
    assert len(calls) == asked
    clock.now += refused.wait
    bucket.refund(1)
    assert bucket.acquire(1).granted == 1
    bucket.pause(30.0)
    clock.now += 31.0  # the local clock moved on, the shared pause has not ended
    grant = bucket.acquire(1)
    assert grant.granted == 0 and grant.wait > 25
    assert r.pttl(store.schema.limiter("sink")) > 25_000


def test_make_limiter_follows_the_sink_settings(redis_url: str, client: redis.Redis) -> None:
    def limiter(**sink: object) -> object:
        config = make_config(redis_url, sink=sink)
        return make_limiter(config, store_on(client, config))

    assert isinstance(limiter(), Unlimited)
    assert isinstance(limiter(requests_per_second=10.0), SharedTokenBucket)
    local = limiter(requests_per_second=5.0, request_burst=3, rate_limit_scope="process")
    assert isinstance(local, LocalTokenBucket) and (local.rate, local.burst) == (5.0, 3)


def test_nothing_is_claimed_before_the_limiter_allows_it(
    redis_url: str, client: redis.Redis
) -> None:
    config = make_config(redis_url, reporter={"linger_ms": 0, "max_batches_per_claim": 8})
    batches = Batches(store_on(client, config), config)
    clock = Clock()
    limiter = LocalTokenBucket(1.0, 3, clock)
    sent = Sent()
    deliverer = delivery_for(batches, sent, config, clock, limiter)
    schema = batches.store.schema
    keys = store(Scripts(client), schema, "g", numbered("g", 10 * 128))
    stop = threading.Event()

    assert deliverer.drain(keys, "g", stop) is True  # 3 of 8 batches allowed
    assert len(sent.batches) == 3
    assert client.llen(keys.queue("g")) == 7 * 128  # the rest were never claimed
    assert deliverer.drain(keys, "g", stop) is False  # no token: no claim, no lease
    assert client.llen(keys.queue("g")) == 7 * 128
    assert client.zcard(keys.inflight) == 0

    clock.now += 2.0  # two tokens
    deliverer.drain(keys, "g", stop)
    assert len(sent.batches) == 5

    # a claim that finds less than it was allowed gives the rest back
    keys2 = store(Scripts(client), schema, "h", numbered("h", 100))
    clock.now += 3.0
    deliverer.drain(keys2, "h", stop)
    assert len(sent.batches) == 6
    assert limiter.acquire(3).granted == 2


def test_shared_bucket_refills_from_the_end_of_a_pause(r: redis.Redis) -> None:
    store = store_of(r, KeySchema("lim", 1))
    key = store.schema.limiter("paused")
    base = 1_700_000_000_000_000

    def take(at_s: float, wanted: int = 1, pause_ms: int = 0) -> tuple[int, int]:
        tokens = store.call(
            TakeTokens(key, 10.0, 1, wanted, pause_ms, base + round(at_s * 1_000_000))
        )
        return tokens.granted, tokens.wait_us

    assert take(0.0, 0, pause_ms=1000) == (0, 1_000_000)
    assert take(0.5) == (0, 500_000)
    granted, wait = take(1.05)
    assert granted == 0 and 49_000 <= wait <= 51_000  # half a token since the pause ended
    assert take(1.1)[0] == 1


def test_a_partly_granted_ask_and_a_refund_do_not_block_the_next_ask(r: redis.Redis) -> None:
    """A hot-game worker asks for 16 retries, finds none and gives the token back: its
    claim right after must get it (a local "not before" once starved such workers)."""
    store = store_of(r, KeySchema("lim", 1))
    clock = Clock()
    bucket = SharedTokenBucket(store, "starve", 10.0, 1, clock)
    assert bucket.acquire(16).granted == 1
    bucket.refund(1)
    assert bucket.acquire(1).granted == 1


def test_a_limited_sweeper_spends_its_requests_on_the_fullest_batch(
    redis_url: str, client: redis.Redis
) -> None:
    """One request allowed at a time: the game with a full batch goes first, and a game
    short of a batch only takes a token nobody waits for."""
    from reporter._service.service import ReporterService

    config = make_config(redis_url, shards=1, reporter={"linger_ms": 0})
    clock = Clock()
    sent = Sent()
    service = ReporterService(config, sender=sent)
    try:
        limiter = LocalTokenBucket(1.0, 1, clock)
        service.permits.limiter = limiter
        schema = service.store.schema
        store(Scripts(client), schema, "small", numbered("small", 10))
        store(Scripts(client), schema, "big", numbered("big", 300))
        service.ownership.loop()
        [sweeper] = service.sweepers
        sweeper.loop()
        assert len(sent.batches) == 1
        assert client.llen(schema.for_game("big").queue("big")) == 300 - 128  # big went first
        assert client.llen(schema.for_game("small").queue("small")) == 10
        clock.now += 1.0  # one more token; the small game is ready too (linger 0), but the
        sweeper.loop()  # full batch comes first again
        assert client.llen(schema.for_game("big").queue("big")) == 300 - 256
        assert client.llen(schema.for_game("small").queue("small")) == 10
    finally:
        service.stop(grace=0)
        service.store.close()


def test_while_requests_are_scarce_a_short_game_waits_longer(
    redis_url: str, client: redis.Redis
) -> None:
    from reporter._service.service import ReporterService

    config = make_config(redis_url, shards=1, reporter={"linger_ms": 0})
    sent = Sent()
    service = ReporterService(config, sender=sent)
    try:
        service.permits.limiter = LocalTokenBucket(1.0, 5, Clock())
        store(Scripts(client), service.store.schema, "small", numbered("small", 10))
        service.ownership.loop()
        [sweeper] = service.sweepers
        service.permits._scarce_at = time.monotonic()  # a full batch just found no token
        sweeper.loop()
        assert sent.batches == []  # younger than half the freshness window: it waits
        service.permits._scarce_at = float("-inf")
        sweeper.loop()
        assert len(sent.batches) == 1
    finally:
        service.stop(grace=0)
        service.store.close()


def test_a_spare_caller_gets_no_token_while_a_full_batch_waits(r: redis.Redis) -> None:
    """Across processes: once a caller who would wait was refused, tokens are scarce for a
    second and spare callers (batches that are not full) get none; then they do again."""
    store = store_of(r, KeySchema("lim", 1))
    key = store.schema.limiter("spare")
    base = 1_700_000_000_000_000

    def take(at_s: float, spare: bool) -> tuple[int, bool]:
        tokens = store.call(TakeTokens(key, 10.0, 1, 1, 0, base + round(at_s * 1e6), spare))
        return tokens.granted, tokens.scarce

    assert take(0.0, spare=True) == (1, False)  # nobody waits: a spare caller is served
    assert take(0.01, spare=False) == (0, True)  # a full batch is refused: scarce now
    assert take(0.2, spare=True) == (0, True)  # a token is there, but not for spares
    assert take(0.2, spare=False) == (1, True)  # it goes to the full batch
    assert take(1.5, spare=True) == (1, False)  # a second later, spares are served again
    local = LocalTokenBucket(10.0, 1, Clock())
    assert local.acquire(1, spare=True).granted == 1
    assert not local.acquire(1).granted
    assert (local.acquire(1, spare=True).granted, local.acquire(1, spare=True).scarce) == (0, True)
