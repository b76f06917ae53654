"""A reporter process meets the ghosts that stopped shards before: a dead reporter whose clock
ran ten minutes fast left its heartbeat ten minutes ahead (the live one took only half the
shards), an owner key without expiry (its shard halted for good), and one whose holder left
no heartbeat.  Every event of every shard is delivered, once."""

from __future__ import annotations

import signal

from tests.support.fixtures import MakeEndpoint
from tests.support.lifecycle import server_ms
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

SHARDS = 4
LEASE = 2.0  # shard_lease_seconds and lease_seconds
EVENTS = 50  # per game


def test_a_reporter_takes_every_shard_from_ghosts_and_delivers_each_event_once(
    own_server: Server,
    make_endpoint: MakeEndpoint,
    spawn: Spawn,
) -> None:
    endpoint = make_endpoint(Script(lambda _, __: (200, {})))
    config = make_config(
        own_server.url,
        endpoint.url,
        redis={"shards": SHARDS},
        reporter={"shard_lease_seconds": LEASE, "lease_seconds": LEASE},
    )
    schema, client = schema_of(config), own_server.client()
    try:
        games: dict[int, str] = {}
        for game in (f"g{i}" for i in range(200)):
            games.setdefault(schema.shard_of(game), game)
        assert len(games) == SHARDS
        client.zadd(schema.reporters, {"fast:1:dead": server_ms(client) + 600_000})
        client.set(schema.shard(2).owner, "fast:1:dead")  # no expiry
        client.set(schema.shard(3).owner, "gone:2:dead", px=600_000)  # never registered
        for game in games.values():
            push_events(client, schema, game, range(EVENTS))

        reporter = spawn(config)
        finished = wait_until(
            lambda: drained(client, schema), timeout=60, what="every event delivered"
        )
        assert_reconciled(finished)
        got = received_keys(endpoint)
        assert set(got) == {(g, s) for g in games.values() for s in range(EVENTS)}
        assert all(n == 1 for n in got.values())
        assert finished.counter("owners_taken_over") == 2
        reporter.signal(signal.SIGTERM)
        assert reporter.wait(config.reporter.grace_seconds + EXIT_MARGIN) == 0
    finally:
        client.close()
