"""The SDK's settings: one frozen dataclass per TOML section it reads.

One file tunes the SDK and the reporter; the SDK reads ``[redis]``, ``[buffer]``,
``[collector]`` and ``[games]``, and leaves the reporter's sections (named in
``TelemetryConfig.OTHER_SECTIONS``) to the reporter, which defines them in
``reporter._config`` on top of these.  Defaults live here, next to their range;
``config/telemetry.toml`` documents every key and a test keeps the two in step.  Parsing and
validation are in ``_config_loader``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Self
from urllib.parse import parse_qs, urlsplit

import redis

from collector import logs
from collector._constants import CALL_BYTES
from collector._exceptions import ConfigError
from collector.logs import HIDDEN, mask, mask_headers

# where(section, key): the file or environment variable a setting came from, for errors.
Where = Callable[[str, str], str]


def setting(default: Any, *, lo: float | None = None, hi: float | None = None,
            choices: tuple[str, ...] = (), secret: bool = False,
            renamed: Mapping[str, str] | None = None) -> Any:
    """A dataclass field with its allowed range; the loader reads the metadata.  ``renamed``
    maps old values to the choices that replaced them (accepted, with a notice)."""
    meta = {"lo": lo, "hi": hi, "choices": choices, "secret": secret, "renamed": renamed}
    if isinstance(default, Mapping):
        return field(default_factory=lambda: MappingProxyType(dict(default)), metadata=meta)
    return field(default=default, metadata=meta)


class MaskedRepr:
    """Sections print with secrets masked, like the whole config."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in _section_dict(self).items())
        return f"{type(self).__name__}({fields})"


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


@dataclass(frozen=True)
class BufferSettings:
    max_events_per_game: int = setting(1000, lo=1, hi=10_000_000)
    ttl_seconds: int = setting(3600, lo=1, hi=30 * 86400)
    # An event with its 13-digit time prefix still fits in one collect call.
    max_event_bytes: int = setting(32768, lo=64, hi=CALL_BYTES - 16)


@dataclass(frozen=True)
class CollectorSettings:
    mode: str = setting("background", choices=("background", "sync"))
    max_buffer_events: int = setting(100_000, lo=1, hi=100_000_000)
    flush_interval_ms: int = setting(50, lo=1, hi=60_000)
    close_timeout_seconds: float = setting(5.0, lo=0, hi=600)
    retry_max_delay_ms: int = setting(5000, lo=10, hi=600_000)
    # Tests and local runs: collect() validates and counts, nothing is sent, nothing connects.
    disabled: bool = setting(False)


@dataclass(frozen=True)
class GameSettings:
    """Per-game overrides of ``[buffer]``; zero means "use the [buffer] value"."""

    # Keys of a [games."<name>"] table that the reporter reads (its ReporterGameSettings).
    OTHER_KEYS: ClassVar[tuple[str, ...]] = ("biz_id",)

    max_events_per_game: int = setting(0, lo=0, hi=10_000_000)
    ttl_seconds: int = setting(0, lo=0, hi=30 * 86400)


