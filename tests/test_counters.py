"""The counter names the scripts write are the ones status and the accounting read."""

from __future__ import annotations

import re

from collector.counters import COUNTERS
from collector.store import SCRIPT_NAMES, script_text


def test_every_counter_a_script_writes_is_known() -> None:
    written = {name for script in SCRIPT_NAMES
               for name in re.findall(r"HINCRBY', KEYS\[\d+\], '([a-z_]+)'", script_text(script))}
    assert written == set(COUNTERS)
