"""The settings the store is built from: ``[redis]``, and the checks that need more than a
range (a URL redis-py would refuse, the Sentinel keys, TLS verification switched off).

They live with the store, so the store depends on nothing above it; the SDK's config
(``collector.config``) re-exports ``RedisSettings`` as one of its sections.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

import redis

from collector._sections import MaskedRepr, setting
from collector.logs import mask, mask_url
from collector.store._keys import is_valid_prefix


@dataclass(frozen=True, repr=False)
class RedisSettings(MaskedRepr):
    url: str = setting("redis://127.0.0.1:6379/0", secret=True)
    cluster: bool = setting(False)
    key_prefix: str = setting("telemetry")
    shards: int = setting(16, lo=1, hi=16384)
    socket_timeout_seconds: float = setting(2.0, lo=0.01, hi=300)
    connect_timeout_seconds: float = setting(2.0, lo=0.01, hi=300)
    retries: int = setting(1, lo=0, hi=10)
    health_check_interval_seconds: int = setting(30, lo=0, hi=3600)
    # Redis managed by Sentinel: the sentinels' "host:port" addresses (empty: not Sentinel),
    # the service (master) name they monitor, and the password the sentinels ask for (the
    # data nodes' credentials, database and TLS options stay in ``url``).
    sentinels: tuple[str, ...] = setting(())
    sentinel_service: str = setting("")
    sentinel_password: str = setting("", secret=True)
    # Replicas that must confirm (WAIT) the SDK's writes, claims and acks; 0: no WAIT at all.
    wait_for_replicas: int = setting(0, lo=0, hi=16)
    wait_timeout_ms: int = setting(500, lo=1, hi=60_000)

    @property
    def receipt_ms(self) -> int:
        """How long a script keeps its receipt (``lua/_guard.lua``): twice the longest a
        client may take to send a call again after it ran (each of its ``1 + retries`` tries
        waits at most a connect and a socket timeout, with up to 1 s of backoff between
        them), and at least ``RECEIPT_MS_LEAST``."""
        tries = 1 + self.retries
        resend = tries * (self.connect_timeout_seconds + self.socket_timeout_seconds) + self.retries
        return max(RECEIPT_MS_LEAST, int(2000 * resend))


# Receipts live at least this long (ms), whatever the timeouts (see RedisSettings.receipt_ms).
RECEIPT_MS_LEAST = 30_000


def redis_url_problem(url: str) -> str | None:
    """What redis-py would refuse about ``url`` when it first connects, found without
    connecting: a bad port or host, an unknown or malformed query option, a database that is
    not a number.  None if it would take it."""
    if not url.startswith(("redis://", "rediss://", "unix://")):
        return "expected a redis://, rediss:// or unix:// URL"
    try:
        client = redis.Redis.from_url(url)
        try:
            client.connection_pool.make_connection()  # builds it; connects on first use
        finally:
            client.close()
    except TypeError as exc:  # a query option no connection takes
        option = re.search(r"argument '(\w+)'", str(exc))
        return f"unknown option {option.group(1) if option else '?'!r} in the query"
    except (ValueError, redis.RedisError) as exc:
        return str(exc)
    db = urlsplit(url).path.strip("/")
    if db and not url.startswith("unix://") and not db.isdigit():  # redis-py would use db 0
        return "the database (the path after the host) must be a number"
    return None


def sentinel_address(address: str) -> tuple[str, int]:
    """A sentinel's ``"host:port"`` (``"[::1]:26379"`` for IPv6) as a pair; ValueError
    saying what is wrong."""
    host, colon, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f'expected "host:port" with a port from 1 to 65535, found {mask_url(address)!r}'
        )
    if any(c.isspace() or c in "/@?#" for c in host):
        raise ValueError(f"not a host name or address: {mask_url(address)!r}")
    return host, int(port)


def sentinel_problems(settings: RedisSettings) -> Iterator[tuple[str, str]]:
    """Each key with what is wrong with the Sentinel settings: they select the Sentinel
    backend only all together, never with ``cluster``."""
    if not settings.sentinels:
        for key in ("sentinel_service", "sentinel_password"):
            if getattr(settings, key):
                yield (
                    key,
                    (
                        "set, but [redis] sentinels is empty: list the sentinels' "
                        '"host:port" addresses to use Redis through Sentinel'
                    ),
                )
        return
    if settings.cluster:
        yield (
            "sentinels",
            (
                "set together with cluster = true: choose one (Redis Cluster "
                "has no sentinels; Sentinel manages a primary and its replicas)"
            ),
        )
    for address in settings.sentinels:
        try:
            sentinel_address(address)
        except ValueError as exc:
            yield "sentinels", str(exc)
    if len(set(settings.sentinels)) != len(settings.sentinels):
        yield "sentinels", "the same address is listed twice"
    if not settings.sentinel_service.strip():
        yield (
            "sentinel_service",
            (
                "expected the name the sentinels monitor the primary "
                "under (sentinel monitor <name> ...), found none"
            ),
        )
    if settings.url.startswith("unix://"):
        yield (
            "url",
            (
                "a unix:// socket cannot be used with sentinels (they name the "
                "primary by host and port); use redis:// or rediss://"
            ),
        )


def tls_notices(url: str) -> list[str]:
    """What a Redis URL switches off of TLS verification, for a warning."""
    options = {k: v[0].lower() for k, v in parse_qs(urlsplit(url).query).items()}
    notices = []
    if options.get("ssl_cert_reqs") == "none":
        notices.append("ssl_cert_reqs=none switches TLS certificate verification off")
    if options.get("ssl_check_hostname") in ("0", "f", "false", "n", "no"):  # as redis-py reads
        notices.append("ssl_check_hostname=false switches TLS host name verification off")
    return notices


def redis_problems(settings: RedisSettings) -> Iterator[tuple[str, str]]:
    """Each key of ``[redis]`` with what is wrong with it beyond its range, in the order the
    config reports them (it names the first)."""
    shards = settings.shards
    if shards & (shards - 1):
        yield "shards", f"expected a power of two (1, 2, 4, ... 16384), found {shards}"
    problem = redis_url_problem(settings.url)
    if problem is not None:
        yield "url", f"{mask(problem)}; found {mask_url(settings.url)!r}"
    yield from sentinel_problems(settings)
    wait_ms, socket_ms = settings.wait_timeout_ms, settings.socket_timeout_seconds * 1000
    if settings.wait_for_replicas and wait_ms >= socket_ms:
        yield (
            "wait_timeout_ms",
            (
                f"must be shorter than socket_timeout_seconds ({socket_ms:g} "
                f"ms), or the socket times out before WAIT answers; found "
                f"{wait_ms}"
            ),
        )
    if not is_valid_prefix(settings.key_prefix):
        yield (
            "key_prefix",
            (f"expected 1 to 64 characters from [A-Za-z0-9_.:-], found {settings.key_prefix!r}"),
        )
