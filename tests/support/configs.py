"""Reporter configs for the tests, built one way: the project's defaults, then the sections
given, checked by the config's own validation (``build_config``), as a file would be."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collector.config import build_config, raw_settings
from reporter._config import ReporterConfig

# Nothing listens here: a sender pointed at it fails at once (tests that never POST use it).
NOWHERE = "http://127.0.0.1:9/ingest"

Sections = Mapping[str, Mapping[str, Any]]


def merged(*layers: Sections) -> dict[str, dict[str, Any]]:
    """The layers' sections merged key by key, a later layer winning."""
    out: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for name, values in layer.items():
            out.setdefault(name, {}).update(values)
    return out


def reporter_config(
    redis_url: str, sink_url: str = NOWHERE, **sections: Mapping[str, Any]
) -> ReporterConfig:
    """The defaults with ``[redis] url``, ``[sink] url`` and each section's values over them."""
    raw = raw_settings(ReporterConfig())
    raw["redis"]["url"] = redis_url
    raw["sink"]["url"] = sink_url
    for name, values in sections.items():
        raw[name].update(values)
    return build_config(raw, "test", env={}, interpolate=False, cls=ReporterConfig)
