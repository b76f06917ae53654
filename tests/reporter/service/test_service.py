"""The running service (``start()``/``stop()``): fairness, hot pools, graceful stop and
the accounting invariant."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import httpx
import orjson
import pytest
import redis

import reporter._delivery.settling
from collector.counters import REPORTER
from collector.store import BackendUnavailable, entry_event
from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint, Received
from reporter._monitoring.accounting import read_totals
from reporter._service.service import ReporterService
from tests.support.entries import ids_of, make_config, now_ms, numbered, store_many
from tests.support.fixtures import MakeService
from tests.support.polling import wait_until
from tests.support.recorder import Recorder
from tests.support.scriptcalls import Scripts
from tests.support.servers import Server

QUICK = {"linger_ms": 200, "poll_interval_ms": 50}


def delivered(endpoint: LocalEndpoint) -> int:
    with endpoint.lock:
        return sum(len(r.events) for r in endpoint.received)


def check_batches(received: list[Received]) -> None:
    for post in received:
        assert 1 <= len(post.events) <= 128
        assert {e["game"] for e in post.events} == {post.game}, "one game per batch"
        assert post.idempotency_key == post.batch_id


# -- fairness ------------------------------------------------------------------------------


def test_a_flooding_game_does_not_hold_up_small_games(
    own_server: Server, own_client: redis.Redis, make_service: MakeService
) -> None:
    """20,000 events of one game (not hot) and 1,000 games with 3 events each.

    The endpoint is slow for the flood (25 ms a POST), so draining it takes seconds: a
    sweeper that drained one game before moving on would keep the small games of the flood's
    shard waiting until the flood was gone, and a flood that took over the thread pool would
    hold up every shard."""
    flood, slow_s, per_claim = "flood", 0.025, 8

    def respond(_: int, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        if body.get("game") == flood:
            time.sleep(slow_s)  # a slow ingest of big batches, not a wait for a condition
        return 200, {}, b"{}"

    with LocalEndpoint(respond) as endpoint:
        config = make_config(
            own_server.url,
            sink_url=endpoint.url,
            shards=16,
            reporter={**QUICK, "max_batches_per_claim": per_claim},
            buffer={"max_events_per_game": 50_000},
        )
        service = make_service(config, client=own_client)
        flood_entries = numbered(flood, 20_000)
        made_at = time.time()  # no small game's collect time is earlier
        small = {f"small-{i:04d}": numbered(f"small-{i:04d}", 3) for i in range(1000)}
        store_many(own_client, service, {flood: flood_entries})
        store_many(own_client, service, small)  # behind the flood in its shard's ring
        service.start()

        wait_until(
            lambda: delivered(endpoint) == 23_000,
            timeout=90,
            step=0.1,
            what="every event delivered",
        )
        received = list(endpoint.received)

    check_batches(received)
    expected = [*flood_entries, *(e for entries in small.values() for e in entries)]
    assert Counter(ids_of(e for r in received for e in r.events)) == Counter(
        orjson.loads(entry_event(e))["id"] for e in expected
    )
    flood_done = max(r.at for r in received if r.game == flood)
    small_at: dict[str, float] = {}
    for r in received:
        if r.game != flood:
            assert r.game not in small_at, "a small game fits in one batch"
            small_at[r.game] = r.at
    assert set(small_at) == set(small)
    # a partial batch is not sent before it lingered
    assert min(small_at.values()) >= made_at + QUICK["linger_ms"] / 1000 - 0.002
    # every small game went out before the flood had drained
    assert max(small_at.values()) < flood_done
    # In the flood's shard one sweep claims 8 of its batches (over 200 ms at 25 ms each,
    # longer than linger), then every other ready game: the small neighbours all go in the
    # second sweep, behind 16 of the flood's 157 batches.
    flood_shard = service.schema.shard_of(flood)
    neighbours = {g for g in small if service.schema.shard_of(g) == flood_shard}
    assert len(neighbours) > 20
    order = [r.game for r in received if r.game == flood or r.game in neighbours]
    last_neighbour = max(i for i, game in enumerate(order) if game != flood)
    assert order[:last_neighbour].count(flood) <= 2 * per_claim
    totals = read_totals(service.store)
    assert totals.counter("delivered") == 23_000
    assert totals.unaccounted == 0


# -- hot games -----------------------------------------------------------------------------


def pool_threads(service: ReporterService, executor: str) -> set[int]:
    """Idents of the threads of one of the scheduler's pools."""
    pool = service.runner.scheduler._executors[executor]._pool
    return {t.ident for t in pool._threads if t.ident is not None}


