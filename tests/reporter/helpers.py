"""Helpers shared by the reporter tests: configs, stored entries, polling with a deadline."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import orjson

from collector.config import build_config, raw_settings
from collector.store import KeySchema, ShardKeys, encode_entry
from reporter._config import ReporterConfig
from tests.polling import wait_until  # noqa: F401 - re-exported for the tests
from tests.scriptcalls import Scripts

# Nothing listens here: a sender pointed at it fails at once (tests that never POST use it).
NOWHERE = "http://127.0.0.1:9/ingest"
TTL = 3600


def make_config(
    redis_url: str, *, sink_url: str = NOWHERE, shards: int = 4, **sections: dict[str, Any]
) -> ReporterConfig:
    """The defaults with ``[redis] url/shards``, ``[sink] url`` and any section updates."""
    raw = raw_settings(ReporterConfig())
    raw["redis"].update(url=redis_url, shards=shards)
    raw["sink"]["url"] = sink_url
    for name, values in sections.items():
        raw[name].update(values)
    return build_config(raw, "test", env={}, interpolate=False, cls=ReporterConfig)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def entry(event: dict[str, Any], born_ms: int | None = None) -> bytes:
    """A stored entry: 13-digit collect time in ms, then the event's JSON."""
    return encode_entry(now_ms() if born_ms is None else born_ms, orjson.dumps(event))


def numbered(game: str, count: int, born_ms: int | None = None, start: int = 0) -> list[bytes]:
    return [
        entry({"id": f"{game}#{i}", "game": game}, born_ms) for i in range(start, start + count)
    ]


def store(
    scripts: Scripts, schema: KeySchema, game: str, entries: list[bytes], cap: int = 100_000
) -> ShardKeys:
    """Push ``entries`` through collect.lua, as the SDK would."""
    keys = schema.for_game(game)
    for first in range(0, len(entries), 5000):
        scripts.collect(keys, game, cap, TTL, entries[first : first + 5000])
    return keys


def stats(client: Any, keys: ShardKeys) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in client.hgetall(keys.stats).items()}


def stats_total(client: Any, schema: KeySchema, name: str) -> int:
    return sum(int(client.hget(k.stats, name) or 0) for k in schema.all_shards())


def ids_of(events: Iterable[Any]) -> list[str]:
    return [e["id"] for e in events]
