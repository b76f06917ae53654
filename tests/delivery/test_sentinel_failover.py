"""A Sentinel failover under load: the primary is killed (SIGKILL) while the SDK collects
and a reporter delivers; neither is restarted.

The SDK holds what it could not write and writes it to the promoted replica; the reporter's
sweeps fail until the sentinels name the new primary, then go on, loading the scripts the
promoted replica never had (NOSCRIPT).  Duplicates are allowed.  Without
``wait_for_replicas`` Redis's asynchronous replication can lose what the old primary took in
its last moments: only events collected before the kill may be missing, and the test prints
how many were.  ``WAIT_FOR_REPLICAS`` lists the settings run: with 1 or more, nothing may be
missing.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from collector import Collector
from collector.store import lua_script
from reporter._service import ReporterService
from tests.delivery.conftest import MakeEndpoint, StartService
from tests.delivery.helpers import (
    assert_reconciled,
    drained,
    event,
    received_keys,
    schema_of,
    wait_until,
)
from tests.delivery.test_sentinel import sentinel_config
from tests.servers import SentinelGroup

# [redis] wait_for_replicas values to run with (0: off, the default).
WAIT_FOR_REPLICAS = [0]
GAMES = [f"fo-game-{i}" for i in range(8)]
RATE = 2000  # events per second, over all games
# Collecting goes on this long once the sentinels name the new primary.
AFTER_FAILOVER_SECONDS = 2.0


class Producer:
    """Collects RATE events a second in a thread, remembering when each was collected."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.collected: dict[tuple[str, int], float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        started = time.monotonic()
        seq = 0
        while not self.stop.is_set():
            due = int((time.monotonic() - started) * RATE / len(GAMES))
            while seq < due:
                for game in GAMES:
                    self.collector.collect(game, event(game, seq))
                    self.collected[(game, seq)] = time.monotonic()
                seq += 1
            self.stop.wait(0.005)

    def since(self, moment: float) -> int:
        return sum(1 for t in list(self.collected.values()) if t >= moment)


@pytest.mark.parametrize("wait_for_replicas", WAIT_FOR_REPLICAS)
def test_a_primary_killed_under_load(sentinel_group: SentinelGroup,
                                     make_endpoint: MakeEndpoint, start_service: StartService,
                                     wait_for_replicas: int) -> None:
    endpoint = make_endpoint()
    extra = {"wait_for_replicas": wait_for_replicas} if wait_for_replicas else {}
    config = sentinel_config(sentinel_group, endpoint.url, redis=extra)
    service: ReporterService = start_service(config)
    collector = Collector(config=config)
    producer = Producer(collector)
    producer.thread.start()
    try:
        wait_until(lambda: len(received_keys(endpoint)) >= RATE, what="delivery under way")
        [replica] = sentinel_group.replicas
        collect_sha = lua_script("collect").sha
        assert replica.client().script_exists(collect_sha) == [False]  # NOSCRIPT ahead

        killed_at = time.monotonic()
        sentinel_group.primary.stop()  # SIGKILL, and reaped: it takes no write after this
        dead_at = time.monotonic()
        wait_until(lambda: sentinel_group.current_primary() is replica, timeout=60,
                   what="the sentinels promoting the replica")
        promoted_at = time.monotonic()
        wait_until(lambda: producer.since(promoted_at) >= AFTER_FAILOVER_SECONDS * RATE,
                   what="collecting after the failover")
    finally:
        producer.stop.set()
        producer.thread.join(10)
    collector.close(timeout=30)
    stats = collector.stats()
    assert stats["accepted"] == len(producer.collected), stats
    assert stats["stored"] == stats["accepted"] and stats["buffered"] == 0, stats

    new_primary = replica.client()
    schema = schema_of(config)
    totals = wait_until(lambda: drained(new_primary, schema), timeout=60,
                        what="every batch finished on the new primary")
    assert not service.stop_event.is_set()  # the same reporter, never restarted
    assert_reconciled(totals)
    assert new_primary.script_exists(collect_sha) == [True]

    received = received_keys(endpoint)
    missing = {key: t for key, t in producer.collected.items() if key not in received}
    duplicates = sum(n - 1 for n in received.values())
    print(f"\nsentinel failover (wait_for_replicas={wait_for_replicas}): "
          f"{len(producer.collected)} collected, {len(received)} delivered, {duplicates} "
          f"duplicates, {len(missing)} missing; failover took {promoted_at - killed_at:.1f} s"
          + (f"; missing collected {dead_at - max(missing.values()):.3f} to "
             f"{dead_at - min(missing.values()):.3f} s before the kill" if missing else ""))
    assert set(received) <= set(producer.collected)
    if wait_for_replicas:
        assert not missing
    else:  # only what the old primary took before it died, and had not passed on
        assert all(t < dead_at for t in missing.values()), Counter(
            "after the kill" if t >= dead_at else "before" for t in missing.values())
