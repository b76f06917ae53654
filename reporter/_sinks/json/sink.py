"""The ``json`` sink as the reporter sees it: ``[sink] url``, its headers, its rate."""

from __future__ import annotations

import time
from collections.abc import Sequence

import httpx

from reporter._logging import masked_url
from reporter._senders.client import http_client
from reporter._senders.secrets import SecretFile
from reporter._settings import read_header_file
from reporter._sinks.base import Connection, Pacer, SecretSpec, Sender, Sink
from reporter._sinks.json.sender import JsonSender

# Answers that reach the endpoint but say its credentials are wrong.
REFUSED_CREDENTIALS = (401, 403, 407)


class JsonSink(Sink):
    kind = "json"

    def secret_files(self) -> list[SecretSpec]:
        return [
            SecretSpec(f"[sink] header_files.{name}", path, read_header_file, name)
            for name, path in self.config.sink.header_files.items()
        ]

    def sender(
        self,
        transport: httpx.BaseTransport | None = None,
        secrets: Sequence[SecretFile] = (),
        pacer: Pacer | None = None,
    ) -> Sender:
        return JsonSender(
            self.config.sink,
            transport,
            self.config.reporter.max_age_seconds,
            [f for f in secrets if f.header],
        )

    def check_connection(
        self,
        method: str = "HEAD",
        transport: httpx.BaseTransport | None = None,
        pacer: Pacer | None = None,
    ) -> Connection:
        """One request of ``method`` (HEAD: it sends no events) through the client ``run``
        builds: any answer proves the network path, TLS and proxy, except 401, 403 and 407,
        which say the credentials were refused."""
        sink = self.config.sink
        headers = {**sink.headers, **{f.header: f() for f in self.open_secrets()}}
        where = f"{method} {masked_url(sink.url)}"
        began = time.monotonic()
        try:
            with http_client(sink, headers, transport) as client:
                status = client.request(method, sink.url).status_code
        except httpx.HTTPError as exc:
            return Connection(False, f"{where}: {type(exc).__name__}: {exc}")
        if status in REFUSED_CREDENTIALS:
            return Connection(
                False,
                f"{where} answered HTTP {status}: the endpoint refused "
                "the credentials (check [sink] headers or the URL's)",
            )
        return Connection(
            True,
            f"{where} answered HTTP {status} in {(time.monotonic() - began) * 1000:.0f} ms "
            "(any answer shows the network path, TLS and proxy work)",
        )

    def describe(self) -> str:
        sink = self.config.sink
        return f"json {masked_url(sink.url)}" + (" (gzip)" if sink.gzip else "")

    def problems(self) -> list[str]:
        """The json sender needs ``[sink] url``."""
        if self.config.sink.url:
            return []
        return [
            f'{self.config.source}: [sink] url: required with [sink] kind = "json" (the ingest '
            "endpoint, an absolute http:// or https:// URL; set it in the file or with "
            "TELEMETRY_SINK_URL), found nothing"
        ]
