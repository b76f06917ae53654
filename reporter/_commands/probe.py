"""``check-config --connect``: does Redis answer, and does the sink?

Each probe says ok or failed in one line (secrets masked).  Redis gets a PING through the
backend ``run`` would use.  The sink gets one request of a method that sends no events
(HEAD by default), through the same client ``run`` builds (TLS files, client certificate,
proxy, configured headers): any HTTP answer proves the network path, TLS and proxy, except
401, 403 and 407, which say the credentials were refused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from collector import BackendError
from collector.store import describe_settings, open_store
from reporter._config import ReporterConfig
from reporter._logging import masked_url
from reporter._senders.client import http_client

# Answers that reach the endpoint but say its credentials are wrong.
REFUSED_CREDENTIALS = (401, 403, 407)


@dataclass(frozen=True)
class Probe:
    target: str  # "redis" or "sink"
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{self.target}: {'ok' if self.ok else 'failed'}: {self.detail}"


def probe_redis(config: ReporterConfig) -> Probe:
    where = describe_settings(config.redis)
    began = time.monotonic()
    try:
        store = open_store(config.redis)
        try:
            store.ping()
        finally:
            store.close()
    except BackendError as exc:
        return Probe("redis", False, str(exc))  # it names the server
    return Probe("redis", True, f"{where} answered PING in {_ms(began)}")


def probe_sink(config: ReporterConfig, method: str = "HEAD",
               transport: httpx.BaseTransport | None = None) -> Probe:
    if config.sink.kind == "nppa":
        from reporter._senders.nppa import endpoint_url

        url, headers = endpoint_url(config.nppa.base_url), {}
    else:
        url, headers = config.sink.url, dict(config.sink.headers)
    where = f"{method} {masked_url(url)}"
    began = time.monotonic()
    try:
        with http_client(config.sink, headers, transport) as client:
            status = client.request(method, url).status_code
    except httpx.HTTPError as exc:
        return Probe("sink", False, f"{where}: {type(exc).__name__}: {exc}")
    if status in REFUSED_CREDENTIALS:
        return Probe("sink", False, f"{where} answered HTTP {status}: the endpoint refused "
                                    "the credentials (check [sink] headers or the URL's)")
    return Probe("sink", True, f"{where} answered HTTP {status} in {_ms(began)} (any "
                               "answer shows the network path, TLS and proxy work)")


def _ms(began: float) -> str:
    return f"{(time.monotonic() - began) * 1000:.0f} ms"
