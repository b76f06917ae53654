"""``[redis] wait_for_replicas``: writes, claims and acks count only once replicas confirm them.

A server without a replica never confirms: the SDK keeps and resends its events, the
reporter hands its claims back unsent.  With a replica attached the same runs store and
deliver.  With 0 no WAIT is sent at all.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from collector import ConfigError
from collector.store import Ack, BackendUnreplicated, Collect, KeySchema, open_store
from reporter._delivery.batches import Batches
from reporter._demo.endpoint import LocalEndpoint
from tests.support.entries import ids_of, make_config, numbered, store
from tests.support.fixtures import MakeCollector, MakeService
from tests.support.polling import wait_until
from tests.support.scriptcalls import Scripts
from tests.support.servers import Server, default_binary
from tests.support.stored import queue_events, stats_total

SCHEMA = KeySchema("telemetry", 4)


@pytest.fixture
def primary_with_replica() -> Iterator[Server]:
    binary = default_binary()
    primary = Server(binary).start()
    replica = Server(
        binary,
        extra=["--replicaof", "127.0.0.1", str(primary.port), "--repl-diskless-sync-delay", "0"],
    ).start()
    wait_until(
        lambda: replica.client().info("replication")["master_link_status"] == "up",
        what="the replica to sync",
    )
    yield primary
    replica.cleanup()
    primary.cleanup()


def waits_sent(server: Server) -> int:
    return int(server.client().info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


def test_a_write_no_replica_confirms_is_kept_and_counted(
    own_server: Server, make_collector: MakeCollector
) -> None:
    c = make_collector(
        url=own_server.url,
        shards=4,
        wait_for_replicas=1,
        wait_timeout_ms=20,
        flush_interval_ms=1000,  # the burst below goes out in one write
        retry_max_delay_ms=20,
    )
    for i in range(10):
        c.collect("g", {"seq": i})
    wait_until(lambda: c.stats()["unreplicated_writes"] >= 20, what="writes resent")
    stats = c.stats()
    # Never counted as stored; every event waits, in the buffer or in an unconfirmed write
    # sent again as it is.
    assert stats["stored"] == 0 and stats["buffered"] == 10
    assert stats["backend_errors"] >= 2 and stats["unconfirmed_writes"] >= 1
    # The primary ran the first attempt; it answered the others as repeats.
    assert queue_events(own_server.client(), SCHEMA, "g") == [{"seq": i} for i in range(10)]
    assert stats_total(own_server.client(), SCHEMA, "stored") == 10


def test_with_a_replica_writes_are_confirmed_and_stored(
    primary_with_replica: Server, make_collector: MakeCollector
) -> None:
    c = make_collector(
        url=primary_with_replica.url, shards=4, wait_for_replicas=1, wait_timeout_ms=1000
    )
    for i in range(50):
        c.collect(f"g{i % 5}", {"seq": i})
    assert c.flush(timeout=10)
    stats = c.stats()
    assert (stats["stored"], stats["unreplicated_writes"]) == (50, 0)
    assert waits_sent(primary_with_replica) >= 1


def test_zero_sends_no_wait(own_server: Server, make_collector: MakeCollector) -> None:
    c = make_collector(url=own_server.url, shards=4)
    for i in range(20):
        c.collect("g", {"seq": i})
    assert c.flush(timeout=10)
    assert c.stats()["stored"] == 20
    assert waits_sent(own_server) == 0


def test_the_store_raises_with_the_primarys_result(own_server: Server) -> None:
    config = make_config(own_server.url, redis={"wait_for_replicas": 2, "wait_timeout_ms": 10})
    s = open_store(config.redis)
    try:
        keys = s.schema.for_game("g")
        with pytest.raises(BackendUnreplicated, match="0 replicas confirmed, 2 wanted") as info:
            s.call(Collect(keys, "g", numbered("g", 1), 100, 60))
        assert info.value.result is not None and info.value.result.evicted == 0
    finally:
        s.close()


def test_the_acks_of_a_lease_no_replica_confirmed_carry_each_batchs_result(
    own_server: Server,
) -> None:
    """A lease's acks go in one call; unconfirmed, each batch still gets its own result."""
    config = make_config(own_server.url, redis={"wait_for_replicas": 1, "wait_timeout_ms": 10})
    s = open_store(config.redis)
    try:
        keys = s.schema.for_game("g")
        scripts = Scripts(own_server.client())
        store(scripts, s.schema, "g", numbered("g", 300))
        claimed = scripts.claim(keys, "g", "b1", "tok", 128, 3, 60_000, 0, 0)
        answers = Batches(s, config).ack_many(
            [Ack(keys, batch.batch_id, "tok", stale) for stale, batch in enumerate(claimed.batches)]
        )
        assert all(isinstance(a, BackendUnreplicated) for a in answers)
        assert [a.result for a in answers if isinstance(a, BackendUnreplicated)] == [128, 127, 42]
    finally:
        s.close()


