"""The event rules for events a caller gives as JSON text (``Collector.collect_json``).

``collect()`` makes an event's JSON itself, so its rules are about what orjson was handed.
JSON text from elsewhere (an HTTP body, another language) must meet the same rules the
stored entries rely on: the UTF-8 JSON of one object, on one line (entries are joined by
newlines in a batch), at most ``[buffer] max_event_bytes``, and exactly one JSON value (a
fragment such as ``1},{"forged":1`` would break the envelope of the body the reporter builds).

A batch is checked with a few calls into C (one join, one ``isascii``, one pass of msgspec's
validating skip over every event); only a batch that fails is looked at one event at a time,
to name the first event that breaks a rule and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat

import orjson

from collector._exceptions import InvalidEvent
from collector._one_value import NOT_ONE_VALUE, ONE_VALUE

_KINDS = {ord("["): "an array", ord('"'): "a string", ord("t"): "true", ord("f"): "false"}
_KINDS |= {ord("n"): "null", ord("-"): "a number"} | {c: "a number" for c in b"0123456789"}
_BYTES = frozenset((bytes,))


def check_events(game: str, events: Sequence[bytes], max_bytes: int) -> None:
    """Raise ``InvalidEvent`` for the first of ``events`` that breaks the rules, or
    ``TypeError`` for one that is not bytes."""
    if (
        _BYTES.issuperset(map(type, events))
        and max(map(len, events)) <= max_bytes
        and all(map(bytes.startswith, events, repeat(b"{")))
    ):
        joined = b"\n".join(events)
        if joined.count(b"\n") == len(events) - 1 and (joined.isascii() or _utf8(joined)):
            try:
                for _ in map(ONE_VALUE.decode, events):
                    pass
                return
            except NOT_ONE_VALUE:
                pass
    for index, data in enumerate(events):
        reason = problem(data, max_bytes)
        if reason is not None:
            raise InvalidEvent(game, index, reason)


def problem(data: bytes, max_bytes: int) -> str | None:
    """What is wrong with one event's JSON text, or None."""
    if type(data) is not bytes:
        raise TypeError(f"an event's JSON must be bytes, got {type(data).__name__}")
    return _framing_problem(data, max_bytes) or _value_problem(data)


def _framing_problem(data: bytes, max_bytes: int) -> str | None:
    """Whether the text can be an entry at all: not empty, one line, not too large, UTF-8."""
    if not data:
        return "empty: expected the JSON of one object"
    if 10 in data:  # b"\n"
        return "holds a line break: an event's JSON must be on one line"
    if len(data) > max_bytes:
        return f"{len(data)} bytes of JSON, over [buffer] max_event_bytes = {max_bytes}"
    if not data.isascii():
        try:
            data.decode()
        except UnicodeDecodeError as exc:
            return f"not UTF-8 ({exc.reason} at byte {exc.start})"
    return None


def _value_problem(data: bytes) -> str | None:
    """Whether the text is exactly one JSON object."""
    try:
        ONE_VALUE.decode(data)
    except NOT_ONE_VALUE as exc:
        try:  # the skip refuses deep nesting for lack of stack; orjson has the last word
            orjson.loads(data)
        except orjson.JSONDecodeError:
            return f"not one JSON value: {exc}"
    if data[:1].isspace():
        return "starts with whitespace: expected the JSON of one object, trimmed"
    if data[0] != ord("{"):
        return f"expected a JSON object, found {_KINDS.get(data[0], 'something else')}"
    return None


def _utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True
