"""Sessions in order: a session's logout never reaches the anti-addiction interface before its
login, nor with an earlier behaviour time (``ot``), whatever fails on the way.  End to end:
the mock of the interface (``reporter._demo.nppa_mock``) scripted to fail, real reporters and
a real Redis server.  A freshness margin of 165 s leaves a window of 15 s, so items collected
20 s ago are late and, with ``late_behaviour = "resend"``, sent with their time moved."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from collector import Collector, nppa
from reporter._config import ReporterConfig
from reporter._demo.nppa_mock import Accepted, NppaEndpoint
from reporter._monitoring.accounting import read_totals
from tests.delivery.test_nppa_reporting import APP_ID, GAMES, PI
from tests.polling import wait_until
from tests.reporter.helpers import make_config
from tests.support.fixtures import StartService

SECRET = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
SESSIONS = 300  # a game's logins, then its logouts: 600 items, 5 batches
TIMEOUT_SECONDS = 0.5


def order_config(redis_url: str, endpoint: NppaEndpoint, **reporter: object) -> ReporterConfig:
    return make_config(
        redis_url,
        shards=4,
        sink={"kind": "nppa", "timeout_seconds": TIMEOUT_SECONDS},
        nppa={
            "base_url": endpoint.url,
            "app_id": APP_ID,
            "secret_key": SECRET,
            "throttle_seconds": 1.0,
            "late_behaviour": "resend",
            "freshness_margin_seconds": 165.0,
        },
        games={game: {"biz_id": biz} for game, biz in GAMES.items()},
        reporter={"linger_ms": 100, "poll_interval_ms": 20, "lease_seconds": 10.0, **reporter},
        retry={"initial_delay_ms": 300, "max_delay_ms": 1000},
    )


def late_sessions(config: ReporterConfig, ago: int = 20) -> None:
    """Every game's sessions: all logins, then all logouts a second later, ``ago`` s ago."""
    now = int(time.time())
    c = Collector(config=config)
    try:
        for game in GAMES:
            for i in range(SESSIONS):
                c.collect(game, nppa.login(si=f"{game}-{i:05d}", ot=now - ago, pi=PI))
            for i in range(SESSIONS):
                c.collect(game, nppa.logout(si=f"{game}-{i:05d}", ot=now - ago + 1, pi=PI))
        assert c.flush(timeout=20)
    finally:
        c.close(timeout=1)


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


@pytest.mark.parametrize(
    ("how", "reporters", "hot"),
    [("1001", 1, 0), ("1001", 3, 3), ("1006", 3, 0), ("timeout", 2, 2)],
)
def test_late_sessions_stay_in_order_through_failures(
    redis_url: str, start_service: StartService, how: str, reporters: int, hot: int
) -> None:
    """The interface fails the first 4 requests: the batches they carried are retried, and
    each game's later batches wait behind them, whether one reporter sends or several (a
    game's hot pool of ``hot`` threads in each)."""
    with NppaEndpoint(
        app_id=APP_ID, secret_key=SECRET, biz_ids=GAMES.values(), force=failing(how)
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
