"""bench/pipeline.py's ingest endpoint: an asyncio HTTP/1.1 keep-alive server in a child process.

It parses Content-Length, decodes each body with orjson, counts events, drops duplicate batch
ids (counted) and keeps a histogram of ``receive time - event["t"]`` in ms; ``/count``,
``/stats`` and ``/reset`` let the bench read and clear that tally.  ``endpoint_capacity``
measures what one client thread gets through an endpoint, this one or the project's
``reporter._demo.endpoint.LocalEndpoint`` (ThreadingHTTPServer, too slow to measure 100k events/s).
"""

from __future__ import annotations

import asyncio
import http.client
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from bench._pipeline_children import MP
from bench._pipeline_workload import BATCH, make_event


class EndpointTally:
    """What the endpoint received, unique by batch id."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.events = 0
        self.batches = 0
        self.dup_batches = 0
        self.dup_events = 0
        self.bad = 0
        self.max_batch = 0
        self.first = 0.0
        self.last = 0.0
        self.seen: set[str] = set()
        self.per_second: Counter[int] = Counter()
        self.latency: Counter[int] = Counter()

    def ingest(self, body: bytes) -> None:
        now = time.time()
        try:
            data = orjson.loads(body)
            batch_id = data["batch_id"]
            events = data["events"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self.bad += 1
            return
        if batch_id in self.seen:
            self.dup_batches += 1
            self.dup_events += len(events)
            return
        self.seen.add(batch_id)
        n = len(events)
        self.events += n
        self.batches += 1
        self.max_batch = max(self.max_batch, n)
        self.first = self.first or now
        self.last = now
        self.per_second[int(now)] += n
        now_ms = int(now * 1000)
        latency = self.latency
        for event in events:
            latency[now_ms - event["t"]] += 1

    def count(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "batches": self.batches,
            "last": self.last,
            "dup_events": self.dup_events,
            "bad": self.bad,
        }

    def stats(self) -> dict[str, Any]:
        return {
            **self.count(),
            "dup_batches": self.dup_batches,
            "max_batch": self.max_batch,
            "first": self.first,
            "per_second": dict(self.per_second),
            "latency": dict(self.latency),
            "cpu": time.process_time(),
        }


OK_REPLY = b'{"ok":true}'


def _reply(status: int, body: bytes) -> bytes:
    reason = b"OK" if status == 200 else b"Not Found"
    return (
        b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        % (status, reason, len(body))
        + body
    )


def _route(tally: EndpointTally, method: bytes, path: bytes, body: bytes) -> bytes:
    if method == b"POST" and path == b"/ingest":
        tally.ingest(body)
        return _reply(200, OK_REPLY)
    if path == b"/count":
        return _reply(200, orjson.dumps(tally.count()))
    if path == b"/stats":
        return _reply(200, orjson.dumps(tally.stats(), option=orjson.OPT_NON_STR_KEYS))
    if method == b"POST" and path == b"/reset":
        tally.reset()
        return _reply(200, OK_REPLY)
    return _reply(404, b"{}")


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        if line[:15].lower() == b"content-length:":
            return int(line[15:])
    return 0


async def _serve_connection(
    tally: EndpointTally, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            method, path, _ = head.split(b" ", 2)
            length = _content_length(head)
            body = await reader.readexactly(length) if length else b""
            writer.write(_route(tally, method, path, body))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


class GameTally(EndpointTally):
    """``EndpointTally`` that also counts the unique events of each game, and keeps a latency
    histogram (100 ms buckets) per minute since the first event (bench/scale.py)."""

    def reset(self) -> None:
        super().reset()
        self.per_game: Counter[str] = Counter()
        self.by_minute: dict[int, Counter[int]] = {}

    def ingest(self, body: bytes) -> None:
        before = self.events
        super().ingest(body)
        if self.events == before:
            return
        data = orjson.loads(body)
        self.per_game[data["game"]] += self.events - before
        now_ms = int(self.last * 1000)
        minute = self.by_minute.setdefault(int(self.last - self.first) // 60, Counter())
        for event in data["events"]:
            minute[(now_ms - event["t"]) // 100 * 100] += 1

    def stats(self) -> dict[str, Any]:
        return {
            **super().stats(),
            "per_game": dict(self.per_game),
            "by_minute": {m: dict(h) for m, h in self.by_minute.items()},
        }


async def _endpoint(conn: Connection, tally: EndpointTally | None = None) -> None:
    tally = tally or EndpointTally()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _serve_connection(tally, reader, writer)

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=512)
    conn.send(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


def fast_endpoint_main(conn: Connection) -> None:
    asyncio.run(_endpoint(conn))


def game_endpoint_main(conn: Connection) -> None:
    asyncio.run(_endpoint(conn, GameTally()))


def local_endpoint_main(conn: Connection) -> None:
    """The project's ThreadingHTTPServer endpoint, only for the capacity comparison."""
    from reporter._demo.endpoint import LocalEndpoint

    endpoint = LocalEndpoint().start()
    conn.send(endpoint.url)
    conn.recv()
    endpoint.stop()


