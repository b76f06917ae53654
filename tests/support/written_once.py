"""collect.lua's calls with a writer id, built and sent by hand as the SDK would send them
(``write`` builds a ``Collect``; ``send`` runs it with some of its ARGV replaced), and the
queue they leave."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import redis

from collector.store import Collect, KeySchema, Stored, encode_entry, keyed_entry, lua_script

SCHEMA = KeySchema("once", 4)
GAME = "game-1"
KEYS = SCHEMA.for_game(GAME)
NOW_MS = 1_700_000_000_000
# Positions of collect.lua's ARGV (1-based in the script) in Collect.args().
HORIZON, MOST_WRITERS, DEDUP_MOST, CHECKSUM = 11, 12, 15, 16


def entry(i: int) -> bytes:
    return encode_entry(NOW_MS + i, orjson.dumps({"i": i}))


def keyed(key: str, i: int) -> bytes:
    return keyed_entry(orjson.dumps(key), entry(i))


def send(r: redis.Redis, call: Collect, **argv: Any) -> Stored:
    """Run ``call`` by hand (EVALSHA with its KEYS and ARGV), with ARGV positions replaced."""
    script = lua_script("collect")
    args = list(call.args())
    for position, value in argv.items():
        args[
            {
                "horizon": HORIZON,
                "most_writers": MOST_WRITERS,
                "dedup_most": DEDUP_MOST,
                "checksum": CHECKSUM,
            }[position]
        ] = value
    keys = call.keys()
    r.script_load(script.text)
    return call.parse(r.evalsha(script.sha, len(keys), *keys, *args))


def write(
    entries: Sequence[bytes],
    writer: str = "w1",
    seq: int = 1,
    low: int | None = None,
    *,
    cap: int = 100,
    window_ms: int = 180_000,
    game: str = GAME,
) -> Collect:
    return Collect(
        SCHEMA.for_game(game),
        game,
        entries,
        cap,
        3600,
        writer=writer,
        seq=seq,
        low=seq if low is None else low,
        dedup_window_ms=window_ms,
    )


def queue(r: redis.Redis, game: str = GAME) -> list[bytes]:
    return list(r.lrange(SCHEMA.for_game(game).queue(game), 0, -1))
