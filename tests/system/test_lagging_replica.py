"""A replica cut off while the primary takes writes, then promoted: the SDK's writes land on a
copy that remembers its writer from seconds ago, thousands of sequence numbers back.

The replica replicates through a relay that the test cuts (a network partition: both ways go
silent, nothing is closed); the primary goes on taking writes, then is killed; the replica is
promoted (REPLICAOF NO ONE) and the SDK's relay sends its new connections there.  Every event
is stored at most once on the promoted replica; with ``wait_for_replicas = 1`` exactly once
(the writes the cut left unconfirmed were kept and are applied there, once).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import pytest

from collector.store import KeySchema
from tests.support.fixtures import BINARIES, MakeCollector
from tests.support.polling import wait_until
from tests.support.relay import Relay, relay_to
from tests.support.servers import Server
from tests.support.stored import queue_events

PREFIX = "lag"
SCHEMA = KeySchema(PREFIX, 1)  # one shard: every game's writes number in one sequence
GAMES = [f"game-{i}" for i in range(12)]


@pytest.fixture
def primary() -> Iterator[Server]:
    server = Server(BINARIES.get("redis") or BINARIES["valkey"]).start()
    yield server
    server.cleanup()


@pytest.fixture
def link(primary: Server) -> Iterator[Relay]:
    """The replica's link to the primary."""
    with relay_to(("127.0.0.1", primary.port)) as relay:
        yield relay


def replica_of(port: int) -> Server:
    server = Server(
        BINARIES.get("redis") or BINARIES["valkey"],
        extra=["--replicaof", "127.0.0.1", str(port), "--repl-diskless-sync-delay", "0"],
    ).start()
    wait_until(
        lambda: server.client().info("replication")["master_link_status"] == "up",
        what="the replica to sync",
    )
    return server


@pytest.fixture
def replica(link: Relay) -> Iterator[Server]:
    server = replica_of(link.port)
    yield server
    server.cleanup()


@pytest.mark.parametrize("wait_for_replicas", [0, 1])
def test_a_lagging_replica_promoted_stores_no_event_twice(
    primary: Server,
    link: Relay,
    replica: Server,
    make_collector: MakeCollector,
    wait_for_replicas: int,
) -> None:
    with relay_to(("127.0.0.1", primary.port)) as front:
        c = make_collector(
            url=front.url,
            key_prefix=PREFIX,
            shards=1,
            flush_interval_ms=5,
            retry_max_delay_ms=50,
            socket_timeout_seconds=0.5,
            connect_timeout_seconds=0.5,
            max_events_per_game=1_000_000,
            wait_for_replicas=wait_for_replicas,
            wait_timeout_ms=100,
        )
        stop = threading.Event()
        sent = [0]
        spare: list[Server] = []

        def produce() -> None:  # about 2,000 events/s until stopped
            while not stop.is_set():
                for _ in range(10):
                    c.collect(GAMES[sent[0] % len(GAMES)], {"id": sent[0]})
                    sent[0] += 1
                stop.wait(0.005)

        producer = threading.Thread(target=produce)
        producer.start()
        try:
            wait_until(lambda: c.stats()["stored"] >= 1000, what="writes before the cut")
            link.cut()  # the replica hears nothing more; the primary goes on
            if wait_for_replicas:  # the writes go unconfirmed: kept, sent again
                at_cut = c.stats()["backend_errors"]
                wait_until(
                    lambda: c.stats()["backend_errors"] >= at_cut + 20, what="unconfirmed rounds"
                )
            else:  # 800 rounds of 12 games: the writer 9,600 numbers past the replica's record
                at_cut = c.stats()["flushes"]
                wait_until(lambda: c.stats()["flushes"] >= at_cut + 800, timeout=60, what="rounds")
            primary.stop()
            replica.client().execute_command("REPLICAOF", "NO", "ONE")
            if wait_for_replicas:  # the promoted one gets a replica, so WAIT can succeed
                spare.append(replica_of(replica.port))
            front.retarget(("127.0.0.1", replica.port))
            at_promotion = sent[0]
            wait_until(lambda: sent[0] >= at_promotion + 2000, what="writes after promotion")
        finally:
            stop.set()
            producer.join()
        try:
            assert c.flush(timeout=30), c.stats()
        finally:
            for server in spare:
                server.cleanup()
    stats = c.stats()
    ids = Counter(e["id"] for game in GAMES for e in queue_events(replica.client(), SCHEMA, game))
    twice = {i: n for i, n in ids.items() if n > 1}
    assert twice == {}, f"{len(twice)} events stored more than once, {stats}"
    assert set(range(at_promotion, sent[0])) <= set(ids)  # after the promotion, every one
    if wait_for_replicas:  # nothing was confirmed the replica did not have: none lost
        assert set(ids) == set(range(sent[0])), stats
