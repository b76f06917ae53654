"""Whole-service scenarios (``tests/system/``, and package tests that run a service): short
configs, events pushed into a game's list, games spread over shards, totals read until every
batch is finished, and every event reconciled."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
import redis

from collector.config import raw_settings
from collector.store import KeySchema, encode_entry
from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint
from reporter._monitoring.accounting import Totals, read_totals
from tests.support.configs import NOWHERE, merged, reporter_config
from tests.support.polling import wait_until
from tests.support.scriptcalls import Scripts, store_of

# Short settings so a fault and its recovery take seconds, not minutes.
FAST: dict[str, dict[str, Any]] = {
    "redis": {"shards": 4, "socket_timeout_seconds": 1.0, "connect_timeout_seconds": 0.5},
    "buffer": {"max_events_per_game": 100_000},
    "collector": {"flush_interval_ms": 10, "retry_max_delay_ms": 200},
    "reporter": {
        "linger_ms": 50,
        "poll_interval_ms": 20,
        "workers": 2,
        "lease_seconds": 1.0,
        "shard_lease_seconds": 1.0,
        "grace_seconds": 2.0,
        "max_batches_per_claim": 8,
    },
    "sink": {"timeout_seconds": 2.0, "connect_timeout_seconds": 0.5},
    "retry": {"initial_delay_ms": 50, "max_delay_ms": 400, "max_attempts": 50},
}


def make_config(
    redis_url: str, sink_url: str = NOWHERE, **sections: dict[str, Any]
) -> ReporterConfig:
    """The FAST settings on ``redis_url`` and ``sink_url``, with per-section overrides."""
    layers = merged(FAST, {"redis": {"key_prefix": "dlv"}}, sections)
    return reporter_config(redis_url, sink_url, **layers)


def schema_of(config: ReporterConfig) -> KeySchema:
    return KeySchema(config.redis.key_prefix, config.redis.shards)


def event(game: str, seq: int) -> dict[str, Any]:
    return {"game": game, "seq": seq}


def push_events(
    client: redis.Redis,
    schema: KeySchema,
    game: str,
    seqs: Iterable[int],
    collected_ms: int | None = None,
    cap: int = 100_000,
) -> int:
    """Store events the way collect() does (collect.lua), stamped ``collected_ms`` (now)."""
    born = time.time_ns() // 1_000_000 if collected_ms is None else collected_ms
    entries = [encode_entry(born, orjson.dumps(event(game, s))) for s in seqs]
    return int(Scripts(client).collect(schema.for_game(game), game, cap, 3600, entries))


def totals(client: redis.Redis, schema: KeySchema) -> Totals:
    return read_totals(store_of(client, schema))


def _quiet(t: Totals) -> bool:
    s = t.summary()
    return bool(s["stored"]) and not (
        s["buffered"] or s["pending_events"] or s["batches_in_flight"] or s["batches_retry"]
    )


def drained(client: redis.Redis, schema: KeySchema) -> Totals | None:
    """The totals once nothing is buffered, in flight or waiting for retry.

    ``read_totals`` reads a shard in several round trips, so while a reporter is working it
    can catch a batch between two states; only two equal reads in a row count."""
    first = read_totals(store_of(client, schema))
    if not _quiet(first):
        return None
    second = read_totals(store_of(client, schema))
    return second if second.summary() == first.summary() else None


def assert_reconciled(t: Totals) -> None:
    """Every stored event is in exactly one end state (nothing pending any more)."""
    s = t.summary()
    assert s["unaccounted"] == 0, s
    assert s["buffered"] == 0 and s["pending_events"] == 0, s
    dead_now = s["dead_events"] - s["replayed"]
    assert s["delivered"] + dead_now + s["stale"] + s["evicted"] + s["merged"] == s["stored"], s


def received_keys(endpoint: LocalEndpoint) -> Counter[tuple[str, int]]:
    """(game, seq) of every event the endpoint accepted, with how often it came."""
    with endpoint.lock:
        return Counter((str(e["game"]), int(e["seq"])) for r in endpoint.received for e in r.events)


class Script:
    """A scriptable ``respond`` for LocalEndpoint; records each request's arrival."""

    def __init__(self, decide: Callable[[int, dict[str, Any]], tuple[int, dict[str, str]]]) -> None:
        self.decide = decide
        self.lock = threading.Lock()
        self.log: list[tuple[int, float, int, str]] = []  # number, arrival, status, batch id
        self.release = threading.Event()  # wakes any sleeping response at teardown

    def __call__(self, number: int, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        arrived = time.monotonic()
        status, headers = self.decide(number, body)
        with self.lock:
            self.log.append((number, arrived, status, str(body.get("batch_id"))))
        return status, headers, b'{"ok":true}' if status < 300 else b'{"error":"scripted"}'

    def statuses(self) -> Counter[int]:
        with self.lock:
            return Counter(s for _, _, s, _ in self.log)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return orjson.dumps(value).decode()  # a JSON string is a TOML basic string
    if isinstance(value, Mapping):
        items = ", ".join(f"{_toml_value(str(k))} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def config_toml(config: ReporterConfig) -> str:
    """The config as a TOML file the reporter's ``--config`` reads back unchanged."""
    lines: list[str] = []
    for section, values in raw_settings(config).items():
        if section == "games":
            for game, table in values.items():
                lines.append(f"[games.{_toml_value(game)}]")
                lines += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
            continue
        lines.append(f"[{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def games_in_distinct_shards(schema: KeySchema, count: int, stem: str = "game") -> list[str]:
    games: list[str] = []
    shards: set[int] = set()
    for i in itertools.count():
        game = f"{stem}-{i}"
        if schema.shard_of(game) not in shards:
            shards.add(schema.shard_of(game))
            games.append(game)
        if len(games) == count:
            return games
    raise AssertionError("unreachable")


def fill(client: redis.Redis, schema: KeySchema, sizes: dict[str, int]) -> set[tuple[str, int]]:
    """Store ``sizes[game]`` events per game; the (game, seq) keys stored."""
    for game, size in sizes.items():
        push_events(client, schema, game, range(size))
    return {(g, s) for g, size in sizes.items() for s in range(size)}


def drain(client: redis.Redis, schema: KeySchema, timeout: float = 30.0) -> Totals:
    totals: Totals = wait_until(
        lambda: drained(client, schema), timeout=timeout, what="every batch finished"
    )
    assert_reconciled(totals)
    return totals
