"""Whether an event's JSON is exactly one JSON value.

orjson writes raw JSON passed as ``orjson.Fragment`` as it is given, so a fragment such as
``1}],"game":"other","events":[{"f":1`` would close the event early and forge the envelope
of the body the reporter builds around it.  ``collect()`` checks the JSON of every event with
msgspec's validating skip, which builds no Python object: for a small event it costs less
than looking at the types of the event's values to find the ones that might hold a fragment.
"""

from __future__ import annotations

import msgspec
import orjson

# ``decode`` raises unless its input is one JSON value; it does not check the UTF-8 inside
# strings (orjson writes valid UTF-8 itself; a bytes fragment may not): ``check_utf8`` does.
ONE_VALUE = msgspec.json.Decoder(msgspec.Raw)
NOT_ONE_VALUE = (msgspec.DecodeError, RecursionError)


def check_one_value(game: str, data: bytes) -> None:
    """Raise ``TypeError`` unless ``data`` is exactly one JSON value, with orjson's reason.
    The slow path, for an event the skip refused: it also takes a deeply nested value that
    the skip refused only for lack of room on the caller's stack."""
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TypeError(
            f"event for game {game!r} holds raw JSON (orjson.Fragment) that is not exactly one "
            f"JSON value ({exc}); pass the value itself, or one whole JSON value"
        ) from None


def check_utf8(game: str, data: bytes) -> None:
    """Raise ``TypeError`` unless ``data`` is UTF-8."""
    try:
        data.decode()
    except UnicodeDecodeError as exc:
        raise TypeError(
            f"event for game {game!r} holds raw JSON (orjson.Fragment) that is not UTF-8 "
            f"({exc.reason} at byte {exc.start}); pass the value itself"
        ) from None
