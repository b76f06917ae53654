"""Endpoint faults with the ReporterService running against a real LocalEndpoint.

For each fault: every stored event ends delivered or counted (nothing unaccounted once
drained), the requests made during an outage stay bounded (the SinkGate pauses claiming),
delivery resumes when the endpoint recovers, and the delivered counter in Redis equals the
distinct events the endpoint received (duplicates only where a lease was lost).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import redis

from collector.store import KeySchema
from reporter._demo.endpoint import LocalEndpoint
from reporter._monitoring.accounting import Totals
from reporter._service.service import ReporterService
from tests.support.fixtures import MakeEndpoint, StartService
from tests.support.polling import wait_until
from tests.support.scenarios import (
    Script,
    drain,
    drained,
    fill,
    games_in_distinct_shards,
    make_config,
    received_keys,
    schema_of,
)
from tests.support.scriptcalls import store_of
from tests.support.servers import Server, free_port

# Requests an outage of a few seconds may cost at most: with backoff from 50 ms the gate
# reopens about ten times; each reopening may send a probe per sweep thread.
OUTAGE_REQUEST_BOUND = 40


def assert_matches_endpoint(
    totals: Totals, endpoint: LocalEndpoint, service: ReporterService
) -> Counter[tuple[str, int]]:
    """The delivered counter equals the distinct events received; no duplicates unless a
    lease was lost; every POST carried its batch id as Idempotency-Key."""
    got = received_keys(endpoint)
    assert totals.counter("delivered") == len(got)
    lost = service.tally.snapshot().get("lease_lost", 0)
    if lost == 0:
        assert max(got.values(), default=1) == 1, "duplicates without a lost lease"
    with endpoint.lock:
        assert all(r.idempotency_key == r.batch_id for r in endpoint.received)
        assert all(0 < len(r.events) <= 128 for r in endpoint.received)
    return got


def started(
    own_server: Server, endpoint_url: str, start_service: StartService, **sections: dict[str, Any]
) -> tuple[ReporterService, redis.Redis, KeySchema]:
    config = make_config(own_server.url, endpoint_url, **sections)
    service = start_service(config)
    wait_until(
        lambda: len(service.ownership.owned()) == config.redis.shards, what="every shard owned"
    )
    return service, own_server.client(), schema_of(config)


def test_503_burst_then_recovery(
    own_server: Server, make_endpoint: MakeEndpoint, start_service: StartService
) -> None:
    first: list[float] = []

    def decide(n: int, body: dict[str, Any]) -> tuple[int, dict[str, str]]:
        first.append(time.monotonic())
        return (503, {}) if time.monotonic() - first[0] < 3.0 else (200, {})

    script = Script(decide)
    endpoint = make_endpoint(script)
    service, client, schema = started(own_server, endpoint.url, start_service)
    games = games_in_distinct_shards(schema, 4)
    stored = fill(client, schema, {g: 300 + 100 * i for i, g in enumerate(games)})

    totals = drain(client, schema)

    statuses = script.statuses()
    assert 2 <= statuses[503] <= OUTAGE_REQUEST_BOUND, statuses
    got = assert_matches_endpoint(totals, endpoint, service)
    assert set(got) == stored
    assert totals.counter("delivered") == len(stored)
    assert totals.counter("batches_retried") == statuses[503]
    assert service.gate.failures == 0  # open again


def test_429_retry_after_is_honoured(
    own_server: Server, make_endpoint: MakeEndpoint, start_service: StartService
) -> None:
    """One sweep thread, so requests are sequential: after each 429 with Retry-After: 1 the
    next request of any batch comes at least a second later."""
    script = Script(lambda n, body: (429, {"Retry-After": "1"}) if n <= 2 else (200, {}))
    endpoint = make_endpoint(script)
    service, client, schema = started(
        own_server, endpoint.url, start_service, reporter={"workers": 1}
    )
    games = games_in_distinct_shards(schema, 2)
    stored = fill(client, schema, {games[0]: 400, games[1]: 100})

    totals = drain(client, schema)

    with script.lock:
        log = sorted(script.log)
    assert [status for _, _, status, _ in log[:3]] == [429, 429, 200]
    arrivals = [at for _, at, _, _ in log]
    assert arrivals[1] - arrivals[0] >= 1.0
    assert arrivals[2] - arrivals[1] >= 1.0
    got = assert_matches_endpoint(totals, endpoint, service)
    assert set(got) == stored
    assert totals.counter("batches_retried") == 2


def test_timeouts_then_recovery(
    own_server: Server, make_endpoint: MakeEndpoint, start_service: StartService
) -> None:
    """The first answers take longer than the sink's 0.3 s timeout (and are errors when
    they finally come, so the endpoint does not record them)."""

    def decide(n: int, body: dict[str, Any]) -> tuple[int, dict[str, str]]:
        if n <= 6:
            script.release.wait(0.8)
            return 504, {}
        return 200, {}

    script = Script(decide)
    endpoint = make_endpoint(script)
    service, client, schema = started(
        own_server, endpoint.url, start_service, sink={"timeout_seconds": 0.3}
    )
    games = games_in_distinct_shards(schema, 3)
    stored = fill(client, schema, dict.fromkeys(games, 250))

    totals = drain(client, schema)

    assert endpoint.requests > 6
    assert totals.counter("batches_retried") == 6  # each timeout became a retry
    got = assert_matches_endpoint(totals, endpoint, service)
    assert set(got) == stored
    assert service.tally.snapshot().get("batches_retried") == 6


def test_connection_refused_then_endpoint_comes_up(
    own_server: Server, make_endpoint: MakeEndpoint, start_service: StartService
) -> None:
    port = free_port()  # nothing listens here until the endpoint starts
    service, client, schema = started(own_server, f"http://127.0.0.1:{port}/ingest", start_service)
    games = games_in_distinct_shards(schema, 3)
    stored = fill(client, schema, dict.fromkeys(games, 300))

    def retried() -> int:
        assert drained(client, schema) is None, "finished while nothing listened"
        return sum(int(client.hget(k.stats, "batches_retried") or 0) for k in schema.all_shards())

    wait_until(lambda: retried() >= 3, what="refused attempts")
    outage_started = time.monotonic()
    wait_until(
        lambda: time.monotonic() - outage_started > 1.5 and retried(), what="a longer outage"
    )
    endpoint = make_endpoint(port=port)

    totals = drain(client, schema)

    # every refused attempt became a retry; the outage cost a bounded number of them
    assert 3 <= totals.counter("batches_retried") <= OUTAGE_REQUEST_BOUND
    got = assert_matches_endpoint(totals, endpoint, service)
    assert set(got) == stored


def test_response_slower_than_the_lease_is_not_reaped_or_sent_twice(
    own_server: Server, make_endpoint: MakeEndpoint, start_service: StartService
) -> None:
    """lease 1 s, each answer takes 2.5 s: the LeaseKeeper renews the leases of the batch
    being sent and of those claimed with it and waiting their turn."""

    def decide(n: int, body: dict[str, Any]) -> tuple[int, dict[str, str]]:
        script.release.wait(2.5)
        return 200, {}

    script = Script(decide)
    endpoint = make_endpoint(script)
    service, client, schema = started(
        own_server, endpoint.url, start_service, sink={"timeout_seconds": 5.0}
    )
    games = games_in_distinct_shards(schema, 2, "slow")
    stored = fill(client, schema, {games[0]: 200, games[1]: 100})  # 2 + 1 batches

    totals = drain(client, schema)

    got = assert_matches_endpoint(totals, endpoint, service)
    assert set(got) == stored
    assert endpoint.requests == 3
    assert totals.counter("batches_reaped") == 0
    assert service.tally.snapshot().get("lease_lost", 0) == 0
    assert max(got.values()) == 1


def test_400_for_one_game_dead_letters_it_and_delivers_the_others(
    own_server: Server, make_endpoint: MakeEndpoint, start_service: StartService
) -> None:
    script = Script(lambda n, body: (400, {}) if body.get("game") == "bad" else (200, {}))
    endpoint = make_endpoint(script)
    service, client, schema = started(own_server, endpoint.url, start_service)
    good = [g for g in games_in_distinct_shards(schema, 3) if g != "bad"][:2]
    stored = fill(client, schema, {"bad": 300, good[0]: 200, good[1]: 150})

    totals = drain(client, schema)

    assert totals.dead_now == 300
    assert totals.counter("delivered") == 350
    got = assert_matches_endpoint(totals, endpoint, service)
    assert set(got) == {k for k in stored if k[0] != "bad"}
    dead = store_of(client, schema).dead_batches(1000)
    assert sorted(b.events for b in dead) == [44, 128, 128]
    assert {(b.game, b.attempts) for b in dead} == {("bad", 1)}
    assert all(b.reason.startswith("HTTP 400") for b in dead)
    assert script.statuses()[400] == 3  # a permanent rejection is not retried
