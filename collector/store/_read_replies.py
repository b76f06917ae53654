"""Reading Redis replies for the views without failing on a bad record."""

# Plain commands, never in a MULTI (Redis refuses to queue any command in a transaction
# while it is at maxmemory); each read touches one shard's keys (one hash slot).  The one
# atomic read, a shard's whole state, is the ``read_shard`` script (``no-writes``).
#
# No bad record makes a reader fail: a key of another type than the shard needs reads as
# empty (and is named, so the sweeper can have the scripts set it aside), metadata that does
# not decode and counters that are not integers are shown for what they are, names that are
# not text are shown escaped, and text that is shown (ids, game names and reasons in batch
# metadata, alerts) has its control characters escaped (``collector.text``).  Only Redis not
# answering raises.

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from redis.exceptions import ResponseError

from collector.store._keys import validate_game

T = TypeVar("T")
# Shards (or games) whose reads go out in one pipeline at most: a read of every shard of a
# 16,384-shard deployment is 16 pipelines, and no reply grows without bound.
PIPELINE_SHARDS = 1024
PIPELINE_GAMES = 8192


def execute(pipe: Any) -> list[Any]:
    """A pipeline's replies, a command refused (a key of another type) as its error in place;
    Redis not answering still raises."""
    replies: list[Any] = pipe.execute(raise_on_error=False)
    for reply in replies:
        if isinstance(reply, Exception) and not isinstance(reply, ResponseError):
            raise reply
    return replies


def as_text(value: bytes | str) -> str:
    """A reply as text, bytes that are not UTF-8 escaped rather than refused."""
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else value


def as_count(value: Any) -> int:
    """A counter's value; one that is not an integer (junk, or a refused read) reads as 0."""
    if isinstance(value, Exception):
        return 0
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def game_name(name: bytes | str) -> str | None:
    """A ring member as a game name, or None if it is not one (junk to set aside)."""
    try:
        return validate_game(name.decode() if isinstance(name, bytes) else name)
    except (UnicodeDecodeError, TypeError, ValueError):
        return None


def batch_meta(raw: bytes | str | None) -> dict[str, Any] | None:
    """Batch metadata, or None if it does not decode or lacks its fields (the next script
    that meets it sets it aside)."""
    try:
        meta = json.loads(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None
    if (
        not isinstance(meta, dict)
        or not isinstance(meta.get("g"), str)
        or not isinstance(meta.get("n"), int)
        or not isinstance(meta.get("a"), int)
    ):
        return None
    return meta


def seconds(ms: Any) -> float:
    return float(ms) / 1000 if isinstance(ms, int | float) else 0.0


def groups(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
