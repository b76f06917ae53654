"""The reporter's settings: its sections of the shared file on top of the SDK's.

``ReporterConfig`` is a ``TelemetryConfig`` (so a demo or test can hand it to a
``Collector``) with ``[reporter]``, ``[sink]``, ``[retry]`` and ``[dead]`` added, loaded and
validated by the same loader (``collector.config``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from collector import ConfigError
from collector.config import MaskedRepr, TelemetryConfig, Where, setting
from collector.store import validate_game


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
    hot_games: Mapping[str, int] = setting({}, lo=1, hi=64)


@dataclass(frozen=True, repr=False)
class SinkSettings(MaskedRepr):
    kind: str = setting("json", choices=("json",))
    url: str = setting("http://127.0.0.1:8080/ingest", secret=True)
    timeout_seconds: float = setting(5.0, lo=0.05, hi=300)
    connect_timeout_seconds: float = setting(2.0, lo=0.05, hi=300)
    max_connections: int = setting(32, lo=1, hi=1000)
    gzip: bool = setting(False)
    transport: str = setting("builtin", choices=("builtin", "httpx"),
                             renamed={"stdlib": "builtin"})
    headers: Mapping[str, str] = setting({}, secret=True)
    requests_per_second: float = setting(0.0, lo=0, hi=1_000_000)
    request_burst: int = setting(1, lo=1, hi=100_000)
    rate_limit_scope: str = setting("shared", choices=("shared", "process"))


@dataclass(frozen=True)
class RetrySettings:
    initial_delay_ms: int = setting(1000, lo=1, hi=3_600_000)
    max_delay_ms: int = setting(60_000, lo=1, hi=3_600_000)
    max_attempts: int = setting(16, lo=1, hi=1000)


@dataclass(frozen=True)
class DeadSettings:
    max_batches: int = setting(10_000, lo=1, hi=10_000_000)


@dataclass(frozen=True, repr=False)
class ReporterConfig(TelemetryConfig):
    """Every setting of the file: the SDK's sections and the reporter's."""

    OTHER_SECTIONS: ClassVar[tuple[str, ...]] = ()

    reporter: ReporterSettings = field(default_factory=ReporterSettings)
    sink: SinkSettings = field(default_factory=SinkSettings)
    retry: RetrySettings = field(default_factory=RetrySettings)
    dead: DeadSettings = field(default_factory=DeadSettings)

    def check(self, where: Where) -> None:
        super().check(where)
        max_age = self.reporter.max_age_seconds
        ttls = [(where("buffer", "ttl_seconds"), "[buffer] ttl_seconds",
                 self.buffer.ttl_seconds)]
        ttls += [(self.source, f'[games."{g}"] ttl_seconds', s.ttl_seconds)
                 for g, s in self.games.items() if s.ttl_seconds]
        for origin, key, ttl in ttls:
            if ttl <= max_age:
                raise ConfigError(
                    f"{origin}: {key}: expected more than [reporter] max_age_seconds "
                    f"({max_age:g}) so a buffer never expires before its events go stale, "
                    f"found {ttl}"
                )
        if self.reporter.linger_ms >= max_age * 1000:
            raise ConfigError(
                f"{where('reporter', 'linger_ms')}: [reporter] linger_ms: expected less than "
                f"max_age_seconds * 1000 ({max_age * 1000:g}), found {self.reporter.linger_ms}"
            )
        if self.retry.initial_delay_ms > self.retry.max_delay_ms:
            raise ConfigError(
                f"{where('retry', 'initial_delay_ms')}: [retry] initial_delay_ms: expected at "
                f"most max_delay_ms ({self.retry.max_delay_ms}), found "
                f"{self.retry.initial_delay_ms}"
            )
        for game in self.reporter.hot_games:
            try:
                validate_game(game)
            except ValueError as exc:
                raise ConfigError(
                    f"{where('reporter', 'hot_games')}: [reporter.hot_games] {exc}") from None
