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


def test_the_scripts_read_the_same_width() -> None:
    widths = {int(n) for name in SCRIPT_NAMES
              for n in re.findall(r"string\.sub\([a-z_]+, 1, (\d+)\)", script_text(name))}
    assert widths == {ENTRY_TIME_DIGITS}


def test_an_entry_round_trips() -> None:
    entry = encode_entry(1_732_241_234_567, b'{"a":1}')
    assert entry[:ENTRY_TIME_DIGITS] == time_prefix(1_732_241_234_567)
    assert (entry_time_ms(entry), entry_event(entry)) == (1_732_241_234_567, b'{"a":1}')
    assert len(time_prefix(5)) == ENTRY_TIME_DIGITS
