"""Three reporter processes share the shards; one is SIGKILLed under load and the other two
take its shards over once their leases expire.  A batch reaches the endpoint twice only when
its lease expired (the dead process held it), and each such batch is counted as reaped."""

from __future__ import annotations

import signal
import time
from collections import Counter
from typing import Any

import redis

from collector.store import KeySchema
from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint
from tests.support.fixtures import MakeEndpoint
from tests.support.polling import wait_until
from tests.support.processes import EXIT_MARGIN, Spawn
from tests.support.scenarios import (
    Script,
    assert_reconciled,
    drained,
    make_config,
    push_events,
    received_keys,
    schema_of,
)
from tests.support.servers import Server

SHARDS = 8
LEASE = 2.0  # shard_lease_seconds and lease_seconds
GAMES = [f"g{i}" for i in range(24)]
EVENTS = 400  # per game


def owners(client: redis.Redis, schema: KeySchema) -> list[str]:
    return [(client.get(keys.owner) or b"").decode() for keys in schema.all_shards()]


def live(client: redis.Redis, schema: KeySchema) -> set[str]:
    return {m.decode() for m in client.zrangebyscore(schema.reporters, time.time() * 1000, "+inf")}


def pid_of(owner: str) -> int:
    return int(owner.split(":")[-2])


def test_a_killed_reporters_shards_are_taken_over_and_only_reaped_batches_come_twice(
    own_server: Server,
    make_endpoint: MakeEndpoint,
    spawn: Spawn,
) -> None:
    def decide(_: int, __: dict[str, Any]) -> tuple[int, dict[str, str]]:
        script.release.wait(0.02)  # slow enough that POSTs are in flight at the kill
        return 200, {}

    script = Script(decide)
    endpoint = make_endpoint(script)
    config = make_config(
        own_server.url,
        endpoint.url,
        redis={"shards": SHARDS},
        reporter={"shard_lease_seconds": LEASE, "lease_seconds": LEASE, "max_batches_per_claim": 2},
    )
    schema, client = schema_of(config), own_server.client()
    try:
        run_and_kill_one(config, schema, client, endpoint, spawn)
    finally:
        client.close()


def run_and_kill_one(
    config: ReporterConfig,
    schema: KeySchema,
    client: redis.Redis,
    endpoint: LocalEndpoint,
    spawn: Spawn,
) -> None:
    processes = [spawn(config) for _ in range(3)]
    wait_until(
        lambda: (
            len(live(client, schema)) == 3
            and len(set(owners(client, schema)) - {""}) == 3
            and "" not in owners(client, schema)
        ),
        timeout=30,
        what="three reporters sharing every shard",
    )

    for game in GAMES:
        push_events(client, schema, game, range(EVENTS))
    wait_until(lambda: endpoint.requests >= 10, what="deliveries under way")
    held = owners(client, schema)
    victim_id = max(set(held), key=held.count)
    [victim] = [p for p in processes if p.proc.pid == pid_of(victim_id)]
    its_shards = [n for n, owner in enumerate(held) if owner == victim_id]
    victim.proc.kill()
    killed_at = time.monotonic()
    assert victim.wait(10) == -signal.SIGKILL

    # Its shards get a live owner again once their leases run out (LEASE), plus at most
    # one renewal round of the others (LEASE / 3); the deadline leaves room for a busy machine.
    def taken_over() -> bool:
        now = owners(client, schema)
        alive = live(client, schema) - {victim_id}
        return all(now[n] in alive for n in its_shards)

    wait_until(taken_over, timeout=4 * LEASE + 10, what="the dead reporter's shards taken over")
    takeover = time.monotonic() - killed_at
    finished = wait_until(
        lambda: drained(client, schema), timeout=60, what="every event delivered and acknowledged"
    )

    assert_reconciled(finished)
    got = received_keys(endpoint)
    assert set(got) == {(g, s) for g in GAMES for s in range(EVENTS)}
    with endpoint.lock:
        posts = Counter(r.batch_id for r in endpoint.received)
        attempts = {
            r.batch_id: int(r.headers.get("X-Telemetry-Attempt", "1")) for r in endpoint.received
        }
    twice = {batch for batch, n in posts.items() if n > 1}
    assert all(n <= 2 for n in posts.values())
    assert all(attempts[batch] > 1 for batch in twice)  # the second came after a reap
    assert len(twice) <= finished.counter("batches_reaped")
    extra = sum(n - 1 for n in got.values())
    with endpoint.lock:
        assert extra == sum(len(r.events) for r in endpoint.received) - len(got)
    assert finished.counter("delivered") == len(GAMES) * EVENTS
    print(
        f"shards {its_shards} taken over {takeover:.1f} s after the SIGKILL; "
        f"{len(twice)} batches delivered twice, {finished.counter('batches_reaped')} reaped"
    )

    for process in processes:
        if process is not victim:
            process.signal(signal.SIGTERM)
            assert process.wait(config.reporter.grace_seconds + EXIT_MARGIN) == 0
