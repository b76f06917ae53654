"""A Sentinel failover under load (``tests/support/sentinel.py``): the primary is killed
(SIGKILL), or demoted by ``SENTINEL FAILOVER``, while the SDK collects and a reporter
delivers; neither is restarted.

The SDK holds what it could not write and writes it to the promoted replica; the reporter's
sweeps fail until the sentinels name the new primary, then go on, loading the scripts the
promoted replica never had (NOSCRIPT).  Duplicates are allowed.  Without
``wait_for_replicas`` Redis's asynchronous replication can lose what the old primary took in
its last moments: only events collected before the kill may be missing, and the test prints
how many were (``bench/sentinel_failover.py`` repeats bigger runs).  ``RUNS``
lists the settings run: with 1 or more, nothing may be missing.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.support.fixtures import MakeEndpoint, StartService
from tests.support.scenarios import assert_reconciled
from tests.support.sentinel import run_failover, sentinel_config
from tests.support.servers import SentinelGroup

# (how, [redis] wait_for_replicas) runs (0: off, the default).  With 1, a killed primary's
# replica is promoted with no replica of its own and confirms nothing until the killed node
# comes back as its replica, which this harness does not do; a demoted primary becomes the
# new primary's replica at once.
RUNS = [("kill", 0), ("demote", 0), ("demote", 1)]
GAMES = [f"fo-game-{i}" for i in range(8)]
RATE = 2000  # events per second, over all games


@pytest.mark.parametrize(("how", "wait_for_replicas"), RUNS)
def test_a_failover_under_load(
    sentinel_group: SentinelGroup,
    make_endpoint: MakeEndpoint,
    start_service: StartService,
    how: str,
    wait_for_replicas: int,
) -> None:
    """``kill``: the primary SIGKILLed.  ``demote``: ``SENTINEL FAILOVER``, the old primary
    still running, turned into a replica (READONLY to the connections left on it)."""
    endpoint = make_endpoint()
    extra = {"wait_for_replicas": wait_for_replicas} if wait_for_replicas else {}
    config = sentinel_config(sentinel_group, endpoint.url, redis=extra)
    service = start_service(config)
    run = run_failover(
        sentinel_group,
        config,
        endpoint,
        games=GAMES,
        rate=RATE,
        kill_after_delivered=RATE,
        after_failover_seconds=2.0,
        how=how,
    )
    print("\n" + run.summary())

    assert (run.scripts_before, run.scripts_after) == (False, True)  # NOSCRIPT was met
    stats = run.sdk_stats
    assert stats["accepted"] == len(run.collected), stats
    assert stats["stored"] == stats["accepted"] and stats["buffered"] == 0, stats
    assert not service.stop_event.is_set()  # the same reporter, never restarted
    assert_reconciled(run.totals)
    assert set(run.received) <= set(run.collected)
    if wait_for_replicas:
        assert not run.missing
    else:  # only what the old primary took before it died or was demoted, not passed on
        assert all(t < run.dead_at for t in run.missing.values()), Counter(
            "after the kill" if t >= run.dead_at else "before" for t in run.missing.values()
        )
