"""Duplicates merged in a window, end to end: two game-server processes collect the same
logins and logouts, a reporter delivers them to an endpoint, and each arrives once.

The key comes from the events' own fields (``[buffer] dedup_fields = ["si", "bt"]``: one
login and one logout per session), or from ``collect(..., dedup_key=...)``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from collector.store import open_store
from reporter._commands.status import status_text
from reporter._demo.endpoint import LocalEndpoint
from reporter._demo.nppa_mock import NppaEndpoint
from tests.support.entries import make_config as nppa_make_config
from tests.support.fixtures import MakeEndpoint, StartService
from tests.support.polling import wait_until
from tests.support.scenarios import assert_reconciled, drained, make_config, schema_of
from tests.support.servers import Server, env_without_telemetry

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = 5000
GAME = "nppa-game"

# Collects a login and a logout of every session, the key from the fields or given.
PRODUCER = """
import json, sys
from collector import Collector
url, game, sessions, how = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
fields = ["si", "bt"] if how == "fields" else []
with Collector(url=url, shards=4, key_prefix="dlv", dedup_fields=fields,
               max_events_per_game=100_000) as c:
    for n in range(sessions):
        for bt in (1, 0):
            event = {"si": f"s{n:05d}", "bt": bt, "ot": 1_700_000_000 + n}
            if how == "fields":
                c.collect(game, event)
            else:
                c.collect(game, event, dedup_key=f"{event['si']}/{bt}")
    assert c.flush(30), c.stats()
    print(json.dumps(c.stats()))
"""


def sessions_received(endpoint: LocalEndpoint) -> Counter[tuple[str, int]]:
    with endpoint.lock:
        return Counter(
            (str(e["si"]), int(e["bt"]))
            for r in endpoint.received
            if r.status == 200
            for e in r.events
        )


@pytest.mark.parametrize("how", ["fields", "key"])
def test_two_processes_collecting_the_same_logins_and_logouts_deliver_each_once(
    own_server: Server, make_endpoint: MakeEndpoint, start_service: StartService, how: str
) -> None:
    endpoint = make_endpoint()
    config = make_config(own_server.url, endpoint.url)
    start_service(config)
    producers = [
        subprocess.Popen(
            [sys.executable, "-c", PRODUCER, own_server.url, GAME, str(SESSIONS), how],
            cwd=ROOT,
            env=env_without_telemetry(),
            stdout=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    stats = []
    for producer in producers:
        out, _ = producer.communicate(timeout=120)
        assert producer.returncode == 0
        stats.append(json.loads(out))
    finished = wait_until(
        lambda: drained(own_server.client(), schema_of(config)),
        timeout=60,
        what="everything delivered",
    )

    got = sessions_received(endpoint)
    assert set(got) == {(f"s{n:05d}", bt) for n in range(SESSIONS) for bt in (1, 0)}
    assert set(got.values()) == {1}  # each exactly once
    assert_reconciled(finished)
    assert finished.counter("merged") == 2 * SESSIONS  # the second copy of each
    assert finished.counter("delivered") == 2 * SESSIONS
    # Each process counts the merges of its own writes; together they are Redis's.
    assert sum(s["merged"] for s in stats) == 2 * SESSIONS
    assert all(s["stored"] == s["accepted"] == 2 * SESSIONS for s in stats)


# The anti-addiction profile: ``dedup_fields = ["si", "bt"]`` (as config/nppa.toml sets it)
# and the interface's mock, which records every item it accepts.
NPPA_SESSIONS = 2500  # a login and a logout each: 5,000 events per process
NPPA_PRODUCER = """
import json, sys, time
from collector import Collector, nppa
url, sessions = sys.argv[1], int(sys.argv[2])
with Collector(url=url, shards=4, dedup_fields=["si", "bt"],
               max_events_per_game=100_000) as c:
    ot = int(time.time())
    for n in range(sessions):
        for make in (nppa.login, nppa.logout):
            c.collect("farm", make(si=f"s{n:05d}", ot=ot, pi="1" * 38))
    assert c.flush(30), c.stats()
    print(json.dumps(c.stats()))
"""


def test_two_processes_reporting_the_same_sessions_reach_the_interface_once(
    own_server: Server, start_service: StartService
) -> None:
    secret, app_id, biz_id = "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "app-dedup", "1101999999"
    with NppaEndpoint(app_id=app_id, secret_key=secret, biz_ids=[biz_id]) as interface:
        config = nppa_make_config(
            own_server.url,
            sink={"kind": "nppa"},
            nppa={
                "base_url": interface.url,
                "app_id": app_id,
                "secret_key": secret,
                "throttle_seconds": 1.0,
            },
            games={"farm": {"biz_id": biz_id}},
            reporter={"linger_ms": 100, "poll_interval_ms": 20},
        )
        start_service(config)
        producers = [
            subprocess.Popen(
                [sys.executable, "-c", NPPA_PRODUCER, own_server.url, str(NPPA_SESSIONS)],
                cwd=ROOT,
                env=env_without_telemetry(),
                stdout=subprocess.PIPE,
            )
            for _ in range(2)
        ]
        for producer in producers:
            producer.communicate(timeout=120)
            assert producer.returncode == 0
        wait_until(
            lambda: drained(own_server.client(), schema_of(config)),
            timeout=60,
            what="everything delivered",
        )
        with interface.lock:
            got = Counter((a.item["si"], a.item["bt"]) for a in interface.accepted)

    assert set(got) == {(f"s{n:05d}", bt) for n in range(NPPA_SESSIONS) for bt in (1, 0)}
    assert set(got.values()) == {1}  # each exactly once
    store = open_store(config.redis)
    try:
        status = json.loads(status_text(store, config, as_json=True))
    finally:
        store.close()
    assert status["merged"] == 2 * NPPA_SESSIONS
    assert status["delivered"] == 2 * NPPA_SESSIONS
    assert status["unaccounted"] == 0
