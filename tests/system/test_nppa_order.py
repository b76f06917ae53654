"""Sessions in order: a session's logout never reaches the anti-addiction interface before its
login, nor with an earlier behaviour time (``ot``), whatever fails on the way.  End to end:
the mock of the interface (``reporter._demo.nppa_mock``) scripted to fail, real reporters and
a real Redis server.  A freshness margin of 165 s leaves a window of 15 s, so items collected
20 s ago are late and, with ``late_behaviour = "resend"``, sent with their time moved."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from reporter._config import ReporterConfig
from reporter._delivery.batches import Batches
from reporter._delivery.lease import Result
from reporter._demo.nppa_mock import Accepted, NppaEndpoint
from reporter._monitoring.accounting import read_totals
from tests.support.entries import numbered
from tests.support.entries import store as push
from tests.support.fixtures import StartService
from tests.support.nppa_runs import APP_ID, GAMES, SECRET, nppa_config, sessions
from tests.support.polling import wait_until
from tests.support.scriptcalls import Scripts, store_on
from tests.support.wiring import Sent, delivery_for

SESSIONS = 300  # a game's logins, then its logouts: 600 items, 5 batches
TIMEOUT_SECONDS = 0.5


def order_config(redis_url: str, endpoint: NppaEndpoint, **reporter: object) -> ReporterConfig:
    # Claims of two batches: a game's later events are claimed while earlier ones fail.
    return nppa_config(
        redis_url,
        endpoint,
        reporter={"max_batches_per_claim": 2, **reporter},
        sink={"timeout_seconds": TIMEOUT_SECONDS},
        retry={"initial_delay_ms": 300, "max_delay_ms": 1000},
        late_behaviour="resend",
        freshness_margin_seconds=165.0,
    )


def late_sessions(config: ReporterConfig, ago: int = 20) -> None:
    """Every game's sessions: all logins, then all logouts a second later, ``ago`` s ago."""
    now = int(time.time())
    for game in GAMES:
        sessions(config, game, SESSIONS, now - ago, now - ago + 1)


def out_of_order(accepted: list[Accepted]) -> tuple[list[str], list[str]]:
    """The sessions whose logout arrived before their login, and those whose logout was
    accepted with an earlier ``ot`` than their login's (each session's first acceptance)."""
    arrived: dict[str, dict[int, tuple[int, int]]] = {}
    for k, a in enumerate(accepted):
        arrived.setdefault(a.item["si"], {}).setdefault(a.item["bt"], (k, a.item["ot"]))
    early = sorted(si for si, bt in arrived.items() if bt[0][0] < bt[1][0])
    earlier = sorted(si for si, bt in arrived.items() if bt[0][1] < bt[1][1])
    return early, earlier


def failing(how: str, requests: int = 4) -> Callable[[int], int | None]:
    """The mock's answer to its first ``requests`` requests: a system error (1001), over the
    rate limit (1006), or a timeout (a system error that comes after the sender gave up)."""

    def answer(n: int) -> int | None:
        if n > requests:
            return None
        if how == "timeout":
            threading.Event().wait(TIMEOUT_SECONDS * 2)
            return 1001
        return int(how)

    return answer


def logins_once_refused() -> Callable[[dict[str, Any]], int | None]:
    """An item answer of 1001 (send it again) to each login the first time it comes: the
    request is taken but for those items."""
    seen: set[str] = set()

    def answer(item: dict[str, Any]) -> int | None:
        if item["bt"] != 1 or item["si"] in seen:
            return None
        seen.add(item["si"])
        return 1001

    return answer


@pytest.mark.parametrize(
    ("how", "reporters", "hot"),
    [("1001", 1, 0), ("1001", 3, 3), ("1006", 3, 0), ("timeout", 2, 2), ("item", 1, 0)],
)
def test_late_sessions_stay_in_order_through_failures(
    redis_url: str, start_service: StartService, how: str, reporters: int, hot: int
) -> None:
    """The interface fails the first 4 requests (or, "item", takes every request but its
    logins the first time): what they carried is retried, and each game's later batches
    wait behind it, whether one reporter sends or several (a game's hot pool of ``hot``
    threads in each)."""
    with NppaEndpoint(
        app_id=APP_ID,
        secret_key=SECRET,
        biz_ids=GAMES.values(),
        force=None if how == "item" else failing(how),
        unknown=logins_once_refused() if how == "item" else None,
    ) as endpoint:
        config = order_config(redis_url, endpoint, hot_games={"farm": hot} if hot else {})
        late_sessions(config)
        services = [start_service(config) for _ in range(reporters)]
        total = 2 * len(GAMES) * SESSIONS
        wait_until(lambda: len(distinct(endpoint)) == total, timeout=60, what="every item accepted")
        with endpoint.lock:
            accepted = list(endpoint.accepted)
    early, earlier = out_of_order(accepted)
    assert (early[:3], len(early)) == ([], 0), "logouts that arrived before their login"
    assert (earlier[:3], len(earlier)) == ([], 0), "logouts sent with an earlier ot"
    wait_until(
        lambda: read_totals(services[0].store).counter("delivered") >= total,
        timeout=30,
        what="every batch acknowledged",
    )
    assert read_totals(services[0].store).counter("late_sent") >= total


def distinct(endpoint: NppaEndpoint) -> set[tuple[str, int]]:
    with endpoint.lock:
        return {(a.item["si"], a.item["bt"]) for a in endpoint.accepted}


def test_a_batch_whose_lease_was_lost_before_its_request_is_not_sent(
    redis_url: str, client: redis.Redis
) -> None:
    """A process stalled past its lease: the reaper gave the batch back and another process
    has it now.  Right before the request the lease is renewed, found lost, and the batch
    is not sent (nor the rest of its lease): its game's next request is the other's."""
    with NppaEndpoint(app_id=APP_ID, secret_key=SECRET, biz_ids=GAMES.values()) as endpoint:
        config = order_config(redis_url, endpoint)
    batches = Batches(store_on(client, config), config)
    sent = Sent()
    delivery = delivery_for(batches, sent, config, time.time)
    keys = push(Scripts(client), batches.store.schema, "farm", numbered("farm", 256))
    stop = threading.Event()
    lease = delivery.claimer.claim(keys, "farm", stop)
    assert lease is not None and len(lease.batches) == 2
    client.zadd(keys.inflight, {b.batch_id: 1 for b in lease.batches})  # as if it ran out
    assert batches.reap(keys, 10).retried == 2
    assert delivery.deliverer.deliver(lease, stop) == [Result.LOST]
    assert sent.batches == []
    assert delivery.counts.counted().get("lease_lost") == 1
    assert [b.batch_id for b in batches.take_retries(keys, "another", 10)] == [
        b.batch_id for b in lease.batches
    ]
