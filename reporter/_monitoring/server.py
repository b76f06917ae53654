"""The HTTP server of ``/metrics``, ``/healthz`` and ``/readyz``, on its own threads.

It binds the configured address only, answers GET, and serves the Prometheus text format
0.0.4 (no OpenMetrics negotiation: one format, whatever the scraper asks).
"""

from __future__ import annotations

import json
import logging
import socket
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import urlsplit

from collector.logs import RateLimitedLog
from reporter._exceptions import ReporterError
from reporter._monitoring.health import Health

logger = logging.getLogger("reporter")
ratelog = RateLimitedLog(logger, interval=30.0)

TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


class Collectable(Protocol):
    def collect(self) -> Any: ...


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily,
                 handler: type[BaseHTTPRequestHandler]) -> None:
        self.address_family = family
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks up the host's FQDN, which can stall on a slow DNS.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)


class MetricsServer:
    def __init__(self, address: tuple[str, int], metrics: Collectable, health: Health) -> None:
        self._address = address
        self._metrics = metrics
        self._health = health
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve; ``ReporterError`` naming the address if it cannot be bound."""
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self._metrics)
        host, port = self._address
        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
            self._server = _Server(self._address, family, _handler(registry, self._health))
        except OSError as exc:
            raise ReporterError(f"[metrics] listen: cannot serve metrics on {host}:{port}: "
                                f"{exc.strerror or exc}") from exc
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.1},
                                        name="metrics-http", daemon=True)
        self._thread.start()
        logger.info("serving metrics on %s/metrics (health: /healthz, /readyz)", self.url)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the metrics server is not running")
        host, port = (str(part) for part in self._server.server_address[:2])
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _handler(registry: Any, health: Health) -> type[BaseHTTPRequestHandler]:
    from prometheus_client import generate_latest

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in separate writes: with Nagle on, the body of a
        # kept-alive scrape waits for the client's delayed ACK (about 40 ms).
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            try:
                if path == "/metrics":
                    self._send(200, TEXT_FORMAT, generate_latest(registry))
                elif path == "/healthz":
                    self._json(200, health.alive())
                elif path == "/readyz":
                    ready, body = health.ready()
                    self._json(200 if ready else 503, body)
                else:
                    self._json(404, {"error": f"not found: {path}; try /metrics, /healthz "
                                              "or /readyz"})
            except Exception as exc:  # a bug: answer 500 rather than drop the connection
                ratelog.log(logging.ERROR, f"metrics:{path}", "GET %s failed: %s: %s", path,
                            type(exc).__name__, exc, exc_info=True)
                self._json(500, {"error": f"{type(exc).__name__}: {exc}"})

        def _json(self, status: int, body: dict[str, Any]) -> None:
            self._send(status, "application/json", json.dumps(body).encode() + b"\n")

        def _send(self, status: int, content_type: str, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("metrics endpoint: " + format, *args)

    return Handler
