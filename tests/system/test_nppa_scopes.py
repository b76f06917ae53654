"""Failures that stay where they start, end to end against the mock of the interface
(reporter._demo.nppa_mock) scripted to answer as the real one does in bad moments, and a
real Redis: a bizId the system does not know holds that game only; a reporter with a wrong
key holds itself only (its shards go to the one that can send); a batch that draws a
refusal of its own is dead-lettered, not taken for the configuration."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from collector.store import Store
from reporter._commands.status import status_text
from reporter._config import ReporterConfig
from reporter._demo.nppa_mock import NppaEndpoint
from reporter._monitoring.accounting import Totals, read_totals
from reporter._pacing.send_hold import read_hold
from reporter._sinks.nppa.routes import fingerprint
from tests.support.fixtures import StartService
from tests.support.nppa_runs import (
    GAMES,
    HOLD,
    NEW,
    OLD,
    accepted_count,
    answered,
    key_config,
    key_scope,
    sessions,
)
from tests.support.polling import wait_until
from tests.support.servers import Server

FARM, KART = GAMES["farm"], GAMES["kart"]


def settled_totals(store: Store, delivered: int) -> Totals:
    """The totals once ``delivered`` events are counted delivered: the endpoint has answered
    a batch a moment before the reporter acknowledges it and counts it."""
    wait_until(
        lambda: read_totals(store).counter("delivered") >= delivered,
        timeout=10,
        what=f"{delivered} events counted delivered",
    )
    return read_totals(store)


def test_a_biz_id_the_system_does_not_know_holds_that_game_only(
    own_server: Server, tmp_path: Path, start_service: StartService
) -> None:
    """kart's bizId is unknown (1010): farm keeps its full rate and all of it goes; kart is
    held alone, probed with its own bizId, and goes once the system knows it, without a
    restart; nothing is dead-lettered."""
    with NppaEndpoint(app_id="app-test-1", secret_key=OLD, biz_ids=[FARM]) as endpoint:
        config = key_config(own_server, endpoint, tmp_path / "nppa.key", probe_interval_seconds=1)
        now = int(time.time())
        sessions(config, "farm", 160, now, now)
        sessions(config, "kart", 160, now, now)
        service = start_service(config)
        wait_until(lambda: delivered_of(endpoint, FARM) == 320, timeout=30, what="farm's 320")
        kart = read_hold(service.store, HOLD, "game:kart")
        assert kart.held and kart.cause == "nppa 1010" and kart.game == "kart"
        assert not read_hold(service.store, HOLD).held  # not the app
        assert delivered_of(endpoint, KART) == 0
        threading.Event().wait(2.0)
        probes = [r for r in endpoint.requests if r.biz_id == KART and r.items == 0]
        assert probes  # kart's probes go with kart's bizId

        endpoint.know(KART)  # the system learns the game's filing
        wait_until(lambda: delivered_of(endpoint, KART) == 320, timeout=30, what="kart's 320")
        wait_until(
            lambda: read_totals(service.store).counter("delivered") == 640,
            timeout=30,
            what="acknowledged",
        )
    totals = read_totals(service.store)
    assert (totals.counter("dead_events"), totals.counter("stale")) == (0, 0)
    assert not read_hold(service.store, HOLD, "game:kart").held
    # farm never waited for kart: no request of farm was refused
    assert {r.errcode for r in endpoint.requests if r.biz_id == FARM} == {0}


def test_one_reporter_with_a_wrong_key_leaves_its_shards_to_the_one_that_can_send(
    own_server: Server, tmp_path: Path, start_service: StartService
) -> None:
    """Two reporters, one with the wrong key: the good one's requests never lift nor set
    the bad one's hold (no flapping), the bad one steps back from its shards, and all 960
    events go within 90 s."""
    with NppaEndpoint(app_id="app-test-1", secret_key=NEW, biz_ids=GAMES.values()) as endpoint:
        good = key_config(
            own_server, endpoint, tmp_path / "good.key", NEW, probe_interval_seconds=2
        )
        bad = key_config(own_server, endpoint, tmp_path / "bad.key", OLD, probe_interval_seconds=2)
        now = int(time.time())
        sessions(good, "farm", 240, now, now)
        sessions(good, "kart", 240, now, now)
        began = time.monotonic()
        first, second = start_service(bad), start_service(good)
        wait_until(lambda: accepted_count(endpoint) == 960, timeout=90, what="all 960 accepted")
        took = time.monotonic() - began
        held = read_hold(first.store, HOLD, key_scope(OLD))
        assert held.held and held.cause == "nppa 1011"  # the bad key's reporters only
        assert not read_hold(first.store, HOLD).held
        assert not read_hold(first.store, HOLD, key_scope(NEW)).held
        wait_until(lambda: not first.ownership.owned(), timeout=10, what="the bad one's shards")
        assert len(second.ownership.owned()) == 4
    assert took < 90
    codes = [code for _, code in answered(endpoint)]
    assert codes.count(3002) == 0  # nothing was lifted: no hold/lift cycle at all
    totals = settled_totals(first.store, 960)
    assert (totals.counter("delivered"), totals.counter("dead_events")) == (960, 0)


def test_a_batch_that_draws_its_own_refusal_is_dead_lettered_and_the_rest_goes(
    own_server: Server, tmp_path: Path, start_service: StartService
) -> None:
    """The system answers 1012 to any request holding one session: each batch with one of
    its items holds the key, a probe passes, the batch meets 1012 again and is
    dead-lettered with that answer (at most three sends each); every other event goes, and
    nothing stays held."""
    poison = "farm-00007"

    def refuse(biz_id: str, items: list[Any]) -> int | None:
        return 1012 if any(item.get("si") == poison for item in items) else None

    with NppaEndpoint(
        app_id="app-test-1", secret_key=OLD, biz_ids=GAMES.values(), refuse=refuse
    ) as endpoint:
        config = key_config(own_server, endpoint, tmp_path / "nppa.key")  # probes: 30 s apart
        now = int(time.time())
        sessions(config, "farm", 160, now, now)  # logins 0-127, 128-159 + logouts, ...
        sessions(config, "kart", 160, now, now)
        began = time.monotonic()
        service = start_service(config)
        wait_until(
            lambda: read_totals(service.store).counter("dead_events") == 256,
            timeout=60,
            what="the two batches holding the session dead-lettered",
        )
        dead_after = time.monotonic() - began
        wait_until(lambda: accepted_count(endpoint) == 640 - 256, timeout=30, what="the rest")
        wait_until(
            lambda: read_totals(service.store).counter("delivered") == 640 - 256,
            timeout=30,
            what="acknowledged",
        )
        assert not read_hold(service.store, HOLD, key_scope(OLD)).held
        assert not service.hold.held
    assert dead_after < 60
    refused = [r for r in endpoint.requests if r.errcode == 1012]
    assert 2 <= len(refused) <= 2 * 3  # each of the two batches sent at most three times
    assert all(r.items == 128 for r in refused)  # batches, never a probe
    dead = service.store.dead_batches(10)
    assert len(dead) == 2 and all("1012" in d.reason for d in dead)
    assert all("right after a probe" in d.reason for d in dead)


def delivered_of(endpoint: NppaEndpoint, biz_id: str) -> int:
    with endpoint.lock:
        return sum(1 for a in endpoint.accepted if a.biz_id == biz_id)


def test_a_new_key_is_proved_before_use_and_a_refused_one_leaves_the_old_in_use(
    own_server: Server, tmp_path: Path, start_service: StartService
) -> None:
    """A key file rewritten with a key the system refuses: one request with no items proves
    it wrong, the old key (valid through the overlap) stays in use, and an alert says why;
    a key that passes is used from then on."""
    wrong = "77" * 16
    key_file = tmp_path / "nppa.key"
    with NppaEndpoint(
        app_id="app-test-1", secret_key=OLD, more_keys=[NEW], biz_ids=GAMES.values()
    ) as endpoint:
        config = key_config(own_server, endpoint, key_file)
        service = start_service(config)
        now = int(time.time())
        sessions(config, "farm", 50, now, now)
        wait_until(lambda: accepted_count(endpoint) == 100, timeout=30, what="the first 100")

        key_file.write_text(wrong + "\n", encoding="utf-8")
        service.reload("SIGHUP")
        assert [a.name for a in service.store.alerts()] == ["nppa new key"]
        [alert] = service.store.alerts()
        assert fingerprint(wrong) in alert.message and "kept" in alert.message
        assert wrong not in alert.message
        sessions(config, "kart", 50, int(time.time()), int(time.time()))
        wait_until(lambda: accepted_count(endpoint) == 200, timeout=30, what="sent with OLD")
        assert not service.hold.held

        key_file.write_text(NEW + "\n", encoding="utf-8")  # watched: no signal needed
        wait_until(lambda: service.graph.core.sink.routes.apps[""].key() == NEW, timeout=20)
        endpoint.set_secret(NEW)  # the old key expires
        sessions(config, "farm", 50, int(time.time()), int(time.time()))
        wait_until(lambda: accepted_count(endpoint) == 300, timeout=30, what="sent with NEW")
    refused = [r for r in endpoint.requests if r.errcode == 1011]
    assert len(refused) == 1 and refused[0].items == 0  # the wrong key's proof, nothing else
    totals = settled_totals(service.store, 300)
    assert (totals.counter("delivered"), totals.counter("dead_events")) == (300, 0)


def test_a_game_without_a_biz_id_is_held_never_dead_and_goes_after_a_reload(
    own_server: Server, tmp_path: Path, start_service: StartService
) -> None:
    """A game shipped before the reporter's config: its events are held (status names it),
    none is dead-lettered, and SIGHUP (the config file read again) sends them all; a change
    the reporter takes only at start is named."""
    key_file = tmp_path / "nppa.key"
    key_file.write_text(OLD + "\n", encoding="utf-8")
    key_file.chmod(0o600)
    path = tmp_path / "nppa.toml"

    def write(kart_biz_id: str, linger_ms: int = 100) -> None:
        path.write_text(
            f'[redis]\nurl = "{own_server.url}"\nshards = 4\n'
            f"[reporter]\nlinger_ms = {linger_ms}\npoll_interval_ms = 20\n"
            f'[sink]\nkind = "nppa"\n'
            f'[nppa]\nbase_url = "{endpoint.url}"\napp_id = "app-test-1"\n'
            f'secret_key_file = "{key_file}"\nprobe_interval_seconds = 600\n'
            f'[games.farm]\nbiz_id = "{FARM}"\n'
            + (f'[games.kart]\nbiz_id = "{kart_biz_id}"\n' if kart_biz_id else ""),
            encoding="utf-8",
        )

    with NppaEndpoint(app_id="app-test-1", secret_key=OLD, biz_ids=GAMES.values()) as endpoint:
        write("")
        config = ReporterConfig.load(str(path), env={})
        now = int(time.time())
        sessions(config, "farm", 50, now, now)
        sessions(config, "kart", 50, now, now)
        service = start_service(config)
        wait_until(lambda: delivered_of(endpoint, FARM) == 100, timeout=30, what="farm's 100")
        wait_until(
            lambda: read_hold(service.store, HOLD, "game:kart").held, timeout=10, what="held"
        )
        kart = read_hold(service.store, HOLD, "game:kart")
        assert kart.cause == "no biz_id" and '[games."kart"] biz_id' in kart.check
        text = status_text(service.store, config, as_json=False)
        assert "HELD" in text and "game 'kart'" in text and "no biz_id" in text
        assert {r.biz_id for r in endpoint.requests} == {FARM}  # nothing went for kart

        write(KART, linger_ms=200)
        line = service.reload("SIGHUP")
        assert "kart changed" in line and "[reporter] changed: taken at a restart" in line
        wait_until(lambda: delivered_of(endpoint, KART) == 100, timeout=30, what="kart's 100")
        wait_until(
            lambda: read_totals(service.store).counter("delivered") == 200,
            timeout=30,
            what="acknowledged",
        )
    totals = read_totals(service.store)
    assert (totals.counter("dead_events"), totals.counter("stale")) == (0, 0)
    assert not read_hold(service.store, HOLD, "game:kart").held


def test_a_sustained_1007_holds_this_reporter_for_its_clock_until_a_probe_passes(
    own_server: Server, tmp_path: Path, start_service: StartService
) -> None:
    """The system's clock 30 s from this host's: after a few 1007s in a row this reporter
    is held ("host clock") instead of sending every batch twice and retrying it until it is
    stale; once the clocks agree a probe lifts it and everything goes."""
    with NppaEndpoint(
        app_id="app-test-1",
        secret_key=OLD,
        biz_ids=GAMES.values(),
        clock=lambda: time.time() + 30,
    ) as endpoint:
        config = key_config(own_server, endpoint, tmp_path / "nppa.key", probe_interval_seconds=1)
        now = int(time.time())
        sessions(config, "farm", 160, now, now)
        sessions(config, "kart", 160, now, now)
        service = start_service(config)
        assert service.hold is not None
        host = service.hold.host.name
        wait_until(lambda: read_hold(service.store, HOLD, host).held, timeout=20, what="held")
        held = read_hold(service.store, HOLD, host)
        assert held.cause == "host clock" and "NTP" in held.check
        with endpoint.lock:
            before = [r for r in endpoint.requests if r.at * 1000 < held.since_ms]
        # three in a row hold it: no batch sent twice over and over (each sweep thread may
        # have had one request on the way)
        assert len(before) <= 3 + config.reporter.workers
        threading.Event().wait(3.0)  # held: only the probes go out

        endpoint.clock = time.time  # NTP fixed it
        wait_until(lambda: accepted_count(endpoint) == 640, timeout=30, what="all 640")
    assert not read_hold(service.store, HOLD, host).held
    totals = read_totals(service.store)
    assert (totals.counter("dead_events"), totals.counter("stale")) == (0, 0)


def test_two_apps_in_one_reporter_each_game_under_its_own_and_a_wrong_key_holds_only_its_games(
    own_server: Server, tmp_path: Path, start_service: StartService
) -> None:
    """[nppa] is one app, [nppa.apps.second] another (its own URL, id and key): each game
    goes under its own app id and key; when the second app's key goes wrong, only its game
    is held, the first app's keeps going, and a proved key sends the rest."""
    first_key, second_key, second_new = OLD, NEW, "3c" * 16
    first_file, second_file = tmp_path / "first.key", tmp_path / "second.key"
    first_file.write_text(first_key + "\n", encoding="utf-8")
    second_file.write_text(second_key + "\n", encoding="utf-8")
    for file in (first_file, second_file):
        file.chmod(0o600)
    with (
        NppaEndpoint(app_id="app-first", secret_key=first_key, biz_ids=[FARM]) as first,
        NppaEndpoint(app_id="app-second", secret_key=second_key, biz_ids=[KART]) as second,
    ):
        path = tmp_path / "nppa.toml"
        path.write_text(
            f'[redis]\nurl = "{own_server.url}"\nshards = 4\n'
            "[reporter]\nlinger_ms = 100\npoll_interval_ms = 20\n"
            '[sink]\nkind = "nppa"\n'
            f'[nppa]\nbase_url = "{first.url}"\napp_id = "app-first"\n'
            f'secret_key_file = "{first_file}"\nprobe_interval_seconds = 1\n'
            f'[nppa.apps.second]\napp_id = "app-second"\nsecret_key_file = "{second_file}"\n'
            f'base_url = "{second.url}"\n'
            f'[games.farm]\nbiz_id = "{FARM}"\n'
            f'[games.kart]\nbiz_id = "{KART}"\napp = "second"\n',
            encoding="utf-8",
        )
        config = ReporterConfig.load(str(path), env={})
        now = int(time.time())
        sessions(config, "farm", 50, now, now)
        sessions(config, "kart", 50, now, now)
        service = start_service(config)
        wait_until(lambda: accepted_count(first) == 100, timeout=30, what="farm under app-first")
        wait_until(lambda: accepted_count(second) == 100, timeout=30, what="kart under app-second")
        # each interface saw its own game only, signed with its own key (else 1008/1011)
        assert {(r.biz_id, r.errcode) for r in first.requests} == {(FARM, 0)}
        assert {(r.biz_id, r.errcode) for r in second.requests} == {(KART, 0)}

        second.set_secret(second_new)  # the second app's key is no longer good
        now = int(time.time())
        sessions(config, "kart", 50, now, now)
        wait_until(
            lambda: read_hold(service.store, HOLD_FIRST, f"key:app-second:{fingerprint(NEW)}").held,
            timeout=20,
            what="the second app's key held",
        )
        sessions(config, "farm", 50, now, now)
        wait_until(lambda: accepted_count(first) == 200, timeout=30, what="farm goes on")
        assert not read_hold(service.store, HOLD_FIRST).held  # neither app is held
        assert not read_hold(service.store, HOLD_FIRST, "app:app-second").held
        assert accepted_count(second) == 100
        assert service.ownership.owned()  # it can still send the first app: it keeps its shards

        second_file.write_text(second_new + "\n", encoding="utf-8")  # proved, then used
        wait_until(lambda: accepted_count(second) == 200, timeout=30, what="kart with its key")
    totals = settled_totals(service.store, 400)
    assert (totals.counter("delivered"), totals.counter("dead_events")) == (400, 0)


