"""The reporter's config: the SDK's sections, the reporter's own (``reporter._settings``) and
the sink kinds' (each kind's ``settings``, plugged in from ``reporter._sinks.registry``).

``ReporterConfig`` is a ``TelemetryConfig`` (so a demo or test can hand it to a
``Collector``) with ``[reporter]``, ``[sink]``, ``[retry]``, ``[dead]``, ``[metrics]`` and
``[ingest]`` added, and every sink kind's section (``[nppa]``, ``[sink.ndjson]``, ...),
loaded and validated by the same loader (``collector.config``).  What ties keys together is checked
here; what only the configured sink needs is the sink's (``Sink.check``, ``Sink.advise``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

from collector import ConfigError
from collector.config import TelemetryConfig, Where
from collector.retry import RetrySettings
from collector.store import validate_game
from reporter._settings import (
    DeadSettings,
    IngestSettings,
    MetricsSettings,
    ReporterGameSettings,
    ReporterSettings,
    SinkSettings,
    check_ingest,
    check_sink,
    http_url_problem,
    ingest_advice,
    listen_address,
    read_header_file,
    read_token_file,
)
from reporter._sinks.registry import SINKS, make_sink, sink_sections

__all__ = [
    "DeadSettings",
    "IngestSettings",
    "MetricsSettings",
    "ReporterConfig",
    "ReporterGameSettings",
    "ReporterSettings",
    "RetrySettings",
    "SinkSettings",
    "http_url_problem",
    "listen_address",
    "read_header_file",
    "read_token_file",
    "sink_problems",
]

S = TypeVar("S")
PLUGGED_SECTIONS = sink_sections()


@dataclass(frozen=True, repr=False)
class ReporterConfig(TelemetryConfig):
    """Every setting of the file: the SDK's sections, the reporter's, the sink kinds'."""

    OTHER_SECTIONS: ClassVar[tuple[str, ...]] = ()
    PLUGGED_SECTIONS: ClassVar[Mapping[str, type]] = PLUGGED_SECTIONS

    games: Mapping[str, ReporterGameSettings] = field(default_factory=lambda: MappingProxyType({}))
    reporter: ReporterSettings = field(default_factory=ReporterSettings)
    sink: SinkSettings = field(default_factory=SinkSettings)
    retry: RetrySettings = field(default_factory=RetrySettings)
    dead: DeadSettings = field(default_factory=DeadSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    ingest: IngestSettings = field(default_factory=IngestSettings)
    # The sink kinds' sections, by name (see PLUGGED_SECTIONS); read them with section().
    plugged: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({n: c() for n, c in PLUGGED_SECTIONS.items()})
    )

    def section(self, cls: type[S]) -> S:
        """The plugged-in section of class ``cls`` (a sink kind's settings)."""
        for value in self.plugged.values():
            if type(value) is cls:
                return value
        raise LookupError(f"{cls.__name__} is not a section of this config")

    def biz_id(self, game: str) -> str:
        """The game's filing id with the anti-addiction system, or "" if it has none."""
        settings = self.games.get(game)
        return settings.biz_id if settings is not None else ""

    def priority(self, game: str) -> int:
        """The game's ``priority`` (higher goes first when requests are scarce); 0 if unset."""
        settings = self.games.get(game)
        return settings.priority if settings is not None else 0

    def games_without_biz_id(self) -> list[str]:
        """Games named in the file (tables, hot games) that have no ``biz_id``."""
        named = dict.fromkeys([*self.games, *self.reporter.hot_games])
        return [game for game in named if not self.biz_id(game)]

    def advise(self, where: Where) -> list[str]:
        return [
            *super().advise(where),
            *make_sink(self).advise(where),
            *ingest_advice(self.ingest, where),
        ]

    def check(self, where: Where) -> None:
        super().check(where)
        if self.sink.kind not in SINKS:
            raise ConfigError(
                f"{where('sink', 'kind')}: [sink] kind: expected one of "
                f"{', '.join(repr(kind) for kind in SINKS)}, found {self.sink.kind!r}"
            )
        check_sink(self.sink, where)
        make_sink(self).check(where)
        if self.metrics.listen:
            try:
                listen_address(self.metrics.listen)
            except ValueError as exc:
                raise ConfigError(
                    f"{where('metrics', 'listen')}: [metrics] listen: {exc}"
                ) from None
        check_ingest(self.ingest, self.collector.max_buffer_events, where)
        max_age = self.reporter.max_age_seconds
        ttls = [(where("buffer", "ttl_seconds"), "[buffer] ttl_seconds", self.buffer.ttl_seconds)]
        ttls += [
            (self.source, f'[games."{g}"] ttl_seconds', s.ttl_seconds)
            for g, s in self.games.items()
            if s.ttl_seconds
        ]
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
                    f"{where('reporter', 'hot_games')}: [reporter.hot_games] {exc}"
                ) from None

    def buffer_ttls(self) -> list[int]:
        """Every buffer's TTL: ``[buffer] ttl_seconds`` and each game's own."""
        return [
            self.buffer.ttl_seconds,
            *(g.ttl_seconds for g in self.games.values() if g.ttl_seconds),
        ]


def sink_problems(config: ReporterConfig) -> list[str]:
    """What ``run`` and ``check-config`` refuse that loading the file does not (the json
    sender needs ``[sink] url``): ``Sink.problems``.  Each problem is one line, worded like
    a ``ConfigError`` (``status`` and ``dead`` do not call this: they never POST)."""
    return make_sink(config).problems()
