"""The anti-addiction sender when the operator's side goes wrong, end to end against the mock
of the interface (reporter._demo.nppa_mock) and a real Redis server: a key the system does
not accept holds every reporter until the key file changes, late items are resent or
dropped as the policy says (after a hold, after a dead letter's replay), and items stamped
far ahead are dead-lettered at once.  Times are shortened through the config: a freshness
margin of 165 s leaves a window of 15 s, so an item goes late in seconds."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from collector.store import Replay
from reporter._commands.status import status_text
from reporter._config import ReporterConfig
from reporter._demo.nppa_mock import NppaEndpoint
from reporter._monitoring.accounting import read_totals
from reporter._pacing.send_hold import read_hold
from reporter._service.service import ReporterService
from reporter._sinks.nppa.trail import read_session, summary
from tests.support.fixtures import StartService
from tests.support.nppa_runs import (
    APP_ID,
    GAMES,
    HOLD,
    NEW,
    OLD,
    SHORT_WINDOW,
    accepted_count,
    answered,
    key_config,
    key_scope,
    pause,
    sessions,
)
from tests.support.polling import wait_until
from tests.support.servers import Server


def counter(service: ReporterService, name: str) -> int:
    return read_totals(service.store).counter(name)


def test_a_key_the_system_refuses_holds_its_reporters_until_a_new_key_proves_itself(
    own_server: Server, tmp_path: Path, start_service: StartService
) -> None:
    key_file = tmp_path / "nppa.key"
    with NppaEndpoint(app_id=APP_ID, secret_key=NEW, biz_ids=GAMES.values()) as endpoint:
        config = key_config(
            own_server,
            endpoint,
            key_file,
            metrics={"listen": "127.0.0.1:0"},
            probe_interval_seconds=600.0,
        )  # only a key change probes
        sessions(config, "farm", 50, int(time.time()), int(time.time()))
        sessions(config, "kart", 50, int(time.time()), int(time.time()))
        first, second = start_service(config), start_service(config)
        wait_until(
            lambda: first.hold and second.hold and first.hold.held and second.hold.held,
            timeout=20,
            what="both reporters held",
        )
        held = read_hold(first.store, HOLD, key_scope(OLD))
        assert held.held and held.cause == "nppa 1011" and "secret_key" in held.check
        assert not read_hold(first.store, HOLD).held  # the key's, not the app's
        text = status_text(first.store, config, as_json=False)
        assert "HELD" in text and "nppa 1011" in text and "secret_key" in text
        assert (
            json.loads(status_text(first.store, config, as_json=True, shards=False))["hold"][
                "cause"
            ]
            == "nppa 1011"
        )
        assert first.endpoint is not None
        metrics = httpx.get(f"{first.endpoint.url}/metrics", timeout=10).text
        [held_seconds] = [
            s
            for f in text_string_to_metric_families(metrics)
            for s in f.samples
            if s.name == "telemetry_sending_held_seconds"
        ]
        assert held_seconds.labels == {"cause": "nppa 1011", "scope": "key"}
        # A request that had passed its last check (its slot, the gate) when the hold was
        # seen is already on the wire: its answer may come a moment later; and the first
        # probe goes out at once (the probe job's next round, within a second).
        pause(2.0)
        before = len(answered(endpoint))
        pause(2.0)  # held: nothing goes out, no probe before the interval
        assert len(answered(endpoint)) == before
        assert {code for _, code in answered(endpoint)} == {1011}
        totals = read_totals(first.store)
        assert (totals.counter("dead_events"), accepted_count(endpoint)) == (0, 0)
        assert totals.counter("batches_released") >= 1
        # both use the bad key: one may leave its shards to the other, not both (nobody
        # would take them, and status would show no reporter running)
        assert first.store.live_reporters() >= 1
        assert first.ownership.owned() or second.ownership.owned()

        key_file.write_text(NEW, encoding="utf-8")  # no signal: the file is watched
        wait_until(
            lambda: accepted_count(endpoint) == 200,
            timeout=30,
            what="every event accepted with the new key",
        )
        wait_until(lambda: counter(first, "delivered") == 200, timeout=30, what="acknowledged")
        # each with the new key now (each proves it first: the interface must still be
        # there for the later one, whose file watch may come a poll after the first's)
        wait_until(lambda: not first.hold.held and not second.hold.held, timeout=5, what="clear")
    codes = [code for _, code in answered(endpoint)]
    # each reporter proved the new key (a request with no items) before it used it, long
    # before the 600 s probe interval
    assert codes.count(3002) == 2
    totals = read_totals(first.store)
    assert (
        totals.counter("delivered"),
        totals.counter("dead_events"),
        totals.counter("stale"),
    ) == (200, 0, 0)
    counts = [service.stop().counts for service in (first, second)]
    assert 1 <= sum(c.get("config_errors", 0) for c in counts) <= codes.count(1011)
    assert [a.name for a in first.store.alerts()] == ["nppa 1011"]


def dropped_and_recorded(
    service: ReporterService, config: ReporterConfig, trail: Path, now: int
) -> None:
    """Under "drop", every item of the 300 sessions went stale: counted apart as logins and
    logouts, each kept in the late list and the audit trail."""
    assert counter(service, "late_sent") == 0
    # stale logins and logouts counted apart, each one's session and time kept
    assert (counter(service, "stale_logins"), counter(service, "stale_logouts")) == (
        300,
        300,
    )
    dropped = {
        (si, bt): ot
        for shard in service.schema.all_shards()
        for r in service.store.backend.client.lrange(shard.late, 0, -1)
        for si, bt, ot in orjson.loads(r)["dropped"]
    }
    assert dropped == {
        (f"farm-{i:05d}", bt): now - (8 if bt else 6) for i in range(300) for bt in (0, 1)
    }
    assert "stale_logouts" in status_text(service.store, config, as_json=False)
    counts = service.stop().counts
    assert (counts["stale_logins"], counts["stale_logouts"]) == (300, 300)
    # the trail: the requests the hold met (1011), then each item dropped as stale
    session = read_session(str(trail), "farm-00007")
    assert [s.what for s in session.steps][-2:] == ["stale", "stale"]
    assert not any(s.accepted for s in session.steps)
    assert summary([s for s in session.steps if s.item["bt"] == 0]).startswith("NOT reported: ")
    assert counts.get("audit_lines_lost", 0) == 0


@pytest.mark.parametrize("late", ["resend", "drop"])
def test_sessions_that_went_late_during_a_hold(
    own_server: Server, tmp_path: Path, start_service: StartService, late: str
) -> None:
    """300 sessions, fresh when collected, go out of the window while the sender is held;
    once the key is right (SIGHUP's re-read), "resend" sends all 600 items with their times
    moved, each logout still at or after its login, "drop" counts them stale."""
    with NppaEndpoint(app_id=APP_ID, secret_key=NEW, biz_ids=GAMES.values()) as endpoint:
        config = key_config(
            own_server,
            endpoint,
            tmp_path / "nppa.key",
            probe_interval_seconds=1.0,
            late_behaviour=late,
            audit_directory=str(tmp_path / "audit"),
            **SHORT_WINDOW,
        )
        now = int(time.time())
        sessions(config, "farm", 300, now - 8, now - 6)
        service = start_service(config)
        wait_until(lambda: service.hold is not None and service.hold.held, timeout=20, what="held")
        began = time.monotonic()
        wait_until(lambda: time.time() > now + 9, timeout=20, what="every item late")
        probes = [t for t, code in answered(endpoint) if code == 1011]
        held_for = time.monotonic() - began
        assert len(probes) <= 2 + held_for / 1.0 + 1  # the first requests, then one a second
        (tmp_path / "nppa.key").write_text(NEW, encoding="utf-8")
        service.reload("SIGHUP")
        if late == "drop":
            wait_until(
                lambda: counter(service, "stale") == 600, timeout=30, what="every item stale"
            )
            assert accepted_count(endpoint) == 0
            dropped_and_recorded(service, config, tmp_path / "audit", now)
            return
        wait_until(lambda: accepted_count(endpoint) == 600, timeout=30, what="all accepted")
        wait_until(lambda: counter(service, "delivered") == 600, timeout=30, what="acknowledged")
        with endpoint.lock:
            accepted = list(endpoint.accepted)
    assert not read_hold(service.store, HOLD).held
    times: dict[str, dict[int, int]] = defaultdict(dict)
    for a in accepted:
        times[a.item["si"]][a.item["bt"]] = a.item["ot"]
        assert a.request_ms - a.item["ot"] * 1000 < 180_000
    assert len(times) == 300 and all(t[0] >= t[1] for t in times.values())
    in_order = [a.item["ot"] for a in accepted]
    assert in_order == sorted(in_order)  # the game's items keep their order
    totals = read_totals(service.store)
    assert (totals.counter("late_sent"), totals.counter("delivered"), totals.counter("stale")) == (
        600,
        600,
        0,
    )
    assert "late_sent" in status_text(service.store, config, as_json=False)
    records = [
        orjson.loads(r)
        for shard in service.schema.all_shards()
        for r in service.store.backend.client.lrange(shard.late, 0, -1)
    ]
    original = {(si, bt): ot for r in records for si, bt, ot, _ in r["items"]}
    assert original == {
        (f"farm-{i:05d}", bt): now - (8 if bt else 6) for i in range(300) for bt in (0, 1)
    }
    assert service.stop().counts["late_sent"] == 600
    # the trail: each item accepted once, with the time sent and the one it had
    session = read_session(str(tmp_path / "audit"), "farm-00007")
    [login, logout] = [s for s in session.steps if s.accepted]
    assert (login.item["bt"], login.item["ot_original"]) == (1, now - 8)
    assert (logout.item["bt"], logout.item["ot_original"]) == (0, now - 6)
    assert login.item["ot"] > now - 8 and logout.item["ot"] >= login.item["ot"]


def test_events_stamped_an_hour_ahead_are_dead_lettered_while_the_rest_go(
    own_server: Server, tmp_path: Path, start_service: StartService
) -> None:
    with NppaEndpoint(app_id=APP_ID, secret_key=OLD, biz_ids=GAMES.values()) as endpoint:
        config = key_config(own_server, endpoint, tmp_path / "nppa.key")
        now = int(time.time())
        sessions(config, "farm", 10, now + 3600, now + 3600)
        sessions(config, "farm", 10, now, now)
        service = start_service(config)
        wait_until(lambda: accepted_count(endpoint) == 20, timeout=30, what="the fresh ones")
        wait_until(
            lambda: counter(service, "dead_events") == 20,
            timeout=30,
            what="the hour-ahead ones dead-lettered",
        )
    dead = service.store.dead_batches(100)
    keys = service.store.find_batch(dead[0].batch_id)
    assert keys is not None
    detail = service.store.batch(keys, dead[0].batch_id)
    assert detail is not None
    assert all("game server's clock" in r for r in detail.item_reasons)


@pytest.mark.parametrize("late", ["resend", "drop"])
def test_dead_replay_follows_the_late_policy(
    own_server: Server, tmp_path: Path, start_service: StartService, late: str
) -> None:
    """Items the system refused (3010, say a pi it did not know yet) are replayed after they
    missed the window: "resend" sends them with their times moved, "drop" counts them stale."""
    unknown = "9" * 38

    def not_yet(item: dict[str, Any]) -> int | None:
        return 3010 if item.get("pi") == unknown else None

    with NppaEndpoint(
        app_id=APP_ID, secret_key=OLD, biz_ids=GAMES.values(), unknown=not_yet
    ) as endpoint:
        config = key_config(
            own_server, endpoint, tmp_path / "nppa.key", late_behaviour=late, **SHORT_WINDOW
        )
        now = int(time.time())
        sessions(config, "kart", 5, now - 10, now - 9, pi=unknown)
        service = start_service(config)
        wait_until(
            lambda: counter(service, "dead_events") == 10,
            timeout=30,
            what="refused and dead-lettered",
        )
        endpoint.unknown = None  # the system knows the players now
        wait_until(lambda: time.time() > now + 7, timeout=20, what="the items late")
        replayed = sum(
            service.store.call(Replay(shard)).events for shard in service.schema.all_shards()
        )
        assert replayed == 10
        if late == "resend":
            wait_until(lambda: accepted_count(endpoint) == 10, timeout=30, what="accepted")
            wait_until(lambda: counter(service, "delivered") == 10, timeout=30, what="acknowledged")
            assert counter(service, "late_sent") == 10
        else:
            wait_until(lambda: counter(service, "stale") == 10, timeout=30, what="stale")
            assert accepted_count(endpoint) == 0
