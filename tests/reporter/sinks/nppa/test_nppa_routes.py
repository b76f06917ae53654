"""Each game's route (its app, key and bizId) and the hold scopes a request of it can meet,
as the nppa sink builds them from a config and from the config read again (SIGHUP)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reporter._senders.outcome import APP, GAME, KEY, Refusal
from reporter._sinks.nppa.routes import Route, fingerprint
from reporter._sinks.nppa.sink import NppaSink
from tests.support.entries import make_config

FIRST, SECOND = "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "5a" * 16


def config(tmp_path: Path, apps: dict[str, Any] | None = None, **games: Any) -> Any:
    return make_config(
        "redis://127.0.0.1:1/0",
        sink={"kind": "nppa"},
        nppa={"app_id": "app-1", "secret_key": FIRST, "apps": apps or {}},
        games=games,
    )


def test_each_game_goes_to_its_app_and_is_held_in_that_app_s_scopes(tmp_path: Path) -> None:
    sink = NppaSink(
        config(
            tmp_path,
            {"second": {"app_id": "app-2", "secret_key": SECOND, "base_url": "http://b.test"}},
            farm={"biz_id": "11"},
            kart={"biz_id": "22", "app": "second"},
            lost={"biz_id": "33", "app": "nope"},
            bare={},
        )
    )
    farm, kart = sink.routes.route("farm"), sink.routes.route("kart")
    assert isinstance(farm, Route) and isinstance(kart, Route)
    assert (farm.app.app_id, farm.biz_id, farm.app.key()) == ("app-1", "11", FIRST)
    assert (kart.app.app_id, kart.biz_id, kart.app.key()) == ("app-2", "22", SECOND)
    assert kart.app.url == "http://b.test/behavior/collection/loginout"
    assert [s.name for s in sink.hold_scopes("farm")] == [
        "",
        f"key:app-1:{fingerprint(FIRST)}",
        "game:farm",
    ]
    assert [s.name for s in sink.hold_scopes("kart")] == [
        "app:app-2",
        f"key:app-2:{fingerprint(SECOND)}",
        "game:kart",
    ]
    assert sink.hold_scope("kart", Refusal("nppa 1011", scope=KEY)).name.startswith("key:app-2:")
    assert sink.hold_scope("kart", Refusal("nppa 1005", scope=APP)).name == "app:app-2"
    assert sink.hold_scope("kart", Refusal("nppa 1010", scope=GAME)).name == "game:kart"
    unknown, bare = sink.unroutable("lost"), sink.unroutable("bare")
    assert unknown is not None and unknown.cause == "unknown app" and unknown.scope == GAME
    assert bare is not None and bare.cause == "no biz_id" and '[games."bare"]' in bare.check
    assert sink.unroutable("farm") is None
    # the rate: [nppa]'s app keeps the scope it always had, another app one of its own
    assert (sink._rate_scope("farm"), sink._rate_scope("kart")) == ("", "app-2")
    # a key scope of another key is not this reporter's: it neither probes nor lifts it
    assert sink.scope_named(f"key:app-1:{fingerprint(SECOND)}") is None
    assert fingerprint(FIRST) != fingerprint(SECOND) and FIRST not in fingerprint(FIRST)
    # a key copied in upper case signs as issued (lower case): the same key, the same hold
    assert fingerprint(FIRST.upper()) == fingerprint(FIRST)


def test_a_reload_whose_new_key_file_went_away_leaves_that_app_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The file read again names an app whose key file is gone by the time it is opened:
    the app is left out (its games are held), with an ERROR, never sent with no key."""
    key_file = tmp_path / "second.key"
    key_file.write_text(SECOND + "\n", encoding="utf-8")
    sink = NppaSink(config(tmp_path, farm={"biz_id": "11"}))
    again = config(
        tmp_path,
        {"second": {"app_id": "app-2", "secret_key_file": str(key_file)}},
        farm={"biz_id": "11"},
        kart={"biz_id": "22", "app": "second"},
    )
    key_file.unlink()
    taken = sink.reload(again)
    assert "kart changed" in taken.taken and not taken.files
    held = sink.unroutable("kart")
    assert held is not None and held.cause == "unknown app"
    assert any("that app is left out" in r.getMessage() for r in caplog.records)
