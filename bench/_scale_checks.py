"""bench/scale.py's short measurements: sweep and un-register cost by registered games, Redis
memory per buffered event against a plain list, and ``status --no-shards`` on many shards.

Each works on a private server it is handed (flushed first), through the project's store.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import redis

from bench._pipeline_workload import make_event
from collector.config import build_config, raw_settings
from collector.store import (
    Claim,
    Collect,
    Nack,
    RetryPolicy,
    Store,
    encode_entry,
    open_store,
)
from reporter._config import ReporterConfig

TTL = 3600
CAP = 1_000_000
MOST_BATCHES = 64  # the most one claim takes (claim.lua; [reporter] max_batches_per_claim)


def store_for(url: str, shards: int) -> Store:
    raw = raw_settings(ReporterConfig())
    raw["redis"].update(url=url, shards=shards)
    config = build_config(raw, "<bench/scale.py>", env={}, interpolate=False, cls=ReporterConfig)
    return open_store(config.redis)


def entries(game_no: int, count: int, now_ms: int) -> list[bytes]:
    return [
        encode_entry(now_ms, orjson.dumps(make_event(game_no * 1_000_000 + i, now_ms)))
        for i in range(count)
    ]


def register(store: Store, names: list[str], per_game: int = 1, chunk: int = 2000) -> None:
    """Collect ``per_game`` events for each game through collect.lua, in pipelined chunks."""
    now = int(time.time() * 1000)
    schema = store.schema
    for first in range(0, len(names), chunk):
        calls = [
            Collect(schema.for_game(g), g, entries(first + i, per_game, now), CAP, TTL)
            for i, g in enumerate(names[first : first + chunk])
        ]
        failed = [r for r in store.call_many(calls) if isinstance(r, Exception)]
        if failed:
            raise RuntimeError(f"collect failed: {failed[0]}")


# -- (b) the sweep and un-registering -----------------------------------------------------


def sweep_reads(store: Store, per_page: int = 256) -> tuple[float, int]:
    """One round of what every shard's sweeper reads before it claims: the ring, page by
    page, and each listed game's length and head.  (seconds, games listed)."""
    listed = 0
    start = time.perf_counter()
    for keys in store.schema.all_shards():
        after = ""
        while True:
            ring = store.ring(keys, after, per_page)
            store.game_states(keys, ring.games)
            listed += len(ring.games)
            if len(ring.games) < per_page:
                break
            after = ring.games[-1]
    return time.perf_counter() - start, listed


def median_sweep(store: Store, rounds: int = 5) -> tuple[float, int]:
    runs = [sweep_reads(store) for _ in range(rounds)]
    return statistics.median(s for s, _ in runs), runs[0][1]


def unregister(store: Store, names: list[str]) -> None:
    """Un-register games the way the sweeper does: their buffer gone (as its TTL would), a
    claim finds it empty and takes the game out of the ring."""
    client = store.backend.client
    schema = store.schema
    for first in range(0, len(names), 2000):
        group = names[first : first + 2000]
        with client.pipeline(transaction=False) as pipe:
            for g in group:
                pipe.delete(schema.for_game(g).queue(g))
            pipe.execute()
        calls = [
            Claim(schema.for_game(g), g, f"u{first + i}", "bench", 128, 1, 30_000, 0, 0, 100)
            for i, g in enumerate(group)
        ]
        failed = [r for r in store.call_many(calls) if isinstance(r, Exception)]
        if failed:
            raise RuntimeError(f"claim failed: {failed[0]}")


def server_usec(client: redis.Redis, command: str) -> float:
    """Server-side microseconds per call of ``command`` since the last CONFIG RESETSTAT."""
    stats: dict[str, Any] = client.info("commandstats")
    return float(stats.get(f"cmdstat_{command}", {}).get("usec_per_call", 0.0))


