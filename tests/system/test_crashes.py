"""Reporter processes that die: SIGKILL mid-POST, SIGTERM during a slow POST, two signals.

Each runs ``python -m reporter run --config <toml>`` for real; a later process recovers what
a dead one held once its leases (1 s) expire, with the same Idempotency-Key and a higher
X-Telemetry-Attempt.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest
import redis

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
    totals,
)
from tests.support.servers import Server

GAME = "crash"
EVENTS = 60


def hang_first() -> Script:
    """A responder whose first request hangs (up to 30 s, or until the test ends) and then
    fails; every later request is answered 200 at once."""

    def decide(n: int, body: dict[str, Any]) -> tuple[int, dict[str, str]]:
        if n == 1:
            script.release.wait(30)
            return 503, {}
        return 200, {}

    script = Script(decide)
    return script


def headers_of(endpoint: LocalEndpoint, number: int) -> dict[str, str]:
    with endpoint.lock:
        return {k.lower(): v for k, v in endpoint.request_headers[number - 1].items()}


def setup(
    server: Server, endpoint: LocalEndpoint, **sections: dict[str, Any]
) -> tuple[ReporterConfig, redis.Redis]:
    config = make_config(server.url, endpoint.url, **sections)
    client = server.client()
    push_events(client, schema_of(config), GAME, range(EVENTS))
    return config, client


def test_sigkill_mid_post_then_another_reporter_delivers_after_the_lease(
    own_server: Server, make_endpoint: MakeEndpoint, spawn: Spawn
) -> None:
    endpoint = make_endpoint(hang_first())
    config, client = setup(own_server, endpoint)
    schema = schema_of(config)

    first = spawn(config)
    wait_until(lambda: endpoint.requests >= 1, what="the first POST")
    sent = headers_of(endpoint, 1)
    assert sent["x-telemetry-attempt"] == "1"
    first.proc.kill()
    assert first.wait(10) == -signal.SIGKILL
    assert totals(client, schema).pending_events == EVENTS  # still leased by the dead one

    second = spawn(config)
    wait_until(lambda: endpoint.received, what="the batch delivered by the second reporter")
    finished = wait_until(lambda: drained(client, schema), what="the batch acknowledged")

    [delivery] = endpoint.received
    again = {k.lower(): v for k, v in delivery.headers.items()}
    assert delivery.idempotency_key == sent["idempotency-key"] == delivery.batch_id
    assert again["idempotency-key"] == sent["idempotency-key"]
    assert int(again["x-telemetry-attempt"]) > int(sent["x-telemetry-attempt"])
    assert_reconciled(finished)
    assert finished.counter("delivered") == EVENTS
    assert finished.counter("batches_reaped") == 1
    assert sorted(received_keys(endpoint)) == [(GAME, s) for s in range(EVENTS)]

    second.signal(signal.SIGTERM)
    assert second.wait(config.reporter.grace_seconds + EXIT_MARGIN) == 0


@pytest.mark.parametrize(
    ("post_seconds", "grace", "outcome"),
    [
        (1.0, 4.0, "delivered"),  # the POST ends within the grace period
        (30.0, 1.0, "released"),  # it does not: the batch is handed back, no attempt charged
    ],
)
def test_sigterm_during_a_slow_post_exits_cleanly_and_loses_nothing(
    own_server: Server,
    make_endpoint: MakeEndpoint,
    spawn: Spawn,
    post_seconds: float,
    grace: float,
    outcome: str,
) -> None:
    def decide(n: int, body: dict[str, Any]) -> tuple[int, dict[str, str]]:
        woken = script.release.wait(post_seconds)
        return (503, {}) if woken else (200, {})

    script = Script(decide)
    endpoint = make_endpoint(script)
    config, client = setup(own_server, endpoint, reporter={"grace_seconds": grace})
    schema = schema_of(config)

    process = spawn(config)
    wait_until(lambda: endpoint.requests >= 1, what="the slow POST")
    process.signal(signal.SIGTERM)
    assert process.wait(grace + EXIT_MARGIN) == 0
    script.release.set()

    after = totals(client, schema)
    assert after.unaccounted == 0
    assert after.buffered == 0
    assert endpoint.requests == 1
    if outcome == "delivered":
        assert (after.counter("delivered"), after.pending_events) == (EVENTS, 0)
        assert len(received_keys(endpoint)) == EVENTS
    else:
        assert (after.counter("delivered"), after.pending_events) == (0, EVENTS)
        retry = client.zrange(schema.for_game(GAME).retry, 0, -1)
        assert len(retry) == 1  # released: due again at once ...
        assert client.zcard(schema.for_game(GAME).inflight) == 0
        meta = client.hget(schema.for_game(GAME).batches, retry[0])
        assert b'"a":0' in meta  # ... without an attempt charged
    assert f"released={int(outcome == 'released')}" in process.log()


def test_second_signal_exits_at_once_and_a_later_reporter_recovers(
    own_server: Server, make_endpoint: MakeEndpoint, spawn: Spawn
) -> None:
    endpoint = make_endpoint(hang_first())
    config, client = setup(own_server, endpoint, reporter={"grace_seconds": 60.0})
    schema = schema_of(config)

    first = spawn(config)
    wait_until(lambda: endpoint.requests >= 1, what="the hanging POST")
    first.signal(signal.SIGTERM)
    wait_until(lambda: "stopping" in first.log(), what="the first signal handled")
    first.signal(signal.SIGTERM)
    assert first.wait(EXIT_MARGIN) == 1  # not the 60 s grace period
    assert "second signal" in first.log()
    assert totals(client, schema).pending_events == EVENTS  # left to its lease

    later = spawn(config)
    wait_until(lambda: endpoint.received, what="the batch delivered by a later reporter")
    finished = wait_until(lambda: drained(client, schema), what="the batch acknowledged")
    assert_reconciled(finished)
    assert finished.counter("delivered") == EVENTS
    [delivery] = endpoint.received
    assert delivery.idempotency_key == headers_of(endpoint, 1)["idempotency-key"]
    assert int({k.lower(): v for k, v in delivery.headers.items()}["x-telemetry-attempt"]) > 1

    later.signal(signal.SIGTERM)
    assert later.wait(config.reporter.grace_seconds + EXIT_MARGIN) == 0


def test_sigterm_while_redis_hangs_exits_within_the_bound_and_loses_nothing(
    own_server: Server, make_endpoint: MakeEndpoint, spawn: Spawn
) -> None:
    """Redis stopped (SIGSTOP: connects succeed, nothing is answered) while a POST is under
    way: the reporter exits within grace + the Redis socket timeout + 2 s, lists what it left
    to lease expiry, and a later reporter delivers everything once Redis is back."""

    def decide(n: int, body: dict[str, Any]) -> tuple[int, dict[str, str]]:
        script.release.wait(1.5)  # the first answers come while Redis hangs
        return 200, {}

    script = Script(decide)
    endpoint = make_endpoint(script)
    grace, socket_timeout = 1.0, 1.0
    config, client = setup(
        own_server,
        endpoint,
        reporter={"grace_seconds": grace},
        redis={"socket_timeout_seconds": socket_timeout, "retries": 3},
    )
    schema = schema_of(config)

    first = spawn(config)
    wait_until(lambda: endpoint.requests >= 1, what="the first POST")
    own_server.pause()
    try:
        first.signal(signal.SIGTERM)
        # The promise is grace + socket timeout + 2 s; the margin is for the interpreter.
        assert first.wait(grace + socket_timeout + 2 + EXIT_MARGIN) == 0
    finally:
        own_server.resume()
    log = first.log()
    assert "left to lease expiry: 1 batch (" in log, log
    assert "Traceback" not in log, log

    script.release.set()
    later = spawn(config)
    finished = wait_until(lambda: drained(client, schema), what="everything delivered later")
    assert_reconciled(finished)
    assert finished.counter("delivered") == EVENTS
    assert set(received_keys(endpoint)) == {(GAME, s) for s in range(EVENTS)}
    later.signal(signal.SIGTERM)
    assert later.wait(config.reporter.grace_seconds + EXIT_MARGIN) == 0
