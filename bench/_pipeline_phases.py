"""bench/pipeline.py's phases: what each one sets up, times and reads back.

* ``run_drain`` (phase 1, drain+POST): pre-load, start one reporter process, time until the
  endpoint has every event.
* ``run_e2e`` (phases 2 and 3, end-to-end and latency): the collector and the reporter in
  separate processes at the offered rate, then wait for the backlog to drain and read the
  counters (``reporter._monitoring.accounting``) and the endpoint's latency histogram.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from bench._baseline import baseline_drain_main, baseline_left, preload_baseline
from bench._fast_endpoint import FastEndpoint
from bench._pipeline_children import SETTLE_TIMEOUT_S, Child, collector_main, our_reporter_main
from bench._pipeline_report import DrainResult, E2EResult
from bench._pipeline_workload import (
    BATCH,
    HOT_GAME,
    HOT_THREADS,
    Raw,
    game_schedule,
    make_config,
    make_event,
    our_raw,
    preload_games,
)
from collector import Collector
from collector import counters as vocab
from collector.store import KeySchema, SingleServer, Store
from reporter._config import ReporterConfig
from reporter._monitoring.accounting import Totals, read_totals
from tests.support.servers import Server

DRAIN_TIMEOUT_S = 180.0
_DEFAULTS = ReporterConfig()
SCHEMA = KeySchema(_DEFAULTS.redis.key_prefix, _DEFAULTS.redis.shards)


@dataclass
class Context:
    args: argparse.Namespace
    server: Server
    client: redis.Redis
    endpoint: FastEndpoint
    profile: Path | None
    reporter_overrides: dict[str, Any] = field(default_factory=dict)


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


PY_SPY = Path(sys.executable).with_name("py-spy")


@contextmanager
def profiled(pid: int, out: Path | None, name: str) -> Iterator[None]:
    """py-spy record the process while the block runs (``--profile``)."""
    if out is None:
        yield
        return
    target = out / f"{name}.txt"
    proc = subprocess.Popen(
        [
            str(PY_SPY),
            "record",
            "--pid",
            str(pid),
            "--rate",
            "200",
            "--format",
            "raw",
            "--gil",
            "--threads",
            "--nonblocking",
            "--output",
            str(target),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        print(f"  profile of {name}: {target}", file=sys.stderr)


def preload_ours(raw: Raw, games: list[str], per_game: int) -> int:
    """Store every event through the collector; its buffer holds them all, so none drop."""
    total = len(games) * per_game
    preload = {
        **raw,
        "collector": {
            **raw["collector"],
            "max_buffer_events": total,
            "max_buffer_bytes": 64 * 1024**3,
        },
        # a request of the ingest (unused here) must fit in that buffer
        "ingest": {
            **raw["ingest"],
            "max_events_per_request": min(raw["ingest"]["max_events_per_request"], total),
        },
    }
    collector = Collector(config=make_config(preload))
    seq = 0
    try:
        for _ in range(per_game):
            now_ms = time.time_ns() // 1_000_000
            for game in games:
                collector.collect(game, make_event(seq, now_ms))
                seq += 1
        if not collector.flush(SETTLE_TIMEOUT_S):
            raise RuntimeError("pre-load: flush timed out")
        stats = collector.stats()
        if stats[vocab.Counter.STORED] != seq:
            raise RuntimeError(f"pre-load: {seq} collected but {stats['stored']} stored")
    finally:
        collector.close(timeout=5)
    return seq


def wait_received(endpoint: FastEndpoint, n: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        count = endpoint.count()
        if count["events"] >= n or time.monotonic() >= deadline:
            return count
        time.sleep(0.02)


def run_drain(kind: str, ctx: Context) -> DrainResult:
    """Phase 1: pre-load, start one reporter process, time until the endpoint has it all."""
    ctx.client.flushall()
    ctx.endpoint.reset()
    games = preload_games(ctx.args.games)
    per_game = -(-ctx.args.events // (len(games) * BATCH)) * BATCH  # whole batches per game
    cap = per_game * 2
    raw = our_raw(
        ctx.server.url,
        ctx.endpoint.url,
        cap=cap,
        linger_ms=ctx.args.linger_ms,
        hot_games={},
        reporter=ctx.reporter_overrides,
    )
    if kind == "ours":
        n = preload_ours(raw, games, per_game)
        child = Child(our_reporter_main, raw, name="reporter")
    else:
        n = preload_baseline(ctx.client, games, per_game, cap)
        child = Child(
            baseline_drain_main,
            ctx.server.url,
            ctx.endpoint.url,
            int(raw["reporter"]["max_age_seconds"] * 1000),
            name="baseline-drain",
        )
    result = DrainResult(n)
    try:
        redis0 = redis_cpu(ctx.client)
        endpoint0 = float(ctx.endpoint.stats()["cpu"])
        with profiled(child.pid, ctx.profile, f"drain-{kind}"):
            started = child.go()
            count = wait_received(ctx.endpoint, n, DRAIN_TIMEOUT_S)
        done = child.finish()
        stats = ctx.endpoint.stats()
    finally:
        child.close()
    result.received = int(count["events"])
    result.seconds = float(count["last"]) - started if count["last"] else 0.0
    result.batches = int(stats["batches"])
    result.duplicates = int(stats["dup_events"])
    result.cpu.parts = {
        "reporter": float(done["cpu"]),
        "redis": redis_cpu(ctx.client) - redis0,
        "endpoint": float(stats["cpu"]) - endpoint0,
    }
    return result


def settle(kind: str, ctx: Context, expected: int, games: Sequence[str]) -> float:
    """Wait for the backlog to drain after the collector stopped; seconds it took."""
    start = time.monotonic()
    schema = SCHEMA
    while time.monotonic() - start < SETTLE_TIMEOUT_S:
        if kind == "ours":
            totals = read_totals(Store(SingleServer(ctx.client), schema))
            if totals.buffered + totals.pending_events == 0:
                break
        elif baseline_left(ctx.client, games) == 0 or ctx.endpoint.count()["events"] >= expected:
            break
        time.sleep(0.05)
    return time.monotonic() - start


def steady_rate(
    per_second: Mapping[str, int], start: float, end: float, skip: int
) -> tuple[float, int]:
    """Mean and minimum of whole seconds' deliveries from ``start + skip`` to ``end``."""
    first, last = int(start) + 1 + skip, int(end) - 1
    seconds = [int(per_second.get(str(s), 0)) for s in range(first, last + 1)]
    if not seconds:
        return 0.0, 0
    return sum(seconds) / len(seconds), min(seconds)


