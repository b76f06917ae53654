"""The demo's two endpoints: a local JSON ingest endpoint, and a local mock of the
anti-addiction interface; each says what its traffic looks like and what it received."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from collector import nppa
from reporter._demo.endpoint import LocalEndpoint
from reporter._demo.nppa_mock import NppaEndpoint


@dataclass(frozen=True, slots=True)
class Figures:
    """What the endpoint received: events, requests it took, the largest, and the delay
    from collect (or behaviour) time to receipt of every event, in ms."""

    events: int = 0
    posts: int = 0
    largest: int = 0
    latencies_ms: list[float] = field(default_factory=list)


class DemoSink(Protocol):
    rates: Mapping[str, int]  # events per second of each simulated game
    hot_games: Mapping[str, int]

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def configure(self, raw: dict[str, dict[str, Any]]) -> None:
        """Point the config's sections at this endpoint."""

    def event(self, session: int, bt: int) -> dict[str, Any]: ...

    def figures(self) -> Figures: ...

    def describe(self) -> str: ...


HOT_GAME = "arena-hot"


class JsonDemo:
    rates: Mapping[str, int] = {
        HOT_GAME: 3000,
        "puzzle-quest": 200,
        "kart-racer": 150,
        "card-club": 100,
        "farm-story": 50,
        "tiny-chess": 5,
    }
    hot_games: Mapping[str, int] = {HOT_GAME: 2}

    def __init__(self) -> None:
        self._endpoint = LocalEndpoint()

    def start(self) -> None:
        self._endpoint.start()

    def stop(self) -> None:
        self._endpoint.stop()

    def configure(self, raw: dict[str, dict[str, Any]]) -> None:
        raw["sink"].update(url=self._endpoint.url)

    def event(self, session: int, bt: int) -> dict[str, Any]:
        return {
            "si": f"s{session:08d}",
            "bt": bt,
            "ot": int(time.time()),
            "ct": 0,
            "pi": f"1{session:037d}",
            "sent_ms": time.time_ns() // 1_000_000,
        }

    def figures(self) -> Figures:
        with self._endpoint.lock:
            received = list(self._endpoint.received)
        latencies = [
            r.at * 1000 - e["sent_ms"]
            for r in received
            for e in r.events
            if isinstance(e, dict) and "sent_ms" in e
        ]
        return Figures(
            sum(len(r.events) for r in received),
            len(received),
            max((len(r.events) for r in received), default=0),
            latencies,
        )

    def describe(self) -> str:
        return f"ingest endpoint {self._endpoint.url} ({HOT_GAME} is hot, 2 threads)"


class NppaDemo:
    """Two games' logins and logouts, 500 a second each: together close to what the
    interface's 10 requests/s of 128 items allow."""

    rates: Mapping[str, int] = {"farm-story": 500, "kart-racer": 500}
    hot_games: Mapping[str, int] = {}
    biz_ids = {"farm-story": "1101999999", "kart-racer": "1101999998"}
    app_id = "demo-app"

    def __init__(self) -> None:
        self._secret = os.urandom(16).hex()
        self._endpoint = NppaEndpoint(
            app_id=self.app_id, secret_key=self._secret, biz_ids=self.biz_ids.values()
        )

    def start(self) -> None:
        self._endpoint.start()

    def stop(self) -> None:
        self._endpoint.stop()

    def configure(self, raw: dict[str, dict[str, Any]]) -> None:
        raw["sink"].update(kind="nppa")
        raw["nppa"].update(base_url=self._endpoint.url, app_id=self.app_id, secret_key=self._secret)
        raw["games"] = {game: {"biz_id": biz} for game, biz in self.biz_ids.items()}

    def event(self, session: int, bt: int) -> dict[str, Any]:
        make = nppa.login if bt else nppa.logout
        if session % 4:
            return make(si=f"s{session:08d}", ot=int(time.time()), pi=f"1{session:037d}")
        return make(si=f"s{session:08d}", ot=int(time.time()), di=f"device-{session}")

    def figures(self) -> Figures:
        with self._endpoint.lock:
            accepted = list(self._endpoint.accepted)
            taken = [r.items for r in self._endpoint.requests if r.errcode == 0]
        latencies = [(a.at - a.item["ot"]) * 1000 for a in accepted]
        return Figures(len(accepted), len(taken), max(taken, default=0), latencies)

    def describe(self) -> str:
        return (
            f"a mock of the anti-addiction interface on {self._endpoint.url} "
            f"(10 requests/s, 128 items each)"
        )
