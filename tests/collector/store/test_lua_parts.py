"""Scripts built from their shared parts: the clock read in one place, each part once."""

from __future__ import annotations

import re
from importlib.resources import files

import pytest

from collector.store import SCRIPT_NAMES, script_text

_LUA = files("collector._lua")


def lua_files() -> dict[str, str]:
    """Every file in lua/ as written (parts included), by name."""
    return {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in _LUA.iterdir()
        if entry.name.endswith(".lua")
    }


def test_only_the_time_part_reads_the_clock() -> None:
    """TIME, and turning its reply into ms or us, happen in lua/_time.lua alone: every other
    script and part takes its time from clock_ms / clock_us / clock_raw."""
    reads = re.compile(r"""redis\.p?call\(\s*['"]TIME['"]""")
    arithmetic = re.compile(r"tonumber\(\w+\[[12]\]\)\s*\*\s*1000")
    for name, text in lua_files().items():
        if name == "_time.lua":
            assert len(reads.findall(text)) == 1
            continue
        assert not reads.search(text), f"{name} reads TIME itself"
        assert not arithmetic.search(text), f"{name} turns TIME's reply into a time itself"


@pytest.mark.parametrize("script", SCRIPT_NAMES)
def test_each_part_goes_in_once(script: str) -> None:
    text = script_text(script)
    assert "-- include:" not in text
    for function in re.findall(r"^local function (\w+)", text, re.MULTILINE):
        assert len(re.findall(rf"^local function {function}\(", text, re.MULTILINE)) == 1, (
            f"{script}: {function} defined twice"
        )
