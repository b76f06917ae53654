"""A Redis at maxmemory with ``noeviction``: writes that grow memory are refused (OOM), and
everything the reporter needs to drain still works, so delivery never stops.

Two ways to make a server full: filled for real (``--maxmemory 4mb``, events collected until
Redis refuses them), and, for the script-by-script checks, ``CONFIG SET maxmemory 1`` on a
server that already holds some state (every byte is then over the limit)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest
import redis
from redis.cluster import RedisCluster

from collector import BackendFull, Collector, TelemetryError
from collector._buffer import no_pending
from collector._writer import Writer
from collector.metrics import Tally
from collector.store import SCRIPT_NAMES, KeySchema, ShardKeys, encode_entry, script_text
from reporter._commands.status import status_text
from reporter._monitoring.levels import RedisReadings
from reporter._service.store_watch import StoreWatch
from tests.support.fixtures import BINARIES, MakeEndpoint, StartService
from tests.support.polling import wait_until
from tests.support.scenarios import (
    assert_reconciled,
    drained,
    make_config,
    received_keys,
    schema_of,
)
from tests.support.scriptcalls import Scripts, store_of, store_on
from tests.support.servers import Cluster, Server

GAMES = [f"full-{i}" for i in range(20)]
PAD = "x" * 40  # events of about 80 bytes stored: about 40,000 fit in 4 MB


@pytest.fixture(params=sorted(BINARIES))
def full_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """A private server of each kind with a small maxmemory and no eviction."""
    srv = Server(
        BINARIES[request.param], extra=["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"]
    ).start()
    yield srv
    srv.cleanup()


def entries(game: str, seqs: range) -> list[bytes]:
    """Stored entries of ``game`` with these sequence numbers, collected now."""
    now = time.time_ns() // 1_000_000
    return [encode_entry(now, orjson.dumps({"game": game, "seq": s, "pad": PAD})) for s in seqs]


def fill(client: redis.Redis, schema: KeySchema) -> int:
    """Store events of ``GAMES`` until Redis refuses even one; how many it took.  (A large
    call can be refused for its own arguments, which count while it is read.)"""
    scripts = Scripts(store_of(client, schema))
    stored, seq, calls = 0, 0, 0
    for step in (200, 10, 1):
        while True:
            game = GAMES[calls % len(GAMES)]
            calls += 1
            try:
                scripts.collect(
                    schema.for_game(game),
                    game,
                    1_000_000,
                    3600,
                    entries(game, range(seq, seq + step)),
                )
            except BackendFull:
                break
            stored += step
            seq += step
    return stored


def refuses_writes(client: redis.Redis | RedisCluster) -> bool:
    try:
        client.set("oom-probe", "x" * 65536)  # its own argument counts while it is read
    except redis.exceptions.OutOfMemoryError:
        return True
    client.delete("oom-probe")
    return False


def test_a_full_redis_is_drained_and_takes_events_again(
    full_server: Server, make_endpoint: MakeEndpoint, start_service: StartService
) -> None:
    """The reproduction: Redis filled until it refuses writes, then a reporter starts. It
    takes its shards, sweeps and delivers everything; afterwards Redis stores events again."""
    endpoint = make_endpoint()
    config = make_config(full_server.url, endpoint.url)
    client, schema = full_server.client(), schema_of(config)
    stored = fill(client, schema)
    assert stored > 10_000
    assert refuses_writes(client)

    service = start_service(config)
    totals = wait_until(lambda: drained(client, schema), timeout=60, what="everything delivered")
    assert totals.counter("delivered") == stored
    assert_reconciled(totals)
    keys = received_keys(endpoint)
    assert sum(keys.values()) >= stored and len(keys) == stored
    assert len(service.ownership.owned()) == config.redis.shards
    assert not refuses_writes(client)
    Scripts(store_of(client, schema)).collect(
        schema.for_game(GAMES[0]), GAMES[0], 1000, 60, entries(GAMES[0], range(10**6, 10**6 + 10))
    )


@contextmanager
def full(*clients: redis.Redis) -> Iterator[None]:
    """Every byte over the limit: the server refuses any write that may grow memory."""
    for c in clients:
        c.config_set("maxmemory-policy", "noeviction")
        c.config_set("maxmemory", "1")
    try:
        yield
    finally:
        for c in clients:
            c.config_set("maxmemory", "0")


def claim(scripts: Scripts, keys: ShardKeys, game: str, batch_id: str, most: int = 1) -> Any:
    return scripts.claim(keys, game, batch_id, "tok", 10, most, 60_000, 0, 0)


def test_every_script_the_drain_needs_runs_at_maxmemory(r: redis.Redis) -> None:
    """claim, ack, nack, settle, release, extend, reap, take_retries, the shard lease, the
    heartbeat and every read of the sweep and of status work on a full server, even with an
    empty script cache; collect (and a plain write) is refused as BackendFull, nothing
    written."""
    schema = KeySchema("oom", 1)
    store = store_of(r, schema)
    scripts = Scripts(store)
    keys = schema.for_game("g")
    scripts.collect(keys, "g", 10_000, 3600, entries("g", range(100)))
    expired = claim(scripts, keys, "g", "expired").batches[0].batch_id
    r.zadd(keys.inflight, {expired: 1})  # its lease ran out long ago
    with full(r):
        assert refuses_writes(r)
        with pytest.raises(BackendFull):
            scripts.collect(keys, "g", 10_000, 3600, entries("g", range(100, 110)))
        assert r.llen(keys.queue("g")) == 90  # nothing of the refused call was written
        r.script_flush()  # a restart with the data (AOF) but no scripts: SCRIPT LOAD works

        # the sweep's reads and the status read
        assert store.ring(keys, "", 10).games == ["g"]
        assert store.game_states(keys, ["g"])[0].length == 90
        assert store.read_shard(keys).buffered == 90
        # the shard lease: taken, renewed, given up; the registry heartbeat, new and renewed
        assert scripts.shard_lease(keys, "me", 5000)
        assert scripts.shard_lease(keys, "me", 5000)
        assert not scripts.shard_lease(keys, "other", 5000)
        assert store.heartbeat("me", 5000).live == 1
        assert store.heartbeat("me", 5000).live == 1
        assert store.heartbeat("other", 5000) == (2, frozenset({"me", "other"}))

        # the batch life cycle
        ids = [b.batch_id for b in claim(scripts, keys, "g", "b", most=5).batches]
        assert len(ids) == 5
        assert scripts.extend(keys, ids[0], "tok", 60_000)
        assert scripts.ack(keys, ids[0], "tok") == 10
        assert (
            scripts.nack(
                keys,
                ids[1],
                "tok",
                permanent=False,
                min_delay_ms=0,
                initial_ms=1,
                max_ms=1,
                max_attempts=5,
                jitter=0.0,
                dead_max=100,
                reason="503",
            ).state
            == "retry"
        )
        assert (
            scripts.nack(
                keys,
                ids[2],
                "tok",
                permanent=True,
                min_delay_ms=0,
                initial_ms=1,
                max_ms=1,
                max_attempts=5,
                jitter=0.0,
                dead_max=100,
                reason="400",
            ).state
            == "dead"
        )
        assert scripts.release(keys, ids[3], "tok")
        settled = scripts.settle(
            keys, ids[4], "tok", retry=[1, 2], refused=[(3, "bad")], initial_ms=1, max_ms=1
        )
        assert settled.delivered == 7
        assert scripts.reap(keys, 10, 5, 100).retried == 1
        taken = scripts.take_retries(keys, "tok2", 60_000, 10)
        assert len(taken) == 4  # nacked, released, settle's retry part, reaped
        for batch in taken:
            assert scripts.ack(keys, batch.batch_id, "tok2") >= 0
        for k in range(5):  # the rest (40 events), then a claim of nothing unregisters "g"
            for batch in claim(scripts, keys, "g", f"rest{k}", most=2).batches:
                assert scripts.ack(keys, batch.batch_id, "tok") == 10
        assert r.llen(keys.queue("g")) == 0 and store.ring(keys, "", 10).games == []
        assert scripts.shard_lease(keys, "me", 0) is False  # given up
    assert not refuses_writes(r)
    assert store.read_shard(keys).counters["delivered"] == 100 - 10 - 1  # 10 dead, 1 refused


def test_the_lease_heartbeat_and_drain_work_on_a_full_cluster(cluster: Cluster) -> None:
    """The same scripts on Redis Cluster, every primary full."""
    rc = RedisCluster.from_url(cluster.url, socket_timeout=5)
    nodes = [node.client() for node in cluster.nodes]
    store = store_on(rc, make_config(cluster.url, redis={"cluster": True, "shards": 8}))
    scripts = Scripts(store)
    schema = store.schema
    try:
        for k in schema.all_shards():
            rc.delete(
                k.owner,
                k.ring,
                k.active,
                k.inflight,
                k.batches,
                k.payloads,
                k.stats,
                k.retry,
                k.dead,
                *(k.queue(g) for g in GAMES),
            )
        rc.delete(schema.reporters)
        for game in GAMES:
            scripts.collect(schema.for_game(game), game, 10_000, 60, entries(game, range(20)))
        with full(*nodes):
            assert refuses_writes(rc)
            with pytest.raises(BackendFull):
                scripts.collect(
                    schema.for_game(GAMES[0]),
                    GAMES[0],
                    10_000,
                    60,
                    entries(GAMES[0], range(20, 30)),
                )
            assert store.heartbeat("me", 5000).live == 1
            memory = store.memory()
            assert len(memory) == len(cluster.nodes)
            assert all(m.refusing_writes for m in memory)
            for game in GAMES:
                keys = schema.for_game(game)
                assert scripts.shard_lease(keys, "me", 5000)
                assert store.read_shard(keys).buffered >= 20
                for batch in claim(scripts, keys, game, f"c-{game}", most=2).batches:
                    assert scripts.ack(keys, batch.batch_id, "tok") == 10
        assert sum(store.read_shard(k).buffered for k in schema.all_shards()) == 0
    finally:
        rc.close()


def test_a_shard_without_a_marker_is_marked_once_redis_has_room(r: redis.Redis) -> None:
    """The sweep's SET NX of a new shard's marker is refused at maxmemory: the sweep goes on
    and a later one marks the shard."""
    store = store_of(r, KeySchema("oom-mark", 1))
    keys = store.schema.shard(0)
    watch = StoreWatch(store, Tally())
    with full(r):
        watch.seen(keys, None, 0)
    assert r.get(keys.marker) is None
    watch.seen(keys, None, 0)
    assert r.get(keys.marker) is not None


def test_the_sdk_keeps_what_a_full_redis_refuses_and_stores_it_after_the_drain(
    full_server: Server, make_endpoint: MakeEndpoint, start_service: StartService
) -> None:
    """60,000 events over 20 games into a 4 MB Redis (about 40,000 fit): the SDK's writes are
    refused (BackendFull, counted in refused_oom, told to on_error) and its buffer holds the
    rest. A reporter then drains Redis, the SDK's held events get stored, and every event
    collected is delivered: the SDK's, the store's and the endpoint's counts agree."""
    endpoint = make_endpoint()
    config = make_config(full_server.url, endpoint.url)
    client, schema = full_server.client(), schema_of(config)
    errors: list[tuple[TelemetryError, int]] = []
    lock = threading.Lock()

    def on_error(error: TelemetryError, count: int) -> None:
        with lock:
            errors.append((error, count))

    sdk = Collector(
        url=full_server.url,
        shards=config.redis.shards,
        key_prefix="dlv",
        max_buffer_events=100_000,
        max_events_per_game=100_000,
        flush_interval_ms=10,
        retry_max_delay_ms=200,
        on_error=on_error,
    )
    try:
        total = 60_000
        for seq in range(total // len(GAMES)):
            for game in GAMES:
                sdk.collect(game, {"game": game, "seq": seq, "pad": PAD})
        held = wait_until(
            lambda: sdk.stats()["refused_oom"] > 0 and sdk.stats()["buffered"],
            what="writes refused, events held in the SDK's buffer",
        )
        memory = client.info("memory")  # the SDK's large writes are refused before the last
        assert memory["used_memory"] > 0.9 * memory["maxmemory"]  # bytes are taken
        assert 0 < held < total

        start_service(config)
        assert sdk.flush(timeout=60), "the held events were stored once Redis drained"
        totals = wait_until(
            lambda: drained(client, schema), timeout=60, what="everything delivered"
        )
        stats = sdk.stats()
    finally:
        sdk.close(timeout=1)
    assert stats["accepted"] == stats["stored"] == total, stats
    assert stats["dropped_buffer_full"] == stats["buffered"] == 0, stats
    assert stats["refused_oom"] > 0 and stats["backend_errors"] > 0  # counted, not lost
    assert totals.counter("stored") == totals.counter("delivered") == total
    assert_reconciled(totals)
    keys = received_keys(endpoint)
    assert len(keys) == total  # every event collected reached the endpoint
    with lock:
        full_errors = [e for e, _ in errors if isinstance(e, BackendFull)]
    assert full_errors and all("maxmemory" in str(e) for e in full_errors)


def test_status_and_the_metrics_say_when_redis_refuses_writes(full_server: Server) -> None:
    config = make_config(full_server.url)
    client = full_server.client()
    store = store_on(client, config)
    readings = RedisReadings(store, frozenset, max_age=0)
    assert "Redis is full" not in status_text(store, config, as_json=False)
    assert readings.get().refusing_writes is False

    fill(client, schema_of(config))
    text = status_text(store, config, as_json=False)
    [line] = [line for line in text.splitlines() if line.startswith("Redis is full")]
    assert "maxmemory 4.0 MB (policy noeviction); writes are refused" in line
    [memory] = json.loads(status_text(store, config, as_json=True))["redis_memory"]
    assert memory["refusing_writes"] and memory["max_bytes"] == 4 * 1024 * 1024
    assert memory["oom_refusals"] >= 3  # fill() met one refusal per call size
    reading = readings.get()
    assert reading.refusing_writes and reading.memory[0].refusing_writes
    assert json.loads(status_text(store, config, as_json=True, shards=False))["redis_memory"]


def test_oom_replies_since_the_last_reading_count_as_refusing(r: redis.Redis) -> None:
    """A node under its limit again still refused writes since the last reading."""
    readings = RedisReadings(store_of(r), frozenset, max_age=0)
    assert readings.get().refusing_writes is False
    with full(r):
        assert refuses_writes(r)
    reading = readings.get()
    assert reading.refusing_writes and not reading.memory[0].full
    assert readings.get().refusing_writes is False


def test_each_script_says_why_it_may_or_may_not_run_at_maxmemory() -> None:
    """allow-oom only with its reason in the header; collect, which grows memory, without."""
    for name in SCRIPT_NAMES:
        text = script_text(name)
        first = text.splitlines()[0]
        if "allow-oom" in first:
            assert "-- allow-oom: " in text, name
        elif "no-writes" in first:
            assert "-- no-writes: " in text, name
        else:
            assert name == "collect" and "-- No allow-oom: it grows memory" in text, name


def test_sync_mode_raises_backend_full_and_counts_it(r: redis.Redis, redis_url: str) -> None:
    sdk = Collector(url=redis_url, mode="sync", key_prefix="oom-sync")
    try:
        with full(r), pytest.raises(BackendFull, match="maxmemory"):
            sdk.collect("g", {"n": 1})
        assert sdk.stats()["refused_oom"] == 1
        assert sdk.collect("g", {"n": 2}) == 0
        assert sdk.stats()["stored"] == 1
    finally:
        sdk.close(timeout=1)


def test_after_a_refusal_the_sdk_probes_each_full_shard_with_one_call(r: redis.Redis) -> None:
    """A full Redis reads every command whole before refusing it: after a refused round the
    writer sends one call per full shard, and the rest of that shard's calls in the same
    round once the probe is taken."""
    schema = KeySchema("oom-probe", 2)
    writer = Writer(store_of(r, schema), lambda game: 10**6, lambda game: 3600)
    queues = {game: entries(game, range(5)) for game in GAMES}
    shards = {schema.shard_of(game) for game in GAMES}

    def refusals() -> int:
        return int(r.info("errorstats").get("errorstat_OOM", {}).get("count", 0))

    with full(r):
        before = refusals()
        first = writer.write(queues, no_pending())
        assert refusals() - before == len(GAMES)  # everything was sent, and refused
        assert first.refused_oom == 5 * len(GAMES) and first.stored == 0
        before = refusals()
        second = writer.write(queues, no_pending())
        assert refusals() - before == len(shards)  # one probe per full shard
        assert second.refused_oom == 5 * len(shards)
        assert sum(map(len, second.failed.values())) == 5 * len(GAMES)  # all kept
        assert isinstance(second.error, BackendFull)
    third = writer.write(queues, no_pending())
    assert third.error is None and third.stored == 5 * len(GAMES)
    assert sum(r.llen(schema.for_game(g).queue(g)) for g in GAMES) == 5 * len(GAMES)
