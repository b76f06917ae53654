"""Test support for config files: write one, and read the error loading it raises."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from collector import ConfigError, TelemetryConfig


def write(tmp_path: Path, text: str, name: str = "telemetry.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)  # as a file with secrets should be: others reading it is a notice
    return path


def load_error(
    path: Path, env: Mapping[str, str] | None = None, cls: type[TelemetryConfig] = TelemetryConfig
) -> str:
    """The message of the ConfigError that loading ``path`` as ``cls`` raises."""
    with pytest.raises(ConfigError) as info:
        cls.load(str(path), env={} if env is None else env)
    return str(info.value)
