"""The SDK's settings: one frozen dataclass per TOML section it reads.

One file tunes the SDK and the reporter; the SDK reads ``[redis]``, ``[buffer]``,
``[collector]`` and ``[games]``, and leaves the reporter's sections (named in
``TelemetryConfig.OTHER_SECTIONS``) to the reporter, which defines them in
``reporter._config`` on top of these.  Defaults live next to their range: here, and for
``[redis]`` with the store that is built from it (``collector.store.RedisSettings``).
``config/telemetry.toml`` documents every key and a test keeps the two in step.  Parsing and
validation are in ``_config_loader``, which knows config classes by their shape only.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Self, TypeVar

from collector import _config_loader
from collector._constants import CALL_BYTES
from collector._exceptions import ConfigError
from collector._sections import Where, section_dict, setting
from collector.store import RedisSettings, redis_problems, tls_notices

C = TypeVar("C", bound="TelemetryConfig")


@dataclass(frozen=True)
class BufferSettings:
    max_events_per_game: int = setting(1000, lo=1, hi=10_000_000)
    ttl_seconds: int = setting(3600, lo=1, hi=30 * 86400)
    # An event with its 13-digit time prefix still fits in one collect call.
    max_event_bytes: int = setting(32768, lo=64, hi=CALL_BYTES - 16)
    # Fields whose values make an event's dedup key (none: no key unless collect() is given
    # one); within the window a second event of a game with the same key is merged.
    dedup_fields: tuple[str, ...] = setting(())
    dedup_window_seconds: int = setting(180, lo=1, hi=86400)


@dataclass(frozen=True)
class CollectorSettings:
    mode: str = setting("background", choices=("background", "sync"))
    max_buffer_events: int = setting(100_000, lo=1, hi=100_000_000)
    # Bytes of entries (event JSON and time) the in-process buffer holds: 100,000 events of
    # 32 KB would be 3.3 GB inside a game server during a Redis outage.
    max_buffer_bytes: int = setting(64 * 1024 * 1024, lo=64 * 1024, hi=64 * 1024**3)
    flush_interval_ms: int = setting(50, lo=1, hi=60_000)
    close_timeout_seconds: float = setting(5.0, lo=0, hi=600)
    retry_max_delay_ms: int = setting(5000, lo=10, hi=600_000)
    # Sync mode: how long collect() sends a write whose outcome is unknown again (same writer
    # id and number: a repeat is not stored twice) before it raises BackendUnconfirmed.
    sync_resend_seconds: float = setting(5.0, lo=0, hi=600)
    # Tests and local runs: collect() validates and counts, nothing is sent, nothing connects.
    disabled: bool = setting(False)


@dataclass(frozen=True)
class GameSettings:
    """Per-game overrides of ``[buffer]``; zero means "use the [buffer] value"."""

    # Keys of a [games."<name>"] table that the reporter reads (its ReporterGameSettings).
    OTHER_KEYS: ClassVar[tuple[str, ...]] = ("biz_id", "priority")

    max_events_per_game: int = setting(0, lo=0, hi=10_000_000)
    ttl_seconds: int = setting(0, lo=0, hi=30 * 86400)
    dedup_fields: tuple[str, ...] = setting(())  # empty: the [buffer] ones
    dedup_window_seconds: int = setting(0, lo=0, hi=86400)


# ``TelemetryConfig.source`` of the built-in defaults (no file read at all).
DEFAULTS_SOURCE = "<defaults>"


@dataclass(frozen=True)
class TelemetryConfig:
    """The SDK's settings, parsed once and never changed.

    Build it with :meth:`load` (file + environment) or :meth:`default`.  Subclasses add
    sections (the reporter's ``ReporterConfig``); every dataclass-typed field is a section.
    """

    # Sections of the shared file that belong to the reporter: skipped here, unread.
    OTHER_SECTIONS: ClassVar[tuple[str, ...]] = (
        "reporter",
        "sink",
        "retry",
        "dead",
        "nppa",
        "metrics",
        "ingest",
    )

    redis: RedisSettings = field(default_factory=RedisSettings)
    buffer: BufferSettings = field(default_factory=BufferSettings)
    collector: CollectorSettings = field(default_factory=CollectorSettings)
    games: Mapping[str, GameSettings] = field(default_factory=lambda: MappingProxyType({}))
    source: str = field(default=DEFAULTS_SOURCE, compare=False)
    # What the loader wants the operator to know (deprecated names, risky choices).
    notices: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def load(cls, path: str | None = None, env: Mapping[str, str] | None = None) -> Self:
        """Read ``path`` (else ``$TELEMETRY_CONFIG``, else the packaged default) plus
        ``TELEMETRY_<SECTION>_<KEY>`` overrides; raise ``ConfigError`` naming any bad key."""
        return _config_loader.load_config(path, env, cls)

    @classmethod
    def default(cls) -> Self:
        return cls()

    def unconfigured(self) -> bool:
        """Built-in or packaged defaults with the default Redis URL: nobody said which Redis
        (no file, no ``$TELEMETRY_CONFIG``, no ``TELEMETRY_REDIS_URL``, no ``url=``)."""
        return (
            self.source in (DEFAULTS_SOURCE, _config_loader.PACKAGED_SOURCE)
            and self.redis.url == RedisSettings().url
        )

    def check(self, where: Where) -> None:
        """Rules that tie keys together, or need more than a range; raise ``ConfigError``
        naming the key and its origin (``where(section, key)`` is the file or the
        environment variable it came from).  A subclass adds its own."""
        problem = next(redis_problems(self.redis), None)
        if problem is not None:
            key, text = problem
            raise ConfigError(f"{where('redis', key)}: [redis] {key}: {text}")
        if self.collector.max_buffer_bytes < 2 * self.buffer.max_event_bytes:
            raise ConfigError(
                f"{where('collector', 'max_buffer_bytes')}: [collector] max_buffer_bytes: "
                f"expected at least twice [buffer] max_event_bytes "
                f"({2 * self.buffer.max_event_bytes}) so the largest events fit, found "
                f"{self.collector.max_buffer_bytes}"
            )
        tables = [("buffer", "[buffer]", self.buffer.dedup_fields)]
        tables += [("games", f'[games."{game}"]', s.dedup_fields) for game, s in self.games.items()]
        for section, table, fields in tables:
            wrong = _dedup_fields_problem(fields)
            if wrong is not None:
                raise ConfigError(
                    f"{where(section, 'dedup_fields')}: {table} dedup_fields: {wrong}"
                )

    def advise(self, where: Where) -> list[str]:
        """What is valid but risky, for a warning (``check-config`` prints these on stderr,
        ``run`` logs them): TLS verification switched off.  A subclass adds its own."""
        return [
            f"{where('redis', 'url')}: [redis] url: {notice}: anyone on the network path "
            f"can pose as the server and read the traffic, the password included"
            for notice in tls_notices(self.redis.url)
        ]

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

    def dedup_window_for(self, game: str) -> int:
        """The game's dedup window in seconds."""
        override = self.games.get(game)
        if override is not None and override.dedup_window_seconds:
            return override.dedup_window_seconds
        return self.buffer.dedup_window_seconds

    def masked(self) -> dict[str, Any]:
        """The settings as plain data with passwords and secret headers hidden."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("source", "notices"):
                continue
            if f.name == "games":
                out["games"] = {g: section_dict(s) for g, s in value.items()}
            elif f.name == _config_loader.PLUGGED:
                out.update({name: section_dict(s) for name, s in value.items()})
            else:
                out[f.name] = section_dict(value)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(source={self.source!r}, {self.masked()!r})"


def _dedup_fields_problem(fields: tuple[str, ...]) -> str | None:
    """What is wrong with a list of dedup fields, if anything."""
    for name in fields:
        if not name.strip():
            return f"expected field names, found an empty one in {list(fields)!r}"
    if len(set(fields)) != len(fields):
        return f"a field is named twice in {list(fields)!r}"
    return None


def load_config(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    cls: type[C] = TelemetryConfig,  # type: ignore[assignment]
) -> C:
    """``cls.load(path, env)``: the file (else ``$TELEMETRY_CONFIG``, else the packaged
    default) plus environment overrides, validated."""
    return _config_loader.load_config(path, env, cls)


def build_config(
    raw: Mapping[str, Any],
    source: str,
    env: Mapping[str, str] | None = None,
    *,
    interpolate: bool = True,
    cls: type[C] = TelemetryConfig,  # type: ignore[assignment]
) -> C:
    """Validate already-parsed data (from TOML or keyword arguments) into a ``cls``;
    ``source`` names it in errors."""
    return _config_loader.build_config(raw, source, env, interpolate=interpolate, cls=cls)