class FastEndpoint:
    """Controls the endpoint child: start, reset, read counters, stop."""

    def __init__(self, per_game: bool = False) -> None:
        parent, child = MP.Pipe()
        target = game_endpoint_main if per_game else fast_endpoint_main
        self.proc = MP.Process(target=target, args=(child,), daemon=True, name="bench-endpoint")
        self.proc.start()
        if not parent.poll(30):
            raise RuntimeError("endpoint did not start")
        self.port = int(parent.recv())
        self.url = f"http://127.0.0.1:{self.port}/ingest"
        self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def _call(self, method: str, path: str) -> dict[str, Any]:
        self._conn.request(method, path, body=b"" if method == "POST" else None)
        data = orjson.loads(self._conn.getresponse().read())
        return data if isinstance(data, dict) else {}

    def reset(self) -> None:
        self._call("POST", "/reset")

    def count(self) -> dict[str, Any]:
        return self._call("GET", "/count")

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/stats")

    def stop(self) -> None:
        self._conn.close()
        self.proc.terminate()
        self.proc.join(10)


@dataclass
class Capacity:
    events_per_s: float
    client_cpu_us_per_post: float


def endpoint_capacity(url: str, client: str = "httpx", seconds: float = 2.0) -> Capacity:
    """What one client thread gets through, 128 events per POST, and its CPU per POST.

    ``httpx`` is the reporter's sender; ``http.client`` (stdlib) shows what a lighter client
    costs."""
    events = b",".join(orjson.dumps(make_event(i, int(time.time() * 1000))) for i in range(BATCH))
    post = _poster(url, client)
    post(b"{}")
    posts = 0
    cpu = time.process_time()
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        post(b'{"game":"cap","batch_id":"%s","events":[%s]}' % (uuid.uuid4().hex.encode(), events))
        posts += 1
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return Capacity(posts * BATCH / wall, cpu / posts * 1e6)


def _poster(url: str, client: str) -> Callable[[bytes], None]:
    headers = {"Content-Type": "application/json", "Idempotency-Key": "capacity"}
    if client == "httpx":
        hx = httpx.Client(timeout=10, headers=headers)

        def post_httpx(body: bytes) -> None:
            hx.post(url, content=body).raise_for_status()

        return post_httpx
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)

    def post_stdlib(body: bytes) -> None:
        conn.request("POST", parts.path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"endpoint answered {response.status}")

    return post_stdlib


def local_endpoint_capacity(seconds: float = 2.0) -> float:
    parent, child = MP.Pipe()
    proc = MP.Process(target=local_endpoint_main, args=(child,), daemon=True)
    proc.start()
    try:
        return endpoint_capacity(str(parent.recv()), seconds=seconds).events_per_s
    finally:
        parent.send("stop")
        proc.join(10)
