"""``IngestService``: the ingest's server and the SDK collector it writes through, started and
stopped together.

The collector is the SDK's own (``Collector``) built from the same file: the same buffer,
flusher, written-once writes and counters as in a Python game server, always in background
mode.  The server is the reporter's bounded HTTP/1.1 server (``reporter._http``): one
selector thread, deadlines on every request, a cap on connections; it binds ``[ingest]
listen`` and nothing else.  Stopping answers new requests 503, closes the server, then gives
the collector ``[collector] close_timeout_seconds`` to store what it holds; what is left is
counted as ``dropped_at_close``.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from collector import Collector
from reporter._config import ReporterConfig, listen_address, read_token_file
from reporter._exceptions import ReporterError
from reporter._http.bounded_server import BoundedServer, Serving
from reporter._http.shedding import Counts, Limits
from reporter._ingest.api import METHODS, IngestApi
from reporter._ingest.metrics import exposition

logger = logging.getLogger("reporter")


class IngestService:
    def __init__(self, config: ReporterConfig, collector: Collector | None = None) -> None:
        self.config = config
        settings = config.ingest
        if collector is None:
            background = dataclasses.replace(config.collector, mode="background")
            collector = Collector(config=dataclasses.replace(config, collector=background))
        self.collector = collector
        self._server_counts = Counts()
        self.api = IngestApi(
            collector,
            token=self._read_token(),
            max_events=settings.events_per_request(config.collector.max_buffer_events),
            buffer_bytes=config.collector.max_buffer_bytes,
            retry_after_seconds=settings.retry_after_seconds,
            metrics=lambda: exposition(self.collector, self.api.counts, self._server_counts),
        )
        self._server: BoundedServer | None = None

    def _read_token(self) -> bytes | None:
        path = self.config.ingest.token_file
        return read_token_file(path).encode() if path else None

    def start(self) -> None:
        """Bind and serve; ``ReporterError`` naming the address if it cannot be bound."""
        settings = self.config.ingest
        host, port = listen_address(settings.listen)
        limits = Limits(
            max_connections=settings.max_connections,
            request_seconds=settings.request_timeout_seconds,
            answer_seconds=settings.request_timeout_seconds,
            workers=1,
            max_body_bytes=settings.max_body_bytes,
        )
        serving = Serving(
            self.api,
            self.api.inline,
            name="ingest",
            methods=METHODS,
            screen=self.api.screen,
            health=lambda request: request.path == "/healthz",
            chunked=True,
        )
        try:
            server = BoundedServer.at((host, port), serving, limits, self._server_counts)
        except OSError as exc:
            raise ReporterError(
                f"[ingest] listen: cannot serve on {host}:{port}: {exc.strerror or exc}"
            ) from exc
        self._server = server
        server.start()

    @property
    def url(self) -> str:
        """The server's base URL (the port chosen if ``listen`` gave 0)."""
        if self._server is None:
            raise RuntimeError("the ingest is not running")
        return self._server.url

    def reload(self) -> None:
        """Read ``[ingest] token_file`` again (SIGHUP); a file that no longer holds a token
        keeps the one in use, with an error logged."""
        try:
            self.api.token = self._read_token()
        except ValueError as exc:
            logger.error("ingest: [ingest] token_file: %s; keeping the token in use", exc)
            return
        logger.info("ingest: [ingest] token_file read again")

    def stop(self, timeout: float | None = None) -> dict[str, Any]:
        """Refuse new requests, close the server, store what the collector holds within
        ``timeout`` (default ``[collector] close_timeout_seconds``); the counts at the end."""
        self.api.stopping = True
        server, self._server = self._server, None
        if server is not None:
            server.stop()
        self.collector.close(timeout)
        return {
            "answers": {str(k): v for k, v in sorted(self.api.counts.answers().items())},
            "events": self.api.counts.events,
            "connections_dropped": self._server_counts.dropped(),
            "sdk": self.collector.stats(),
        }
