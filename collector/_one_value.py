"""Whether an event's JSON is exactly one JSON value.

orjson writes raw JSON passed as ``orjson.Fragment`` as it is given, so a fragment such as
``1}],"game":"other","events":[{"f":1`` would close the event early and forge the envelope
of the body the reporter builds around it.  A serialised dict of plain values is always one
value: only events holding something else (a fragment, or a type orjson writes itself, such
as a dataclass or an enum that might hold one) are parsed again to make sure.
"""

from __future__ import annotations

from typing import Any

import orjson

# Values orjson writes itself, which can hold no raw JSON.
SCALARS = frozenset((str, int, float, bool, type(None)))


def plain(value: Any) -> bool:
    """True if ``value`` (a dict, list or tuple) holds only scalars, dicts, lists and
    tuples, at any depth."""
    for item in value.values() if type(value) is dict else value:
        kind = type(item)
        if kind in SCALARS:
            continue
        if (kind is not dict and kind is not list and kind is not tuple) or not plain(item):
            return False
    return True


def check_one_value(game: str, event: dict[str, Any], data: bytes) -> None:
    """Raise ``TypeError`` unless ``data``, the JSON of ``event``, is exactly one JSON value
    (``collect()`` calls this only for an event with a value that is not a scalar)."""
    if plain(event):
        return
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TypeError(
            f"event for game {game!r} holds raw JSON (orjson.Fragment) that is not exactly one "
            f"JSON value ({exc}); pass the value itself, or one whole JSON value") from None
