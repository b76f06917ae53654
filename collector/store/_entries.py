"""The stored entry: the collect time in milliseconds as 13 ASCII digits, then the event's JSON.

The reporter reads ages and assembles POST bodies without decoding the events.  A batch's
entries travel joined by newlines (one script argument instead of one per event); orjson never
writes a raw newline, so the separator is safe.  ``lua/collect.lua`` and ``lua/claim.lua`` read
the same 13 digits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from collector._constants import DEDUP_KEY_BYTES

ENTRY_TIME_DIGITS = 13
ENTRY_SEPARATOR = b"\n"
# An entry on its way to collect.lua may carry a dedup key: "\x1e<key>\x1e<entry>".  No
# entry starts with it (an entry starts with a digit), and the script takes the key off.
DEDUP_MARK = b"\x1e"


_TIME_FORMAT = b"%0" + str(ENTRY_TIME_DIGITS).encode() + b"d"


def encode_entry(collected_ms: int, event_json: bytes) -> bytes:
    return _TIME_FORMAT % collected_ms + event_json


def time_prefix(collected_ms: int) -> bytes:
    """The first ENTRY_TIME_DIGITS bytes of an entry collected at ``collected_ms``."""
    return _TIME_FORMAT % collected_ms


def entry_time_ms(entry: bytes) -> int:
    return int(entry[:ENTRY_TIME_DIGITS])


def head_time_ms(entry: bytes) -> int:
    """The collect time of the first entry of a buffer, as views show it: 0 (the oldest
    possible) for a malformed entry, so that the next claim takes it (and dead-letters it)."""
    try:
        return int(entry[:ENTRY_TIME_DIGITS])
    except ValueError:
        return 0


def keyed_entry(key: bytes, entry: bytes) -> bytes:
    """``entry`` with the dedup ``key`` (JSON text) in front, as collect.lua reads it.  A key
    longer than DEDUP_KEY_BYTES, or holding the mark or a newline (raw JSON passed through),
    travels as a 32-hex-digit digest (BLAKE2b, 128 bits), so that each key remembered in
    Redis is short; JSON text never starts with a hex digit, so the two cannot meet."""
    if len(key) > DEDUP_KEY_BYTES or 30 in key or 10 in key:
        key = hashlib.blake2b(key, digest_size=16).hexdigest().encode()
    return DEDUP_MARK + key + DEDUP_MARK + entry


def entry_event(entry: bytes) -> bytes:
    return entry[ENTRY_TIME_DIGITS:]


def join_entries(entries: Iterable[bytes]) -> bytes:
    return ENTRY_SEPARATOR.join(entries)


def split_entries(blob: bytes | None) -> list[bytes]:
    return blob.split(ENTRY_SEPARATOR) if blob else []
