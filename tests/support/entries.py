"""Entries made by hand for the reporter's tests: a config of the defaults on a server, entries
with a collect time, stored through collect.lua as the SDK would store them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

import orjson
import redis

from collector.store import BackendError, Collect, KeySchema, ShardKeys, encode_entry
from reporter._config import ReporterConfig
from reporter._service.service import ReporterService
from tests.support.configs import NOWHERE, merged, reporter_config
from tests.support.scriptcalls import Scripts

TTL = 3600


def make_config(
    redis_url: str, *, sink_url: str = NOWHERE, shards: int = 4, **sections: dict[str, Any]
) -> ReporterConfig:
    """The defaults with ``[redis] url/shards``, ``[sink] url`` and any section updates."""
    return reporter_config(redis_url, sink_url, **merged({"redis": {"shards": shards}}, sections))


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


def ids_of(events: Iterable[Any]) -> list[str]:
    return [e["id"] for e in events]


def store_many(
    client: redis.Redis, service: ReporterService, games: dict[str, list[bytes]]
) -> None:
    """Store several games' entries in one write, through collect.lua."""
    schema = service.schema
    calls = [
        Collect(schema.for_game(game), game, entries, service.config.cap_for(game), TTL)
        for game, entries in games.items()
    ]
    replies = service.store.call_many(calls)
    assert not [reply for reply in replies if isinstance(reply, BackendError)]


def dead_letter(
    scripts: Scripts,
    schema: KeySchema,
    game: str,
    events: int,
    tag: str,
    age_seconds: float = 0.0,
    reason: str = "HTTP 400: bad",
) -> tuple[str, ShardKeys]:
    """A dead letter of ``events`` new events of ``game`` (claimed as batch ``tag``, refused for
    good with ``reason``), dead ``age_seconds`` ago; its batch id and its shard's keys."""
    keys = store(scripts, schema, game, numbered(game, events))
    [(batch_id, _)] = scripts.claim(keys, game, tag, "t", 128, 1, 30_000, 180_000, 0).batches
    scripts.nack(
        keys,
        batch_id,
        "t",
        permanent=True,
        min_delay_ms=0,
        initial_ms=1,
        max_ms=1,
        max_attempts=3,
        jitter=0.0,
        dead_max=100,
        reason=reason,
    )
    if age_seconds:  # as if it had died then: the dead time is in the batch's metadata
        client = scripts.store.backend.client
        meta = json.loads(client.hget(keys.batches, batch_id))
        meta["d"] -= int(age_seconds * 1000)
        client.hset(keys.batches, batch_id, json.dumps(meta))
    return batch_id, keys