@dataclass
class SweepRow:
    registered: int
    shards: int
    all_active_s: float
    all_active_listed: int
    few_active_s: float
    few_active_listed: int
    unregister_us: float  # claim.lua on an empty game (SREM + ZREM), server time
    lrem_us: float  # the old way: LREM over a list as long as the shard's ring, server time


def sweep_row(client: redis.Redis, url: str, registered: int, active: int, shards: int) -> SweepRow:
    """``registered`` games seen; the sweep timed with all of them holding events, then with
    only ``active`` of them holding events (the rest un-registered)."""
    client.flushall()
    store = store_for(url, shards)
    names = [f"game-{i:06d}" for i in range(registered)]
    register(store, names)
    all_s, all_n = median_sweep(store)
    idle = names[active:]
    sample = idle[:: max(1, len(idle) // 1000)][:1000]  # timed: spread over the ring
    rest = [g for g in idle if g not in set(sample)]
    client.config_resetstat()
    unregister(store, sample)
    claim_us = max(server_usec(client, "evalsha"), server_usec(client, "fcall"))
    unregister(store, rest)
    few_s, few_n = median_sweep(store)
    # The previous design's un-register: LREM over the shard's ring (a list), same length.
    ring_len = max(1, registered // shards)
    old = [f"game-{i:06d}" for i in range(ring_len)]
    for first in range(0, ring_len, 10_000):
        client.rpush("bench:old-ring", *old[first : first + 10_000])
    client.config_resetstat()
    for name in old[:: max(1, ring_len // 200)][:200]:
        client.lrem("bench:old-ring", 0, name)
    lrem_us = server_usec(client, "lrem")
    client.delete("bench:old-ring")
    store.close()
    return SweepRow(registered, shards, all_s, all_n, few_s, few_n, claim_us, lrem_us)


# -- (c) memory per buffered event --------------------------------------------------------


@dataclass
class MemoryResult:
    events: int
    games: int
    entry_bytes: float
    project_bytes_per_event: float
    plain_bytes_per_event: float


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def memory_side_by_side(
    project: redis.Redis, project_url: str, plain: redis.Redis, events: int, games: int, shards: int
) -> MemoryResult:
    """The same entries buffered through collect.lua on one server and RPUSHed to plain lists
    (same key names) on another, started together; used_memory growth per event on each."""
    project.flushall()
    plain.flushall()
    store = store_for(project_url, shards)
    schema = store.schema
    per_game = events // games
    before = used_memory(project), used_memory(plain)
    now = int(time.time() * 1000)
    size = 0
    for game_no in range(games):
        game = f"game-{game_no:05d}"
        batch = entries(game_no, per_game, now)
        size += sum(len(e) for e in batch)
        for first in range(0, per_game, 5000):
            store.call(Collect(schema.for_game(game), game, batch[first : first + 5000], CAP, TTL))
            plain.rpush(schema.for_game(game).queue(game), *batch[first : first + 5000])
    total = per_game * games
    after = used_memory(project), used_memory(plain)
    store.close()
    return MemoryResult(
        total, games, size / total, (after[0] - before[0]) / total, (after[1] - before[1]) / total
    )


# -- (e) status --no-shards -------------------------------------------------------------------


@dataclass
class StatusResult:
    shards: int
    games: int
    seconds: list[float]
    lines: int


def status_no_shards(
    client: redis.Redis, url: str, shards: int, games: int, runs: int = 3
) -> StatusResult:
    """``telemetry-reporter status --no-shards`` (a real process, as an operator runs it)
    against ``games`` games buffered over ``shards`` shards: wall time per run."""
    client.flushall()
    store = store_for(url, shards)
    register(store, [f"game-{i:05d}" for i in range(games)], per_game=3)
    store.close()
    cli = Path(sys.executable).with_name("telemetry-reporter")
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "scale.toml"
        config.write_text(
            f'[redis]\nurl = "{url}"\nshards = {shards}\n\n'
            '[sink]\nurl = "http://127.0.0.1:9/ingest"\n'
        )
        seconds: list[float] = []
        out = ""
        for _ in range(runs):
            start = time.perf_counter()
            done = subprocess.run(
                [str(cli), "status", "--no-shards", "--config", str(config)],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "NO_COLOR": "1"},
            )
            seconds.append(time.perf_counter() - start)
            out = done.stdout
    return StatusResult(shards, games, seconds, len(out.splitlines()))


# -- (f) status with dead letters -------------------------------------------------------------


@dataclass
class DeadReadResult:
    dead: int
    server_ms: float  # Redis time of a read_shard call of the shard holding them (median)
    status_seconds: float  # one full ``status`` read, in process


def status_with_dead(url: str, dead: int, per_batch: int = 10, calls: int = 20) -> DeadReadResult:
    """``dead`` dead letters (``per_batch`` events each, a reason of 120 characters as the
    senders keep) in one shard of 16; then the Redis time of reading that shard's state
    (``read_shard``: the median of ``calls`` calls in SLOWLOG) and the wall time of a full
    ``status`` read."""
    store = store_for(url, 16)
    client = redis.Redis.from_url(url)
    client.flushall()
    game = "dead-game"
    keys = store.schema.for_game(game)
    register(store, [game], per_game=dead * per_batch)
    policy = RetryPolicy(1, 1, 1, dead + 1)
    made = 0
    while made < dead:
        claimed = store.call(
            Claim(
                keys,
                game,
                f"b{made}",
                "t",
                per_batch,
                MOST_BATCHES,
                60_000,
                86_400_000,
                0,
                dead + 1,
            )
        )
        for batch in claimed.batches:
            store.call(
                Nack(keys, batch.batch_id, "t", policy, 0.0, True, 0, "HTTP 400: " + "x" * 110)
            )
        made += len(claimed.batches)
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 4 * calls + 16)
    client.slowlog_reset()
    for _ in range(calls):
        store.read_shard(keys)
    script_us = [
        e["duration"]
        for e in client.slowlog_get(4 * calls + 16)
        if e["command"].split(b" ")[0].lower() in (b"evalsha", b"eval")
    ]
    client.config_set("slowlog-log-slower-than", 10_000)
    start = time.perf_counter()
    read_totals_of(store)
    seconds = time.perf_counter() - start
    store.close()
    client.close()
    return DeadReadResult(made, statistics.median(script_us) / 1000, seconds)


def read_totals_of(store: Store) -> int:
    """What ``status`` reads of every shard (``read_shards``): the shards read."""
    return len(store.read_shards())


# -- (g) what a shard keeps to answer repeats ------------------------------------------------


@dataclass
class KeptResult:
    writers: int
    writes_each: int
    record_bytes: float  # per field of the writes hash (a remembered write or a writer's range)
    writer_bytes: float  # per member of the writers set


def written_once_memory(url: str, writers: int, writes_each: int) -> KeptResult:
    """``writers`` SDK writers, each with ``writes_each`` writes to one shard still without an
    answer (the most a shard keeps of a writer is 1,024): Redis bytes per field of the
    shard's writes hash and per writer (MEMORY USAGE, every element counted: SAMPLES 0)."""
    store = store_for(url, 1)
    client = redis.Redis.from_url(url)
    client.flushall()
    keys = store.schema.shard(0)
    now = int(time.time() * 1000)
    calls = [
        Collect(
            keys,
            "g",
            entries(0, 1, now),
            CAP,
            TTL,
            writer=f"host-{w:05d}.4242.9f3a1c",
            seq=seq,
            low=1,
        )
        for w in range(writers)
        for seq in range(1, writes_each + 1)
    ]
    for first in range(0, len(calls), 2000):
        store.call_many(calls[first : first + 2000])
    records, members = int(client.hlen(keys.writes)), int(client.zcard(keys.writers))
    result = KeptResult(
        writers,
        writes_each,
        int(client.memory_usage(keys.writes, samples=0) or 0) / records,
        int(client.memory_usage(keys.writers, samples=0) or 0) / members,
    )
    store.close()
    client.close()
    return result
