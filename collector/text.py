"""Text from outside, made safe to print: ``printable`` escapes what could drive a terminal.

Endpoint answers, anti-addiction ``errmsg`` texts and whatever is read back from Redis (game
names in batch metadata, reporter ids, reasons) may hold control characters: an escape
sequence that retitles or clears a terminal, a carriage return that hides what came before,
a newline that forges a log line.  Every such text goes through ``printable`` where it comes
in, and every table and text log line once more on its way out.
"""

from __future__ import annotations

__all__ = ["printable", "printable_json"]


def printable(text: str, keep: str = "") -> str:
    """``text`` with every character that is not printable written as its escape (``\\x1b``,
    ``\\n``, ``\\u202e``), except those in ``keep`` (``"\\n"`` for a text of several lines).

    Not printable is Python's rule (``str.isprintable``): control characters (C0, DEL, C1),
    format characters such as bidirectional overrides, separators other than the space,
    unassigned and private code points."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else _escape(c) for c in text)


def _escape(char: str) -> str:
    return char.encode("unicode_escape").decode("ascii")


# JSON's whitespace between values; json.dumps escapes C0 inside strings itself.
_JSON_SPACE = "\n\r\t"


def printable_json(text: str) -> str:
    """JSON text with every character that is not printable (``json.dumps`` leaves DEL raw,
    and C1 and format characters too with ``ensure_ascii=False``) as a ``\\u`` escape: the
    same JSON value."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in _JSON_SPACE else _json_escape(c) for c in text)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # beyond the BMP: a surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
