"""A ``httpx.MockTransport`` handler that records what the reporter POSTs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson


@dataclass(frozen=True)
class Post:
    game: str
    batch_id: str
    idempotency_key: str
    events: list[Any]
    thread: str
    thread_id: int
    attempt: str


class Recorder:
    """Records every request (body parsed, sending thread) and answers ``reply`` (200)."""

    def __init__(self, reply: Callable[[httpx.Request], httpx.Response] | None = None) -> None:
        self.lock = threading.Lock()
        self.posts: list[Post] = []
        self.reply = reply or (lambda _: httpx.Response(200, json={"ok": True}))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.read())
        thread = threading.current_thread()
        with self.lock:
            self.posts.append(
                Post(
                    body["game"],
                    body["batch_id"],
                    request.headers.get("Idempotency-Key", ""),
                    body["events"],
                    thread.name,
                    thread.ident or 0,
                    request.headers.get("X-Telemetry-Attempt", ""),
                )
            )
        return self.reply(request)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)

    def events(self, game: str | None = None) -> list[Any]:
        with self.lock:
            return [e for p in self.posts if game in (None, p.game) for e in p.events]
