"""Sentinel test support: a config for a ``SentinelGroup``, and a failover under load shared
by ``test_sentinel_failover.py`` and ``bench/sentinel_failover.py``.

In the failover, the SDK collects at a steady rate in a thread while a reporter delivers;
once delivery is under way the primary is killed (SIGKILL); collecting goes on until the
sentinels have promoted the replica and a while after; then the SDK is closed and the run
waits for the reporter to finish every batch on the new primary.  Neither the SDK nor the
reporter is restarted.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from collector import Collector
from collector.store import lua_script
from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint
from reporter._monitoring.accounting import Totals
from tests.support.polling import wait_until
from tests.support.scenarios import drained, event, make_config, received_keys, schema_of
from tests.support.servers import SentinelGroup

Key = tuple[str, int]


def sentinel_config(
    group: SentinelGroup, sink_url: str = "http://127.0.0.1:9/ingest", **sections: dict[str, object]
) -> ReporterConfig:
    """The scenarios' fast settings (``FAST``), with Redis found through ``group``'s sentinels."""
    redis_section = {
        "sentinels": group.addresses,
        "sentinel_service": group.service,
        "sentinel_password": group.password,
        **sections.pop("redis", {}),
    }
    # The URL's host and port are not used: the sentinels name the primary.
    return make_config("redis://127.0.0.1:1/0", sink_url, redis=redis_section, **sections)


class Producer:
    """Collects ``rate`` events a second over ``games`` in a thread, remembering when each
    was collected."""

    def __init__(self, collector: Collector, games: list[str], rate: int) -> None:
        self.collector = collector
        self.games = games
        self.rate = rate
        self.collected: dict[Key, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        started = time.monotonic()
        seq = 0
        while not self.stop.is_set():
            due = int((time.monotonic() - started) * self.rate / len(self.games))
            while seq < due:
                for game in self.games:
                    self.collector.collect(game, event(game, seq))
                    self.collected[(game, seq)] = time.monotonic()
                seq += 1
            self.stop.wait(0.005)

    def since(self, moment: float) -> int:
        return sum(1 for t in list(self.collected.values()) if t >= moment)


@dataclass
class FailoverRun:
    collected: dict[Key, float]
    received: Counter[Key]
    sdk_stats: dict[str, int]
    totals: Totals
    killed_at: float  # the primary killed, or the sentinels asked to fail over
    dead_at: float  # the old primary reaped or demoted: it took no write after this
    promoted_at: float
    scripts_before: bool  # the replica had the collect script cached before the failover
    scripts_after: bool  # ... and after
    wait_for_replicas: int = 0
    how: str = "kill"
    missing: dict[Key, float] = field(init=False)

    def __post_init__(self) -> None:
        self.missing = {k: t for k, t in self.collected.items() if k not in self.received}

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.received.values())

    def summary(self) -> str:
        line = (
            f"sentinel failover ({self.how}, wait_for_replicas={self.wait_for_replicas}): "
            f"{len(self.collected)} collected, {len(self.received)} delivered, "
            f"{self.duplicates} duplicates, {len(self.missing)} missing; the sentinels "
            f"promoted the replica {self.promoted_at - self.killed_at:.1f} s after "
            + ("the kill" if self.how == "kill" else "SENTINEL FAILOVER")
        )
        if self.missing:
            times = self.missing.values()
            line += (
                f"; the missing were collected {self.dead_at - max(times):.3f} to "
                f"{self.dead_at - min(times):.3f} s before the old primary was "
                + ("reaped" if self.how == "kill" else "seen demoted")
            )
        return line


def run_failover(
    group: SentinelGroup,
    config: ReporterConfig,
    endpoint: LocalEndpoint,
    *,
    games: list[str],
    rate: int,
    kill_after_delivered: int,
    after_failover_seconds: float,
    how: str = "kill",
) -> FailoverRun:
    """Collect, fail over once ``kill_after_delivered`` events are delivered, go on
    collecting ``after_failover_seconds`` after the promotion; the run's record.  The caller
    runs the reporter on ``config`` and ``endpoint``.

    ``how``: "kill" (SIGKILL the primary), or "demote" (``SENTINEL FAILOVER``: the sentinels
    promote the replica and turn the old primary, still running, into its replica, which
    then answers writes with READONLY)."""
    collector = Collector(config=config)
    producer = Producer(collector, games, rate)
    [replica] = group.replicas
    collect_sha = lua_script("collect").sha
    producer.thread.start()
    try:
        wait_until(
            lambda: len(received_keys(endpoint)) >= kill_after_delivered,
            timeout=120,
            what="delivery under way",
        )
        [scripts_before] = replica.client().script_exists(collect_sha)
        killed_at = dead_at = time.monotonic()
        if how == "kill":
            group.primary.stop()  # SIGKILL, then waits for the process to end
            dead_at = time.monotonic()
        else:
            with group.sentinels[0].client() as sentinel:
                sentinel.execute_command("SENTINEL", "FAILOVER", group.service)
        wait_until(
            lambda: group.current_primary() is replica,
            timeout=60,
            what="the sentinels promoting the replica",
        )
        promoted_at = time.monotonic()
        if how != "kill":
            old = group.primary.client()
            wait_until(
                lambda: old.info("replication")["role"] == "slave",
                timeout=60,
                what="the old primary demoted",
            )
            dead_at = time.monotonic()
        wait_until(
            lambda: producer.since(promoted_at) >= after_failover_seconds * rate,
            timeout=after_failover_seconds * 10 + 30,
            what="collecting after the failover",
        )
    finally:
        producer.stop.set()
        producer.thread.join(10)
    collector.close(timeout=30)
    new_primary = replica.client()
    totals = wait_until(
        lambda: drained(new_primary, schema_of(config)),
        timeout=120,
        what="every batch finished on the new primary",
    )
    [scripts_after] = new_primary.script_exists(collect_sha)
    return FailoverRun(
        dict(producer.collected),
        received_keys(endpoint),
        collector.stats(),
        totals,
        killed_at,
        dead_at,
        promoted_at,
        scripts_before,
        scripts_after,
        getattr(config.redis, "wait_for_replicas", 0),
        how,
    )
