"""The settings model: one frozen dataclass per TOML section.

Defaults live here, next to their range; ``config/telemetry.toml`` documents every key and a
test keeps the two in step.  Parsing and validation are in ``_config_loader``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def setting(default: Any, *, lo: float | None = None, hi: float | None = None,
            choices: tuple[str, ...] = (), secret: bool = False) -> Any:
    """A dataclass field with its allowed range; the loader reads the metadata."""
    meta = {"lo": lo, "hi": hi, "choices": choices, "secret": secret}
    if isinstance(default, Mapping):
        return field(default_factory=lambda: MappingProxyType(dict(default)), metadata=meta)
    return field(default=default, metadata=meta)


class _MaskedRepr:
    """Sections print with secrets masked, like the whole config."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in _section_dict(self).items())
        return f"{type(self).__name__}({fields})"


@dataclass(frozen=True, repr=False)
class RedisSettings(_MaskedRepr):
    url: str = setting("redis://127.0.0.1:6379/0", secret=True)
    cluster: bool = setting(False)
    key_prefix: str = setting("telemetry")
    shards: int = setting(16, lo=1, hi=16384)
    socket_timeout_seconds: float = setting(2.0, lo=0.01, hi=300)
    connect_timeout_seconds: float = setting(2.0, lo=0.01, hi=300)
    retries: int = setting(1, lo=0, hi=10)
    health_check_interval_seconds: int = setting(30, lo=0, hi=3600)


@dataclass(frozen=True)
class BufferSettings:
    max_events_per_game: int = setting(1000, lo=1, hi=10_000_000)
    ttl_seconds: int = setting(3600, lo=1, hi=30 * 86400)
    max_event_bytes: int = setting(32768, lo=64, hi=16 * 1024 * 1024)


@dataclass(frozen=True)
class CollectorSettings:
    mode: str = setting("background", choices=("background", "sync"))
    max_buffer_events: int = setting(100_000, lo=1, hi=100_000_000)
    flush_interval_ms: int = setting(50, lo=1, hi=60_000)
    close_timeout_seconds: float = setting(5.0, lo=0, hi=600)
    retry_max_delay_ms: int = setting(5000, lo=10, hi=600_000)


@dataclass(frozen=True)
class GameSettings:
    """Per-game overrides of ``[buffer]``; zero means "use the [buffer] value"."""

    max_events_per_game: int = setting(0, lo=0, hi=10_000_000)
    ttl_seconds: int = setting(0, lo=0, hi=30 * 86400)


@dataclass(frozen=True)
class ReporterSettings:
    batch_size: int = setting(128, lo=1, hi=128)
    max_age_seconds: float = setting(180.0, lo=1, hi=86400)
    linger_ms: int = setting(1000, lo=0, hi=600_000)
    poll_interval_ms: int = setting(100, lo=5, hi=60_000)
    workers: int = setting(4, lo=1, hi=256)
    max_batches_per_claim: int = setting(8, lo=1, hi=64)
    games_per_sweep: int = setting(256, lo=1, hi=100_000)
    lease_seconds: float = setting(30.0, lo=1, hi=3600)
    shard_lease_seconds: float = setting(10.0, lo=1, hi=600)
    grace_seconds: float = setting(10.0, lo=0, hi=600)
    event_time_field: str = setting("")
    event_time_unit: str = setting("ms", choices=("s", "ms"))
    hot_games: Mapping[str, int] = setting(_EMPTY, lo=1, hi=64)


@dataclass(frozen=True, repr=False)
class SinkSettings(_MaskedRepr):
    kind: str = setting("json", choices=("json",))
    url: str = setting("http://127.0.0.1:8080/ingest", secret=True)
    timeout_seconds: float = setting(5.0, lo=0.05, hi=300)
    connect_timeout_seconds: float = setting(2.0, lo=0.05, hi=300)
    max_connections: int = setting(32, lo=1, hi=1000)
    gzip: bool = setting(False)
    transport: str = setting("stdlib", choices=("stdlib", "httpx"))
    headers: Mapping[str, str] = setting(_EMPTY, secret=True)


@dataclass(frozen=True)
class RetrySettings:
    initial_delay_ms: int = setting(1000, lo=1, hi=3_600_000)
    max_delay_ms: int = setting(60_000, lo=1, hi=3_600_000)
    max_attempts: int = setting(16, lo=1, hi=1000)


@dataclass(frozen=True)
class DeadSettings:
    max_batches: int = setting(10_000, lo=1, hi=10_000_000)


@dataclass(frozen=True)
class TelemetryConfig:
    """Every setting of the collector and the reporter, parsed once and never changed.

    Build it with :meth:`load` (file + environment) or :meth:`default`.
    """

    redis: RedisSettings = field(default_factory=RedisSettings)
    buffer: BufferSettings = field(default_factory=BufferSettings)
    collector: CollectorSettings = field(default_factory=CollectorSettings)
    games: Mapping[str, GameSettings] = field(default_factory=lambda: MappingProxyType({}))
    reporter: ReporterSettings = field(default_factory=ReporterSettings)
    sink: SinkSettings = field(default_factory=SinkSettings)
    retry: RetrySettings = field(default_factory=RetrySettings)
    dead: DeadSettings = field(default_factory=DeadSettings)
    source: str = field(default="<defaults>", compare=False)

    @classmethod
    def load(cls, path: str | None = None, env: Mapping[str, str] | None = None
             ) -> TelemetryConfig:
        """Read ``path`` (else ``$TELEMETRY_CONFIG``, else the packaged default) plus
        ``TELEMETRY_<SECTION>_<KEY>`` overrides; raise ``ConfigError`` naming any bad key."""
        from collector._config_loader import load_config

        return load_config(path, env)

    @classmethod
    def default(cls) -> TelemetryConfig:
        return cls()

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
            if f.name == "source":
                continue
            if f.name == "games":
                out["games"] = {g: _section_dict(s) for g, s in value.items()}
            else:
                out[f.name] = _section_dict(value)
        return out

    def __repr__(self) -> str:
        return f"TelemetryConfig(source={self.source!r}, {self.masked()!r})"


_SECRET_HEADER_WORDS = ("auth", "token", "key", "secret", "cookie", "sign", "password")


def mask_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _mask(value: Any) -> Any:
    if isinstance(value, str):
        return mask_url(value)
    if isinstance(value, Mapping):
        return {
            k: ("***" if any(w in k.lower() for w in _SECRET_HEADER_WORDS) else v)
            for k, v in value.items()
        }
    return value


def _section_dict(section: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if f.metadata.get("secret"):
            value = _mask(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.name] = value
    return out
