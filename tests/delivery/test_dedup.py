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

from reporter._demo.endpoint import LocalEndpoint
from tests.delivery.conftest import MakeEndpoint, StartService
from tests.delivery.helpers import (
    assert_reconciled,
    drained,
    make_config,
    schema_of,
    wait_until,
)
from tests.servers import Server, env_without_telemetry

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
        return Counter((str(e["si"]), int(e["bt"])) for r in endpoint.received
                       if r.status == 200 for e in r.events)


@pytest.mark.parametrize("how", ["fields", "key"])
def test_two_processes_collecting_the_same_logins_and_logouts_deliver_each_once(
        own_server: Server, make_endpoint: MakeEndpoint, start_service: StartService,
        how: str) -> None:
    endpoint = make_endpoint()
    config = make_config(own_server.url, endpoint.url)
    start_service(config)
    producers = [subprocess.Popen(
        [sys.executable, "-c", PRODUCER, own_server.url, GAME, str(SESSIONS), how],
        cwd=ROOT, env=env_without_telemetry(), stdout=subprocess.PIPE) for _ in range(2)]
    stats = []
    for producer in producers:
        out, _ = producer.communicate(timeout=120)
        assert producer.returncode == 0
        stats.append(json.loads(out))
    finished = wait_until(lambda: drained(own_server.client(), schema_of(config)),
                          timeout=60, what="everything delivered")

    got = sessions_received(endpoint)
    assert set(got) == {(f"s{n:05d}", bt) for n in range(SESSIONS) for bt in (1, 0)}
    assert set(got.values()) == {1}  # each exactly once
    assert_reconciled(finished)
    assert finished.counter("merged") == 2 * SESSIONS  # the second copy of each
    assert finished.counter("delivered") == 2 * SESSIONS
    # Each process counts the merges of its own writes; together they are Redis's.
    assert sum(s["merged"] for s in stats) == 2 * SESSIONS
    assert all(s["stored"] == s["accepted"] == 2 * SESSIONS for s in stats)