@dataclass(frozen=True)
class TelemetryConfig:
    """The SDK's settings, parsed once and never changed.

    Build it with :meth:`load` (file + environment) or :meth:`default`.  Subclasses add
    sections (the reporter's ``ReporterConfig``); every dataclass-typed field is a section.
    """

    # Sections of the shared file that belong to the reporter: skipped here, unread.
    OTHER_SECTIONS: ClassVar[tuple[str, ...]] = ("reporter", "sink", "retry", "dead", "nppa",
                                                  "metrics")

    redis: RedisSettings = field(default_factory=RedisSettings)
    buffer: BufferSettings = field(default_factory=BufferSettings)
    collector: CollectorSettings = field(default_factory=CollectorSettings)
    games: Mapping[str, GameSettings] = field(default_factory=lambda: MappingProxyType({}))
    source: str = field(default="<defaults>", compare=False)
    # What the loader wants the operator to know (deprecated names, risky choices).
    notices: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def load(cls, path: str | None = None, env: Mapping[str, str] | None = None) -> Self:
        """Read ``path`` (else ``$TELEMETRY_CONFIG``, else the packaged default) plus
        ``TELEMETRY_<SECTION>_<KEY>`` overrides; raise ``ConfigError`` naming any bad key."""
        from collector._config_loader import load_config

        return load_config(path, env, cls)

    @classmethod
    def default(cls) -> Self:
        return cls()

    def check(self, where: Where) -> None:
        """Rules that tie keys together, or need more than a range; raise ``ConfigError``
        naming the key and its origin (``where(section, key)`` is the file or the
        environment variable it came from).  A subclass adds its own."""
        from collector.store._keys import is_valid_prefix  # the store imports this module

        shards = self.redis.shards
        if shards & (shards - 1):
            raise ConfigError(
                f"{where('redis', 'shards')}: [redis] shards: expected a power of two "
                f"(1, 2, 4, ... 16384), found {shards}"
            )
        problem = redis_url_problem(self.redis.url)
        if problem is not None:
            raise ConfigError(f"{where('redis', 'url')}: [redis] url: {mask(problem)}; "
                              f"found {mask_url(self.redis.url)!r}")
        sentinel = next(sentinel_problems(self.redis), None)
        if sentinel is not None:
            key, problem = sentinel
            raise ConfigError(f"{where('redis', key)}: [redis] {key}: {problem}")
        wait_ms, socket_ms = self.redis.wait_timeout_ms, self.redis.socket_timeout_seconds * 1000
        if self.redis.wait_for_replicas and wait_ms >= socket_ms:
            raise ConfigError(
                f"{where('redis', 'wait_timeout_ms')}: [redis] wait_timeout_ms: must be "
                f"shorter than socket_timeout_seconds ({socket_ms:g} ms), or the socket times "
                f"out before WAIT answers; found {wait_ms}"
            )
        if not is_valid_prefix(self.redis.key_prefix):
            raise ConfigError(
                f"{where('redis', 'key_prefix')}: [redis] key_prefix: expected 1 to 64 "
                f"characters from [A-Za-z0-9_.:-], found {self.redis.key_prefix!r}"
            )

    def advise(self, where: Where) -> list[str]:
        """What is valid but risky, for a warning (``check-config`` prints these on stderr,
        ``run`` logs them): TLS verification switched off.  A subclass adds its own."""
        return [f"{where('redis', 'url')}: [redis] url: {notice}: anyone on the network path "
                f"can pose as the server and read the traffic, the password included"
                for notice in tls_notices(self.redis.url)]

    def cap_for(self, game: str) -> int:
        override = self.games.get(game)
        if override is not None and override.max_events_per_game:
            return override.max_events_per_game
        return self.buffer.max_events_per_game

    def ttl_for(self, game: str) -> int:
        override = self.games.get(game)
        if override is not None and override.ttl_seconds:
            return override.ttl_seconds
        return self.buffer.ttl_seconds

    def masked(self) -> dict[str, Any]:
        """The settings as plain data with passwords and secret headers hidden."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("source", "notices"):
                continue
            if f.name == "games":
                out["games"] = {g: _section_dict(s) for g, s in value.items()}
            else:
                out[f.name] = _section_dict(value)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(source={self.source!r}, {self.masked()!r})"


def mask_url(url: str) -> str:
    """A URL as it may be shown (``collector.logs.mask_url``: userinfo and credential query
    parameters hidden)."""
    return logs.mask_url(url)


def _mask(value: Any) -> Any:
    """A secret setting as it may be shown: a URL with its credentials hidden, a header
    table with the values of credential headers hidden, any other text as ``***``."""
    if isinstance(value, str):
        if not value:
            return value
        return mask_url(value) if "://" in value or "@" in value else HIDDEN
    if isinstance(value, Mapping):
        return mask_headers(value)
    return value


def _shown(value: Any) -> Any:
    """A setting that is not secret, as it may be shown: text still goes through ``mask``
    (a base URL can carry a token in its query)."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, Mapping):
        return {k: _shown(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_shown(v) for v in value)
    return value


def _section_dict(section: Any) -> dict[str, Any]:
    return {f.name: (_mask if f.metadata.get("secret") else _shown)(getattr(section, f.name))
            for f in dataclasses.fields(section)}


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
        raise ValueError(f'expected "host:port" with a port from 1 to 65535, found '
                         f"{mask_url(address)!r}")
    if any(c.isspace() or c in "/@?#" for c in host):
        raise ValueError(f"not a host name or address: {mask_url(address)!r}")
    return host, int(port)


def sentinel_problems(settings: RedisSettings) -> Iterator[tuple[str, str]]:
    """Each key with what is wrong with the Sentinel settings: they select the Sentinel
    backend only all together, never with ``cluster``."""
    if not settings.sentinels:
        for key in ("sentinel_service", "sentinel_password"):
            if getattr(settings, key):
                yield key, ("set, but [redis] sentinels is empty: list the sentinels' "
                            '"host:port" addresses to use Redis through Sentinel')
        return
    if settings.cluster:
        yield "sentinels", ("set together with cluster = true: choose one (Redis Cluster "
                            "has no sentinels; Sentinel manages a primary and its replicas)")
    for address in settings.sentinels:
        try:
            sentinel_address(address)
        except ValueError as exc:
            yield "sentinels", str(exc)
    if len(set(settings.sentinels)) != len(settings.sentinels):
        yield "sentinels", "the same address is listed twice"
    if not settings.sentinel_service.strip():
        yield "sentinel_service", ("expected the name the sentinels monitor the primary "
                                   "under (sentinel monitor <name> ...), found none")
    if settings.url.startswith("unix://"):
        yield "url", ("a unix:// socket cannot be used with sentinels (they name the "
                      "primary by host and port); use redis:// or rediss://")


def tls_notices(url: str) -> list[str]:
    """What a Redis URL switches off of TLS verification, for a warning."""
    options = {k: v[0].lower() for k, v in parse_qs(urlsplit(url).query).items()}
    notices = []
    if options.get("ssl_cert_reqs") == "none":
        notices.append("ssl_cert_reqs=none switches TLS certificate verification off")
    if options.get("ssl_check_hostname") in ("0", "f", "false", "n", "no"):  # as redis-py reads
        notices.append("ssl_check_hostname=false switches TLS host name verification off")
    return notices
