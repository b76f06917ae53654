"""A small local ingest endpoint that records what it receives (demo, tests, benchmarks).

It speaks HTTP/1.1 with keep-alive on 127.0.0.1 and answers 200, or whatever ``respond``
decides, so tests can script failures.  Like a real ingest service it answers 400 to a body
that is not JSON, and, with ``max_body_bytes``, 413 to a larger body (as nginx does with its
``client_max_body_size``, 1 MiB by default: it reads the body, answers and closes).
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class Received:
    game: str
    batch_id: str
    idempotency_key: str
    events: list[Any]
    at: float
    status: int
    headers: dict[str, str] = field(default_factory=dict)


# (request number, parsed body) -> (status, extra headers, body); may sleep to be slow.
Responder = Callable[[int, dict[str, Any]], tuple[int, dict[str, str], bytes]]


def _ok(_: int, __: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    return 200, {}, b'{"ok":true}'


class LocalEndpoint:
    def __init__(
        self,
        respond: Responder | None = None,
        path: str = "/ingest",
        port: int = 0,
        max_body_bytes: int = 0,
    ) -> None:
        self.respond = respond or _ok
        self.path = path
        self.max_body_bytes = max_body_bytes
        self.lock = threading.Lock()
        self.received: list[Received] = []
        self.requests = 0
        # The headers of every request, answered or not, in arrival order.
        self.request_headers: list[dict[str, str]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes: with Nagle on, the body waits for
            # the client's delayed ACK, 40 ms per request on a keep-alive connection.
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                endpoint._handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{self.path}"

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        raw = request.rfile.read(length)
        headers = dict(request.headers.items())
        with self.lock:
            self.requests += 1
            number = self.requests
            self.request_headers.append(headers)
        if self.max_body_bytes and length > self.max_body_bytes:
            request.close_connection = True
            self._reply(
                request,
                413,
                {"Connection": "close"},
                b"<html><body>413 Request Entity Too Large</body></html>",
            )
            return
        if request.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            self._reply(request, 400, {}, orjson.dumps({"error": f"invalid JSON: {exc}"}))
            return
        status, reply_headers, reply = self.respond(number, body)
        if 200 <= status < 300 and isinstance(body, dict):
            with self.lock:
                self.received.append(
                    Received(
                        str(body.get("game")),
                        str(body.get("batch_id")),
                        request.headers.get("Idempotency-Key", ""),
                        list(body.get("events", [])),
                        time.time(),
                        status,
                        headers,
                    )
                )
        self._reply(request, status, reply_headers, reply)

    @staticmethod
    def _reply(
        request: BaseHTTPRequestHandler, status: int, reply_headers: dict[str, str], reply: bytes
    ) -> None:
        try:
            request.send_response(status)
            for name, value in reply_headers.items():
                request.send_header(name, value)
            request.send_header("Content-Type", "application/json")
            request.send_header("Content-Length", str(len(reply)))
            request.end_headers()
            request.wfile.write(reply)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def events(self) -> list[Any]:
        with self.lock:
            return [e for r in self.received for e in r.events]

    def start(self) -> LocalEndpoint:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="local-endpoint",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LocalEndpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