def test_wait_timeout_must_be_shorter_than_the_socket_timeout(own_server: Server) -> None:
    with pytest.raises(ConfigError, match="wait_timeout_ms: must be shorter"):
        make_config(
            own_server.url,
            redis={"wait_for_replicas": 1, "wait_timeout_ms": 2000, "socket_timeout_seconds": 1.0},
        )


def test_the_reporter_does_not_send_a_claim_no_replica_confirmed(
    own_server: Server, endpoint: LocalEndpoint, make_service: MakeService
) -> None:
    config = make_config(
        own_server.url,
        sink_url=endpoint.url,
        redis={"wait_for_replicas": 1, "wait_timeout_ms": 20},
        reporter={"linger_ms": 0, "poll_interval_ms": 20},
    )
    service = make_service(config)
    store(Scripts(own_server.client()), service.schema, "g", numbered("g", 10))
    service.start()
    wait_until(
        lambda: service.tally.snapshot().get("batches_unreplicated", 0) >= 3,
        what="claims handed back",
    )
    counts = service.stop(grace=0).counts
    assert endpoint.events() == []
    assert counts["batches_released"] >= counts["batches_unreplicated"] - 1
    assert counts.get("delivered", 0) == 0


def test_the_reporter_delivers_with_a_replica(
    primary_with_replica: Server, endpoint: LocalEndpoint, make_service: MakeService
) -> None:
    config = make_config(
        primary_with_replica.url,
        sink_url=endpoint.url,
        redis={"wait_for_replicas": 1, "wait_timeout_ms": 1000},
        reporter={"linger_ms": 0, "poll_interval_ms": 20},
    )
    service = make_service(config)
    store(Scripts(primary_with_replica.client()), service.schema, "g", numbered("g", 300))
    service.start()
    wait_until(lambda: len(endpoint.events()) >= 300, what="every event")
    counts = service.stop().counts
    assert sorted(ids_of(endpoint.events())) == sorted(f"g#{i}" for i in range(300))
    assert counts.get("batches_unreplicated", 0) == counts.get("acks_unreplicated", 0) == 0
    assert waits_sent(primary_with_replica) >= 3


def test_sync_mode_raises_an_unconfirmed_write(
    own_server: Server, make_collector: MakeCollector
) -> None:
    """Sent again as it is for sync_resend_seconds (a repeat, stored once), then raised as
    what it is: stored on the primary, unconfirmed (do not send it again)."""
    c = make_collector(
        url=own_server.url,
        shards=4,
        mode="sync",
        wait_for_replicas=1,
        wait_timeout_ms=20,
        sync_resend_seconds=1.0,
        retry_max_delay_ms=50,
    )
    with pytest.raises(
        BackendUnreplicated, match=r"stored, too few replicas.*0 replicas confirmed"
    ):
        c.collect("g", {"seq": 1})
    stats = c.stats()
    assert (stats["stored"], stats["accepted"], stats["backend_errors"]) == (0, 0, 1)
    assert stats["unreplicated_writes"] >= 2  # each resend answered as a repeat, unconfirmed
    assert queue_events(own_server.client(), SCHEMA, "g") == [{"seq": 1}]
