"""Anti-addiction scenarios against the mock of the interface (``reporter._demo.nppa_mock``):
the app, games and key a reporter is configured with, sessions collected through the SDK, what
the mock answered; and a reporter started with a key the system no longer accepts (``OLD``,
in a file, beside ``NEW``, the only one it accepts)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collector import Collector, nppa
from reporter._config import ReporterConfig
from reporter._demo.nppa_mock import NppaEndpoint
from reporter._sinks.nppa.routes import fingerprint
from tests.support.entries import make_config
from tests.support.servers import Server

SECRET = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
APP_ID = "app-test-1"
GAMES = {"farm": "1101999999", "kart": "1101999998"}
PI = "1" * 38

OLD = SECRET  # the key the reporter starts with
NEW = "5a" * 16  # the only key the interface accepts
HOLD = "nppa:" + APP_ID  # the group of the app's holds: the app's own is its first scope
SHORT_WINDOW = {"freshness_margin_seconds": 165.0}  # items go late after 15 s


def nppa_config(
    redis_url: str,
    endpoint: NppaEndpoint,
    reporter: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    sink: dict[str, Any] | None = None,
    retry: dict[str, Any] | None = None,
    **nppa_settings: Any,
) -> ReporterConfig:
    """The app and its games on ``endpoint``, with ``SECRET`` unless a key file is given."""
    key = {} if "secret_key_file" in nppa_settings else {"secret_key": SECRET}
    return make_config(
        redis_url,
        shards=4,
        sink={"kind": "nppa", **(sink or {})},
        metrics=metrics or {},
        retry=retry or {},
        nppa={
            "base_url": endpoint.url,
            "app_id": APP_ID,
            **key,
            "throttle_seconds": 1.0,
            **nppa_settings,
        },
        games={game: {"biz_id": biz} for game, biz in GAMES.items()},
        reporter={
            "linger_ms": 100,
            "poll_interval_ms": 20,
            "lease_seconds": 10.0,
            **(reporter or {}),
        },
    )


def key_config(
    server: Server,
    endpoint: NppaEndpoint,
    key_file: Path,
    key: str = OLD,
    metrics: dict[str, Any] | None = None,
    **nppa_settings: Any,
) -> ReporterConfig:
    """``nppa_config`` with the key in a file."""
    key_file.write_text(f"{key}\n", encoding="utf-8")
    return nppa_config(
        server.url, endpoint, metrics=metrics, secret_key_file=str(key_file), **nppa_settings
    )


def key_scope(key: str) -> str:
    """The hold of the reporters that use ``key``."""
    return f"key:{APP_ID}:{fingerprint(key)}"


def collect(
    config: ReporterConfig,
    per_game: int,
    ot: int | None = None,
    pi: Callable[[int], str] = lambda i: PI,
) -> None:
    """Logins and logouts of sessions of every game, stored in Redis."""
    c = Collector(config=config)
    try:
        for game in GAMES:
            for i in range(per_game):
                event = (nppa.login if i % 2 == 0 else nppa.logout)(
                    si=f"{game}-{i // 2:05d}", ot=ot or int(time.time()), pi=pi(i)
                )
                c.collect(game, event)
        assert c.flush(timeout=20)
    finally:
        c.close(timeout=1)


def sessions(
    config: ReporterConfig, game: str, count: int, login_ot: int, logout_ot: int, pi: str = PI
) -> None:
    """``count`` sessions of ``game``: every login, then every logout, stored in Redis."""
    c = Collector(config=config)
    try:
        for i in range(count):
            c.collect(game, nppa.login(si=f"{game}-{i:05d}", ot=login_ot, pi=pi))
        for i in range(count):
            c.collect(game, nppa.logout(si=f"{game}-{i:05d}", ot=logout_ot, pi=pi))
        assert c.flush(timeout=20)
    finally:
        c.close(timeout=1)


def pause(seconds: float) -> None:
    threading.Event().wait(seconds)


def accepted_count(endpoint: NppaEndpoint) -> int:
    with endpoint.lock:
        return len(endpoint.accepted)


def codes(endpoint: NppaEndpoint) -> Counter[int]:
    with endpoint.lock:
        return Counter(r.errcode for r in endpoint.requests)


def answered(endpoint: NppaEndpoint) -> list[tuple[float, int]]:
    with endpoint.lock:
        return [(r.at, r.errcode) for r in endpoint.requests]
