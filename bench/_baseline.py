"""The reference design bench/pipeline.py compares against (embedded here; it is not project code).

Collecting: a per-event Lua script (RPUSH, LTRIM to the cap, SADD into a registry set) called in
the collecting thread.  Reporting: one thread that loops over the registry doing LRANGE 0 127 +
LTRIM 128 -1 per game (one MULTI/EXEC round trip) and one httpx POST per drained batch.  Each
entry is the 13-digit collect time in ms followed by the event's JSON.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import httpx
import orjson
import redis

from bench._pipeline_workload import BATCH, CollectFn, make_event

BASELINE_LUA = """
-- reference design: one call per event.
-- KEYS[1] the game's list, KEYS[2] registry set of games; ARGV[1] game, ARGV[2] cap, ARGV[3] entry
redis.call('RPUSH', KEYS[1], ARGV[3])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
redis.call('SADD', KEYS[2], ARGV[1])
return 0
"""
BASELINE_REGISTRY = "ref:games"
BASELINE_POLL_S = 0.1  # the baseline's pause after a pass that found nothing


def baseline_queue(game: str) -> str:
    return f"ref:q:{game}"


# -- collecting -----------------------------------------------------------------------------------


def baseline_collect(redis_url: str, cap: int) -> CollectFn:
    """The game side: one script call per event, in the caller's thread."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    script = client.register_script(BASELINE_LUA)

    def collect(game: str, event: dict[str, Any]) -> object:
        entry = b"%013d" % (time.time_ns() // 1_000_000) + orjson.dumps(event)
        return script(keys=(baseline_queue(game), BASELINE_REGISTRY), args=(game, cap, entry))

    return collect


def preload_baseline(client: redis.Redis, games: list[str], per_game: int, cap: int) -> int:
    script = client.register_script(BASELINE_LUA)
    seq = 0
    with client.pipeline(transaction=False) as pipe:
        for _ in range(per_game):
            stamp = b"%013d" % (time.time_ns() // 1_000_000)
            for game in games:
                entry = stamp + orjson.dumps(make_event(seq, int(stamp)))
                script(
                    keys=(baseline_queue(game), BASELINE_REGISTRY),
                    args=(game, cap, entry),
                    client=pipe,
                )
                seq += 1
                if seq % 2000 == 0:
                    pipe.execute()
        pipe.execute()
    return seq


def baseline_left(client: redis.Redis, games: Sequence[str]) -> int:
    with client.pipeline(transaction=False) as pipe:
        for game in games:
            pipe.llen(baseline_queue(game))
        return sum(int(n) for n in pipe.execute())


# -- reporting (child process) --------------------------------------------------------------------


def _baseline_pass(
    client: redis.Redis, http: httpx.Client, url: str, max_age_ms: int
) -> tuple[int, int, int]:
    """One pass over the registry: (events drained, stale dropped, POSTs)."""
    drained = stale = posts = 0
    for raw_game in client.smembers(BASELINE_REGISTRY):
        game = raw_game.decode() if isinstance(raw_game, bytes) else str(raw_game)
        with client.pipeline(transaction=True) as pipe:
            pipe.lrange(baseline_queue(game), 0, BATCH - 1)
            pipe.ltrim(baseline_queue(game), BATCH, -1)
            entries, _ = pipe.execute()
        if not entries:
            continue
        drained += len(entries)
        now_ms = int(time.time() * 1000)
        fresh = [e[13:] for e in entries if now_ms - int(e[:13]) <= max_age_ms]
        stale += len(entries) - len(fresh)
        if fresh:
            body = b"".join(
                (
                    b'{"game":',
                    orjson.dumps(game),
                    b',"batch_id":"',
                    uuid.uuid4().hex.encode(),
                    b'","events":[',
                    b",".join(fresh),
                    b"]}",
                )
            )
            http.post(
                url, content=body, headers={"Content-Type": "application/json"}
            ).raise_for_status()
            posts += 1
    return drained, stale, posts


def baseline_drain_main(redis_url: str, sink_url: str, max_age_ms: int, conn: Connection) -> None:
    """The reference design's reporter: one thread, one POST per LRANGE/LTRIM batch."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    http = httpx.Client(timeout=5)
    client.ping()
    conn.send(("ready", os.getpid()))
    conn.recv()
    cpu, wall = time.process_time(), time.time()
    conn.send(("started", wall))
    totals = Counter[str]()
    while not conn.poll():
        drained, stale, posts = _baseline_pass(client, http, sink_url, max_age_ms)
        totals.update(drained=drained, stale=stale, posts=posts)
        if not drained:
            time.sleep(BASELINE_POLL_S)
    conn.recv()
    conn.send(("done", {"cpu": time.process_time() - cpu, "counts": dict(totals)}))