def test_hot_games_are_sent_by_their_own_pool(
    redis_url: str, client: redis.Redis, make_service: MakeService
) -> None:
    recorder = Recorder()
    config = make_config(
        redis_url,
        reporter={**QUICK, "hot_games": {"hot": 2}},
        buffer={"max_events_per_game": 10_000},
    )
    service = make_service(config, client=client, transport=recorder.transport())
    games = {
        "hot": numbered("hot", 2000),
        "cold-1": numbered("cold-1", 1000),
        "cold-2": numbered("cold-2", 300),
    }
    store_many(client, service, games)

    service.start()
    wait_until(lambda: len(recorder.events()) == 3300, what="every event delivered")

    hot_pool = pool_threads(service, "hot:hot")
    default_pool = pool_threads(service, "default")
    assert 1 <= len(hot_pool) <= 2
    hot_senders = {p.thread_id for p in recorder.posts if p.game == "hot"}
    cold_senders = {p.thread_id for p in recorder.posts if p.game != "hot"}
    assert hot_senders <= hot_pool
    assert cold_senders <= default_pool
    assert not hot_pool & default_pool
    assert Counter(ids_of(recorder.events("hot"))) == Counter(f"hot#{i}" for i in range(2000))
    assert all(len(p.events) <= 128 for p in recorder.posts)


# -- stop ----------------------------------------------------------------------------------


