"""The stored entry's time prefix is named once (ENTRY_TIME_DIGITS); the scripts that read
it in Lua (which cannot import it) use the same width."""

from __future__ import annotations

import re

from collector.store import (
    ENTRY_TIME_DIGITS,
    SCRIPT_NAMES,
    encode_entry,
    entry_event,
    entry_time_ms,
    script_text,
    time_prefix,
)


def widths_read(script: str) -> set[int]:
    """The prefix widths a script reads: ``string.sub(entry, 1, N)`` (of a variable named for
    an entry; other texts are cut to other lengths), or a pattern anchored at the start that
    captures N ``%d``."""
    cut = {int(n) for n in re.findall(r"string\.sub\([a-z_]*entry[a-z_]*, 1, (\d+)\)", script)}
    matched = {len(d) // 2 for d in re.findall(r"'\^\(((?:%d)+)\)", script)}
    return cut | matched


def test_the_scripts_read_the_same_width() -> None:
    widths = set().union(*(widths_read(script_text(name)) for name in SCRIPT_NAMES))
    assert widths == {ENTRY_TIME_DIGITS}


def test_both_ways_of_reading_the_width_are_seen() -> None:
    assert widths_read("local t = string.sub(entry, 1, 12)") == {12}
    assert widths_read("local d = match(entry, '^(%d%d%d).')") == {3}


def test_an_entry_round_trips() -> None:
    entry = encode_entry(1_732_241_234_567, b'{"a":1}')
    assert entry[:ENTRY_TIME_DIGITS] == time_prefix(1_732_241_234_567)
    assert (entry_time_ms(entry), entry_event(entry)) == (1_732_241_234_567, b'{"a":1}')
    assert len(time_prefix(5)) == ENTRY_TIME_DIGITS
