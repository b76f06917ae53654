"""The public surface of the collector package is pinned."""

from __future__ import annotations

import types

import collector

EXPECTED = {
    "BackendError",
    "BackendFull",
    "BackendUnconfirmed",
    "BufferFull",
    "Collector",
    "ConfigError",
    "EventsDropped",
    "InvalidEvent",
    "TelemetryConfig",
    "TelemetryError",
    "close",
    "collect",
    "flush",
    "set_on_error",
    "stats",
}
# Public doors for the reporter and advanced users; everything else is ``collector._*``.
PUBLIC_MODULES = {
    "conformance_producer",  # python -m collector.conformance_producer (docs/protocol.md)
    "config",
    "counters",
    "logs",
    "metrics",
    "nppa",
    "prometheus",
    "retry",
    "store",
    "text",
}


def test_exports_are_pinned() -> None:
    assert sorted(collector.__all__) == sorted(EXPECTED)
    assert len(collector.__all__) == len(set(collector.__all__))


def test_every_export_exists_and_claims_the_package() -> None:
    for name in collector.__all__:
        member = getattr(collector, name)
        assert member.__module__.startswith("collector."), name


def test_nothing_else_public_is_exported() -> None:
    public = {n for n in vars(collector) if not n.startswith("_")}
    modules = {n for n in public if isinstance(getattr(collector, n), types.ModuleType)}
    assert public - modules == EXPECTED
    assert modules <= PUBLIC_MODULES


def test_error_tree() -> None:
    assert issubclass(collector.ConfigError, collector.TelemetryError)
    assert issubclass(collector.BackendError, collector.TelemetryError)
    assert issubclass(collector.TelemetryError, Exception)
    assert not issubclass(collector.BackendError, collector.ConfigError)
    assert issubclass(collector.EventsDropped, collector.TelemetryError)
    assert not issubclass(collector.EventsDropped, collector.BackendError)
    # Sync mode: a collect() that raised anything else stored nothing (docs/sdk.md).
    assert issubclass(collector.BackendUnconfirmed, collector.BackendError)


def test_version_is_a_string() -> None:
    assert isinstance(collector.__version__, str)
    assert collector.__version__.count(".") >= 1
