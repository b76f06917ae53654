"""The keep-alive ``httpx.Client`` every sender uses, built from ``[sink]``."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from reporter._config import SinkSettings
from reporter._transport import SocketTransport

USER_AGENT = "telemetry-reporter/0.1"


def http_client(settings: SinkSettings, headers: Mapping[str, str],
                transport: httpx.BaseTransport | None = None) -> httpx.Client:
    """A client with ``[sink]``'s timeouts, connection bound and transport (``builtin``: the
    reporter's own keep-alive pool; ``httpx``: httpcore, with proxies from the
    environment), sending ``headers`` (and a User-Agent) on every request."""
    if transport is None and settings.transport == "builtin":
        transport = SocketTransport(settings.connect_timeout_seconds, settings.timeout_seconds,
                                    settings.max_connections)
    return httpx.Client(
        headers={"User-Agent": USER_AGENT, **headers},
        timeout=request_timeout(settings),
        limits=httpx.Limits(max_connections=settings.max_connections,
                            max_keepalive_connections=settings.max_connections),
        transport=transport,
        trust_env=settings.transport == "httpx",
    )


def request_timeout(settings: SinkSettings) -> httpx.Timeout:
    return httpx.Timeout(settings.timeout_seconds, connect=settings.connect_timeout_seconds)