def blocking_endpoint(gate: threading.Event) -> LocalEndpoint:
    def respond(_: int, __: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        gate.wait(30)
        return 200, {}, b"{}"

    return LocalEndpoint(respond).start()


def quiet_config(redis_url: str, sink_url: str, **reporter: Any) -> ReporterConfig:
    return make_config(
        redis_url,
        sink_url=sink_url,
        shards=1,
        reporter={**QUICK, "workers": 1, "max_batches_per_claim": 1, **reporter},
    )


def test_stop_waits_for_an_inflight_post_within_the_grace(
    redis_url: str, client: redis.Redis, make_service: MakeService
) -> None:
    gate = threading.Event()
    endpoint = blocking_endpoint(gate)
    try:
        service = make_service(quiet_config(redis_url, endpoint.url), client=client)
        store_many(client, service, {"g1": numbered("g1", 128)})
        service.start()
        wait_until(lambda: endpoint.requests == 1, what="the POST to arrive")

        result: dict[str, int] = {}
        stopper = threading.Thread(target=lambda: result.update(service.stop(grace=30).counts))
        stopper.start()
        wait_until(service.stop_event.is_set, what="stop to begin")
        assert stopper.is_alive()  # still waiting for the POST
        gate.set()
        stopper.join(30)
        assert not stopper.is_alive()
    finally:
        gate.set()
        endpoint.stop()

    assert result["delivered"] == 128
    assert result["batches_released"] == 0
    assert read_totals(service.store).counter("delivered") == 128
    assert client.zcard(service.schema.shard(0).retry) == 0


def test_stop_releases_what_the_grace_did_not_cover(
    redis_url: str, client: redis.Redis, make_service: MakeService
) -> None:
    gate = threading.Event()
    endpoint = blocking_endpoint(gate)
    try:
        service = make_service(quiet_config(redis_url, endpoint.url), client=client)
        store_many(client, service, {"g1": numbered("g1", 128)})
        service.start()
        wait_until(lambda: endpoint.requests == 1, what="the POST to arrive")

        result = service.stop(grace=0.1).counts

        keys = service.schema.shard(0)
        assert result["batches_released"] == 1
        [batch_id] = client.zrange(keys.retry, 0, -1)
        assert client.zcard(keys.inflight) == 0
        assert b'"a":0' in client.hget(keys.batches, batch_id)  # no attempt charged
        totals = read_totals(service.store)
        assert (totals.pending_events, totals.unaccounted) == (128, 0)
        assert client.get(keys.owner) is None  # the shard was handed back
    finally:
        gate.set()
        wait_until(lambda: len(service.in_flight) == 0, what="the late POST to finish")
        endpoint.stop()
    # the late POST could not ack a batch it no longer held: it stays pending, to be sent
    # again (at least once)
    assert read_totals(service.store).pending_events == 128


def test_acks_of_a_claim_go_together_after_its_posts(
    redis_url: str, client: redis.Redis, make_service: MakeService
) -> None:
    recorder = Recorder()
    service = make_service(
        make_config(
            redis_url, shards=1, reporter={**QUICK, "workers": 1, "max_batches_per_claim": 4}
        ),
        client=client,
        transport=recorder.transport(),
    )
    store_many(client, service, {"g": numbered("g", 4 * 128)})
    rounds: list[int] = []
    ack_many = service.batches.ack_many

    def counted(acks: Any) -> Any:
        rounds.append(len(acks))
        return ack_many(acks)

    service.batches.ack_many = counted  # type: ignore[method-assign]
    scripts: list[list[str]] = []
    call_many = service.store.call_many

    def spied(requests: Any) -> Any:
        scripts.append([request.script for request in requests])
        return call_many(requests)

    service.store.call_many = spied  # type: ignore[method-assign]
    service.start()
    wait_until(
        lambda: read_totals(service.store).counter("delivered") == 512,
        what="every batch acknowledged",
    )
    assert rounds == [4]
    assert [names for names in scripts if "shard_lease" not in names] == [["ack_many"]]
    assert len(recorder.posts) == 4
    counts = service.stop().counts
    assert (counts["delivered"], counts["batches_delivered"]) == (512, 4)


def test_a_failed_ack_leaves_the_batch_in_flight_and_counts_it(
    redis_url: str, client: redis.Redis, make_service: MakeService, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    service = make_service(
        make_config(
            redis_url, shards=1, reporter={**QUICK, "workers": 1, "max_batches_per_claim": 2}
        ),
        client=client,
        transport=recorder.transport(),
    )
    store_many(client, service, {"g": numbered("g", 2 * 128)})

    def refused(acks: Any) -> list[Any]:
        return [BackendUnavailable("Redis went away (test)")] * len(acks)

    service.batches.ack_many = refused  # type: ignore[method-assign]
    reporter._delivery.settling.ratelog.reset("ack")  # logged at most every 30 s
    service.start()
    wait_until(lambda: service.tally.snapshot().get("ack_failed") == 2, what="two failed acks")
    counts = service.stop().counts
    assert counts.get("delivered", 0) == 0
    assert len(recorder.posts) == 2
    totals = read_totals(service.store)
    assert (totals.counter("delivered"), totals.pending_events) == (0, 256)
    assert client.zcard(service.schema.shard(0).inflight) == 2  # the leases will bring them back
    assert "could not acknowledge delivered batch" in caplog.text


def test_stop_acks_batches_delivered_before_a_post_it_gave_up_on(
    redis_url: str, client: redis.Redis, make_service: MakeService
) -> None:
    """The first batch of a claim is delivered, the second POST hangs past the grace: the
    first is acknowledged (never sent again), the second released."""
    gate = threading.Event()

    def respond(n: int, _: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        if n > 1:
            gate.wait(30)
        return 200, {}, b"{}"

    endpoint = LocalEndpoint(respond).start()
    try:
        service = make_service(
            quiet_config(redis_url, endpoint.url, max_batches_per_claim=2), client=client
        )
        store_many(client, service, {"g1": numbered("g1", 256)})
        service.start()
        wait_until(lambda: endpoint.requests == 2, what="the second POST to arrive")
        assert read_totals(service.store).counter("delivered") == 0  # not yet acked

        result = service.stop(grace=0.1).counts

        assert (result["delivered"], result["batches_released"]) == (128, 1)
        keys = service.schema.shard(0)
        assert client.zcard(keys.retry) == 1
        assert client.zcard(keys.inflight) == 0
        totals = read_totals(service.store)
        assert (totals.counter("delivered"), totals.pending_events) == (128, 128)
        assert totals.unaccounted == 0
    finally:
        gate.set()
        wait_until(lambda: len(service.in_flight) == 0, what="the late POST to finish")
        endpoint.stop()
    # the late POST's batch was released, so it cannot be acked: it stays to be sent again
    totals = read_totals(service.store)
    assert (totals.counter("delivered"), totals.pending_events) == (128, 128)
    assert endpoint.requests == 2


# -- accounting ----------------------------------------------------------------------------


def test_counters_add_up_after_a_run(
    redis_url: str, client: redis.Redis, make_service: MakeService
) -> None:
    recorder = Recorder(
        lambda request: httpx.Response(400 if b'"game":"bad"' in request.content else 200)
    )
    config = make_config(redis_url, reporter=QUICK, games={"capped": {"max_events_per_game": 100}})
    service = make_service(config, client=client, transport=recorder.transport())
    old = now_ms() - 200_000
    store_many(
        client,
        service,
        {
            "ok": numbered("ok", 500),
            "capped": numbered("capped", 300),  # the cap keeps the newest 100
            "old": numbered("old", 50, born_ms=old),
            "bad": numbered("bad", 20),  # rejected: dead-lettered
        },
    )

    service.start()
    wait_until(
        lambda: (
            read_totals(service.store).buffered == 0
            and read_totals(service.store).pending_events == 0
        ),
        what="everything drained",
    )
    counts = service.stop().counts
    # after the run: one game buffered, one batch claimed and not finished
    store_many(client, service, {"late": numbered("late", 30), "held": numbered("held", 40)})
    keys = service.schema.for_game("held")
    assert Scripts(service.store).claim(keys, "held", "b", "t", 128, 1, 30_000, 180_000, 0).batches

    totals = read_totals(service.store)
    c = totals.counter
    assert (c("stored"), c("delivered"), c("evicted"), c("stale")) == (940, 600, 200, 50)
    assert (totals.dead_now, totals.buffered, totals.pending_events) == (20, 30, 40)
    assert totals.unaccounted == 0
    assert c("stored") == (
        c("delivered")
        + c("evicted")
        + c("stale")
        + totals.dead_now
        + totals.buffered
        + totals.pending_events
    )
    assert counts["delivered"] == 600
    assert counts["stale"] == 50
    assert (counts["dead_batches"], counts["dead_events"]) == (1, 20)
    assert set(counts) <= set(REPORTER)  # the stopped: line speaks the shared vocabulary
    summary = totals.summary()
    assert summary["unaccounted"] == 0
    assert summary["batches_dead_listed"] == 1
    assert sorted(set(ids_of(recorder.events("ok")))) == sorted(f"ok#{i}" for i in range(500))
    assert ids_of(recorder.events("capped")) == [f"capped#{i}" for i in range(200, 300)]
