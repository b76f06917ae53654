"""Sections a config class plugs in (``PLUGGED_SECTIONS``): built, checked and overridden
from the environment like its fields' sections; a dotted name is a table inside a section."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import pytest

from collector import ConfigError
from collector.config import (
    TelemetryConfig,
    build_config,
    load_config,
    raw_settings,
    section_value,
    sections_of,
    setting,
)


@dataclass(frozen=True)
class Outer:
    url: str = setting("")


@dataclass(frozen=True)
class Inner:
    path: str = setting("")
    size: int = setting(1, lo=1, hi=10)


PLUGS: Mapping[str, type] = {"outer.inner": Inner, "extra": Outer}


@dataclass(frozen=True, repr=False)
class Plugged(TelemetryConfig):
    OTHER_SECTIONS: ClassVar[tuple[str, ...]] = ()
    PLUGGED_SECTIONS: ClassVar[Mapping[str, type]] = PLUGS

    outer: Outer = field(default_factory=Outer)
    plugged: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({n: c() for n, c in PLUGS.items()})
    )


def load(tmp_path: Path, text: str, env: Mapping[str, str] | None = None) -> Plugged:
    path = tmp_path / "t.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(str(path), env or {}, Plugged)


def test_a_table_inside_a_section_is_a_section_of_its_own(tmp_path: Path) -> None:
    config = load(tmp_path, '[outer]\nurl = "u"\n[outer.inner]\npath = "p"\n[extra]\nurl = "e"\n')
    assert config.outer == Outer("u")
    assert section_value(config, "outer.inner") == Inner("p")
    assert section_value(config, "extra") == Outer("e")
    assert list(sections_of(Plugged))[-2:] == ["outer.inner", "extra"]
    assert load(tmp_path, "") == Plugged()  # every plugged section has its defaults


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[outer.inner]\nsize = 11\n", "[outer.inner] size: expected an integer from 1 to 10"),
        ("[outer.inner]\npathh = 'p'\n", "[outer.inner] unknown key 'pathh'"),
        ("[outer.other]\npath = 'p'\n", "[outer] unknown key 'other'"),
        ("[plugs]\n", "unknown section [plugs]"),
    ],
)
def test_errors_name_the_plugged_section(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        load(tmp_path, text)


def test_the_environment_overrides_the_longest_section_it_names(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        "",
        {"TELEMETRY_OUTER_INNER_SIZE": "5", "TELEMETRY_OUTER_URL": "o", "TELEMETRY_EXTRA_URL": "x"},
    )
    assert section_value(config, "outer.inner") == Inner("", 5)
    assert config.outer.url == "o"
    assert section_value(config, "extra").url == "x"
    with pytest.raises(ConfigError, match="TELEMETRY_OUTER_INNER_SIZE"):
        load(tmp_path, "", {"TELEMETRY_OUTER_INNER_SIZE": "0"})


def test_raw_settings_and_masked_carry_the_plugged_sections(tmp_path: Path) -> None:
    config = load(tmp_path, '[outer.inner]\npath = "p"\nsize = 3\n')
    raw = raw_settings(config)
    assert raw["outer"] == {"url": "", "inner": {"path": "p", "size": 3}}
    assert build_config(raw, "again", {}, cls=Plugged) == config
    assert config.masked()["outer.inner"] == {"path": "p", "size": 3}
