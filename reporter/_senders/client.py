"""The keep-alive ``httpx.Client`` every sender uses, built from ``[sink]``."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httpx

from collector import ConfigError
from reporter._http.transport import NEED_BODY, Proxy, SocketTransport
from reporter._settings import SinkSettings

__all__ = [
    "NEED_BODY",
    "USER_AGENT",
    "SinkClient",
    "http_client",
    "request_timeout",
    "sink_client",
    "ssl_context",
]

USER_AGENT = "telemetry-reporter/0.1"
# Proxy schemes httpx's transport takes (socks5 needs the socksio package).
HTTPX_PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")


class SinkClient(NamedTuple):
    """The ``httpx.Client`` and, unless httpx's own transport is in use, the transport under
    it, for requests built in full by their sender (see ``JsonSender``)."""

    client: httpx.Client
    transport: httpx.BaseTransport | None


def http_client(
    settings: SinkSettings, headers: Mapping[str, str], transport: httpx.BaseTransport | None = None
) -> httpx.Client:
    """``sink_client(...).client``."""
    return sink_client(settings, headers, transport).client


def sink_client(
    settings: SinkSettings, headers: Mapping[str, str], transport: httpx.BaseTransport | None = None
) -> SinkClient:
    """A client with ``[sink]``'s timeouts, connection bound, TLS, proxy and transport
    (``builtin``: the reporter's own keep-alive pool, with ``[sink] proxy`` if set; ``httpx``:
    httpcore, with ``[sink] proxy`` or else proxies from the environment), sending
    ``headers`` (and a User-Agent) on every request.  Unusable TLS files or proxy: a
    ``ConfigError`` naming the key."""
    tls = ssl_context(settings)
    builtin = settings.transport == "builtin"
    proxy = _proxy(settings)
    options: dict[str, Any] = {}
    if transport is None and builtin:
        transport = SocketTransport(
            settings.connect_timeout_seconds,
            settings.timeout_seconds,
            settings.max_connections,
            keepalive_expiry=settings.keepalive_expiry_seconds,
            ssl_context=tls,
            proxy=proxy,
        )
    elif transport is None:
        options = {"verify": tls if tls is not None else True, "proxy": settings.proxy or None}
    client = httpx.Client(
        headers={"User-Agent": USER_AGENT, **headers},
        timeout=request_timeout(settings),
        limits=httpx.Limits(
            max_connections=settings.max_connections,
            max_keepalive_connections=settings.max_connections,
            keepalive_expiry=settings.keepalive_expiry_seconds,
        ),
        transport=transport,
        trust_env=not builtin,
        **options,
    )
    # httpx's transport may be one of several (proxies mounted from the environment).
    return SinkClient(client, transport if builtin else None)


def request_timeout(settings: SinkSettings) -> httpx.Timeout:
    return httpx.Timeout(settings.timeout_seconds, connect=settings.connect_timeout_seconds)


def ssl_context(settings: SinkSettings) -> ssl.SSLContext | None:
    """The TLS context ``[sink] ca_file`` and the client certificate ask for; None when
    neither is set (the default verification).  Verification itself is never switched off."""
    if not (settings.ca_file or settings.client_cert_file or settings.client_key_file):
        return None
    try:
        context = ssl.create_default_context(cafile=settings.ca_file or None)
    except OSError as exc:  # ssl.SSLError is an OSError
        raise ConfigError(
            f"[sink] ca_file: cannot load {settings.ca_file!r} as a PEM CA bundle: {_why(exc)}"
        ) from None
    if settings.client_key_file and not settings.client_cert_file:
        raise ConfigError(
            "[sink] client_key_file: set client_cert_file too (the key alone "
            "is no client certificate)"
        )
    if settings.client_cert_file:
        try:
            context.load_cert_chain(
                settings.client_cert_file, settings.client_key_file or None, password=_no_password
            )
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            files = ", ".join(
                repr(f) for f in (settings.client_cert_file, settings.client_key_file) if f
            )
            raise ConfigError(
                f"[sink] client_cert_file: cannot load the client certificate and key from "
                f"{files} (PEM, the key unencrypted): {_why(exc)}"
            ) from None
    return context


def _proxy(settings: SinkSettings) -> Proxy | None:
    """The builtin transport's proxy; for httpx's transport, only the URL is checked."""
    if not settings.proxy:
        return None
    scheme = urlsplit(settings.proxy).scheme
    if settings.transport != "builtin":
        if scheme not in HTTPX_PROXY_SCHEMES:
            raise ConfigError(
                f"[sink] proxy: expected a URL with one of the schemes "
                f"{', '.join(HTTPX_PROXY_SCHEMES)}, found scheme {scheme!r}"
            )
        return None
    try:
        return Proxy.parse(settings.proxy)
    except ValueError as exc:
        raise ConfigError(
            f'[sink] proxy: {exc} (transport = "builtin" speaks to http:// '
            'proxies; for others set transport = "httpx")'
        ) from None


def _no_password() -> bytes:
    raise ValueError("the key is encrypted")


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
