"""Keep-alive against a real ASGI server: uvicorn on 127.0.0.1 with a 1 s keep-alive timeout,
and requests spaced at that boundary (0.95 to 1.05 s apart), so the server closes pooled
connections just before, as, or just after a request reuses them.  Every batch must go
through with no failure logged and no retry counted."""

from __future__ import annotations

import logging
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import uvicorn

from reporter._senders.outcome import DELIVERED, Outcome
from reporter._sinks.json.sender import JsonSender
from tests.support.fixtures import StartService
from tests.support.polling import wait_until
from tests.support.scenarios import (
    drained,
    games_in_distinct_shards,
    make_config,
    push_events,
    schema_of,
)
from tests.support.servers import Server

KEEP_ALIVE_SECONDS = 1
SPACINGS = [0.95, 0.97, 0.99, 1.0, 1.01, 1.03, 1.05]
# From events pushed to their POST: linger_ms (50) and up to a poll interval (20).
CLAIM_DELAY = 0.06


class IngestApp:
    """A minimal ASGI ingest endpoint: records each batch and the client port it came from
    (one port per connection), answers 200."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[dict[str, Any]] = []
        self.ports: list[int] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        with self.lock:
            self.batches.append(orjson.loads(body))
            self.ports.append(scope["client"][1])
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"ok":true}'})

    def connections(self) -> int:
        with self.lock:
            return len(set(self.ports))


class Uvicorn:
    def __init__(self, app: IngestApp) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/ingest"
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            http="h11",
            ws="none",
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def start(self) -> Uvicorn:
        self.thread.start()
        wait_until(lambda: self.server.started, what="uvicorn started")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def asgi() -> Iterator[tuple[IngestApp, Uvicorn]]:
    app = IngestApp()
    server = Uvicorn(app).start()
    yield app, server
    server.stop()


def pause(seconds: float) -> None:
    threading.Event().wait(seconds)


def test_requests_at_the_keep_alive_boundary_all_go_through_quietly(
    asgi: tuple[IngestApp, Uvicorn], caplog: pytest.LogCaptureFixture
) -> None:
    """The sender on its own: two POSTs at a time (so the pool holds two connections, which
    the server closes together), 14 times, spaced at the server's keep-alive timeout."""
    app, server = asgi
    config = make_config("redis://127.0.0.1:1/0", server.url)
    sender = JsonSender(config.sink)
    outcomes: list[Outcome] = []

    def post(batch_id: str) -> None:
        outcomes.append(sender.send("g", batch_id, [b'{"n":1}']))

    try:
        for i, spacing in enumerate(SPACINGS * 2):
            pair = [threading.Thread(target=post, args=(f"b{i}.{k}",)) for k in range(2)]
            for t in pair:
                t.start()
            for t in pair:
                t.join(10)
            pause(spacing)
    finally:
        sender.close()
    assert [o.kind for o in outcomes] == [DELIVERED] * 28, outcomes
    assert sorted(b["batch_id"] for b in app.batches) == sorted(
        f"b{i}.{k}" for i in range(14) for k in range(2)
    )
    assert app.connections() > 2  # the server did close connections at the boundary
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_reporter_at_the_keep_alive_boundary_counts_no_retry(
    asgi: tuple[IngestApp, Uvicorn],
    own_server: Server,
    start_service: StartService,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The whole service: a few events of each of two games (two shards, two workers) every
    0.95 to 1.05 s; each round is two POSTs."""
    app, server = asgi
    config = make_config(own_server.url, server.url, reporter={"workers": 2})
    service = start_service(config)
    wait_until(
        lambda: len(service.ownership.owned()) == config.redis.shards, what="every shard owned"
    )
    client, schema = own_server.client(), schema_of(config)
    games = games_in_distinct_shards(schema, 2, "boundary")
    for i, spacing in enumerate(SPACINGS * 2):
        for game in games:
            push_events(client, schema, game, range(5 * i, 5 * i + 5))
        wait_until(lambda n=i: len(app.batches) >= 2 * (n + 1), what=f"round {i} delivered")
        pause(spacing - CLAIM_DELAY)
    totals = wait_until(lambda: drained(client, schema), what="every batch finished")
    assert totals.counter("delivered") == 2 * 5 * 14
    assert totals.counter("batches_retried") == 0
    assert service.tally.snapshot().get("batches_retried", 0) == 0
    sent = Counter(b["batch_id"] for b in app.batches)
    assert len(sent) == 28 and max(sent.values()) == 1
    assert app.connections() > 2
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
