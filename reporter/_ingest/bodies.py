"""A request body as the JSON text of each event, without building a Python object per event.

A JSON array is split by msgspec into the raw text of its elements (``msgspec.Raw``: a slice of
the body, validated as JSON on the way); NDJSON is split at its line breaks.  What each event
must be (one JSON object, on one line, UTF-8, not too large) is checked by the SDK's
``collect_json``, which names the first event that is not.  Only a body that does not parse
is looked at element by element, to name the first element that is wrong.
"""

from __future__ import annotations

import re

import msgspec
import orjson

_ARRAY = msgspec.json.Decoder(list[msgspec.Raw])
_AT_BYTE = re.compile(r"\(byte (\d+)\)")
# A JSON string (escapes included) or one of the characters that open, close or separate.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[][{},]')
_WHITESPACE = b" \t\r\n"
EXPECTED_ARRAY = (
    "expected a JSON array of events (or NDJSON with Content-Type: application/x-ndjson)"
)


class BadBody(Exception):
    """The body cannot be split into events: ``reason``, and the element at ``index``
    (0-based) when one element is to blame."""

    def __init__(self, reason: str, index: int | None = None) -> None:
        super().__init__(reason if index is None else f"event {index}: {reason}")
        self.reason = reason
        self.index = index


def array_events(body: bytes) -> list[bytes]:
    """The JSON text of each element of a JSON array, each on one line."""
    try:
        elements = _ARRAY.decode(body)
    except msgspec.ValidationError:  # JSON, but not an array
        raise BadBody(EXPECTED_ARRAY) from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise _why(body, exc) from None
    events = [bytes(element) for element in elements]
    if b"\n" in body:  # pretty-printed: an element that spans lines is written on one
        events = [_one_line(e, i) if b"\n" in e else e for i, e in enumerate(events)]
    return events


def ndjson_events(body: bytes) -> list[bytes]:
    """The lines of an NDJSON body, each without surrounding whitespace; blank lines (a
    final line break among them) are skipped, so an index counts events, not lines."""
    events = [line.strip(_WHITESPACE) for line in body.split(b"\n")]
    if b"" in events:
        events = [e for e in events if e]
    return events


def _one_line(element: bytes, index: int) -> bytes:
    try:
        return orjson.dumps(orjson.loads(element))
    except orjson.JSONDecodeError as exc:  # msgspec took it, orjson did not (deep nesting)
        raise BadBody(f"not one JSON value: {exc}", index) from None


def _why(body: bytes, exc: Exception) -> BadBody:
    """Why the array does not parse: the first element that is not JSON, else the array."""
    if not body.lstrip(_WHITESPACE).startswith(b"["):
        return BadBody(EXPECTED_ARRAY)
    for index, (start, end) in enumerate(_elements(body)):
        text = body[start:end].strip(_WHITESPACE)
        if not text:
            return BadBody("missing: nothing between two commas, or after the last one", index)
        try:
            orjson.loads(text)
        except orjson.JSONDecodeError as bad:
            return BadBody(f"not one JSON value: {bad}", index)
    found = _AT_BYTE.search(str(exc))
    where = f" at byte {found.group(1)}" if found else ""
    what = str(exc).split(" (byte")[0] if found else str(exc)
    return BadBody(f"the array is malformed{where}: {what}")


def _elements(body: bytes) -> list[tuple[int, int]]:
    """Where each top-level element of the array starts and ends (a body cut short ends its
    last element at its end)."""
    spans: list[tuple[int, int]] = []
    depth, start = 0, 0
    for token in _TOKEN.finditer(body):
        char = body[token.start()]
        if char == 0x22:  # '"': a string, which cannot change the depth
            continue
        if char in b"[{":
            depth += 1
            if depth == 1:
                start = token.end()
        elif char in b"]}":
            if depth == 1:
                if body[start : token.start()].strip(_WHITESPACE) or spans:
                    spans.append((start, token.start()))
                return spans
            depth -= 1
        elif depth == 1:  # a comma between two elements
            spans.append((start, token.start()))
            start = token.end()
    spans.append((start, len(body)))
    return spans