HOLD_FIRST = "nppa:app-first"


def test_a_game_of_an_app_the_config_lacks_is_held_and_goes_once_sighup_brings_the_app(
    own_server: Server, tmp_path: Path, start_service: StartService
) -> None:
    """kart names an app the file does not have yet: it is held (nothing dead), farm goes;
    the app's table added and SIGHUP sent, kart goes under that app, with its own key."""
    second_file = tmp_path / "second.key"
    second_file.write_text(NEW + "\n", encoding="utf-8")
    second_file.chmod(0o600)
    key_file = tmp_path / "first.key"
    key_file.write_text(OLD + "\n", encoding="utf-8")
    key_file.chmod(0o600)
    with (
        NppaEndpoint(app_id="app-first", secret_key=OLD, biz_ids=[FARM]) as first,
        NppaEndpoint(app_id="app-second", secret_key=NEW, biz_ids=[KART]) as second,
    ):
        path = tmp_path / "nppa.toml"
        head = (
            f'[redis]\nurl = "{own_server.url}"\nshards = 4\n'
            "[reporter]\nlinger_ms = 100\npoll_interval_ms = 20\n"
            '[sink]\nkind = "nppa"\n'
            f'[nppa]\nbase_url = "{first.url}"\napp_id = "app-first"\n'
            f'secret_key_file = "{key_file}"\nprobe_interval_seconds = 600\n'
        )
        games = (
            f'[games.farm]\nbiz_id = "{FARM}"\n[games.kart]\nbiz_id = "{KART}"\napp = "second"\n'
        )
        path.write_text(head + games, encoding="utf-8")
        config = ReporterConfig.load(str(path), env={})
        now = int(time.time())
        sessions(config, "farm", 50, now, now)
        sessions(config, "kart", 50, now, now)
        service = start_service(config)
        wait_until(lambda: accepted_count(first) == 100, timeout=30, what="farm's 100")
        wait_until(
            lambda: read_hold(service.store, HOLD_FIRST, "game:kart").held, timeout=10, what="held"
        )
        assert read_hold(service.store, HOLD_FIRST, "game:kart").cause == "unknown app"
        assert not second.requests

        path.write_text(
            head
            + f'[nppa.apps.second]\napp_id = "app-second"\nsecret_key_file = "{second_file}"\n'
            + f'base_url = "{second.url}"\n'
            + games,
            encoding="utf-8",
        )
        line = service.reload("SIGHUP")
        assert "2 apps (second new)" in line
        assert "taken at a restart" not in line  # [nppa.apps] is taken at run time
        wait_until(lambda: accepted_count(second) == 100, timeout=30, what="kart under app-second")
    totals = settled_totals(service.store, 200)
    assert (totals.counter("delivered"), totals.counter("dead_events")) == (200, 0)