def run_e2e(kind: str, ctx: Context) -> E2EResult:
    """Phase 2/3: collector and reporter in separate processes at the offered rate."""
    args = ctx.args
    ctx.client.flushall()
    ctx.endpoint.reset()
    schedule = game_schedule(args.e2e_games, args.hot_share)
    raw = our_raw(
        ctx.server.url,
        ctx.endpoint.url,
        cap=args.cap,
        linger_ms=args.linger_ms,
        hot_games={HOT_GAME: HOT_THREADS},
        reporter=ctx.reporter_overrides,
    )
    if kind == "ours":
        reporter = Child(our_reporter_main, raw, name="reporter")
    else:
        reporter = Child(
            baseline_drain_main,
            ctx.server.url,
            ctx.endpoint.url,
            int(raw["reporter"]["max_age_seconds"] * 1000),
            name="baseline-drain",
        )
    result = E2EResult(args.rate, args.seconds)
    try:
        collector = Child(
            collector_main, kind, raw, schedule, args.rate, args.seconds, name="collector"
        )
        redis0 = redis_cpu(ctx.client)
        endpoint0 = float(ctx.endpoint.stats()["cpu"])
        reporter.go()
        with profiled(reporter.pid, ctx.profile, f"e2e-{kind}"):
            t0 = collector.go()
            generated = collector.expect("generated", args.seconds + 60)
            at_end = ctx.endpoint.count()
            collected = collector.expect("done", SETTLE_TIMEOUT_S + 30)
            result.settle_s = settle(kind, ctx, int(generated["sent"]), sorted(set(schedule)))
        done = reporter.finish()
        collector.close()
        stats = ctx.endpoint.stats()
    finally:
        reporter.close()
    _fill_e2e(result, kind, ctx, generated, collected, at_end, stats, t0, sorted(set(schedule)))
    result.cpu.parts = {
        "collector": float(collected["cpu"]),
        "reporter": float(done["cpu"]),
        "redis": redis_cpu(ctx.client) - redis0,
        "endpoint": float(stats["cpu"]) - endpoint0,
    }
    if kind != "ours":
        result.drops["stale (drain)"] = int(done["counts"].get("stale", 0))
    return result


def _fill_e2e(
    result: E2EResult,
    kind: str,
    ctx: Context,
    generated: Mapping[str, Any],
    collected: Mapping[str, Any],
    at_end: Mapping[str, Any],
    stats: Mapping[str, Any],
    t0: float,
    games: Sequence[str],
) -> None:
    sdk = collected["stats"]
    result.collected = int(sdk[vocab.Counter.ACCEPTED])
    result.collect_elapsed = float(generated["elapsed"])
    result.worst_lag = int(generated["worst_lag"])
    result.delivered = int(stats["events"])
    result.duplicates = int(stats["dup_events"])
    result.batches = int(stats["batches"])
    result.backlog_at_end = int(generated["sent"]) - int(at_end["events"])
    skip = 2 if result.seconds >= 10 else 0
    result.steady_rate, result.min_second = steady_rate(
        stats["per_second"], t0, float(generated["end"]), skip
    )
    result.latency = Counter({int(k): int(v) for k, v in stats["latency"].items()})
    if kind == "ours":
        totals: Totals = read_totals(Store(SingleServer(ctx.client), SCHEMA))
        result.drops = {
            "evicted": totals.counter(vocab.Counter.EVICTED),
            "stale": totals.counter(vocab.Counter.STALE),
            "dead-lettered": totals.dead_now,
            "sdk dropped": int(sdk[vocab.Counter.DROPPED_BUFFER_FULL])
            + int(sdk[vocab.Counter.DROPPED_AT_CLOSE]),
        }
        result.left = totals.buffered + totals.pending_events
    else:
        result.left = baseline_left(ctx.client, games)
