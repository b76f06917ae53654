"""Benchmark ``Collector.collect()``: caller-side cost and events/s stored in Redis.

Runs three ways of storing the same events, one after the other, against a private server it
starts on a free loopback port (never the machine's Redis on 6379):

* ``background``: the default mode; ``collect()`` appends to the in-process buffer and the
  flusher thread writes many events per script call, pipelined.
* ``sync``: ``Collector(mode="sync")``; one write per event in the caller's thread.
* ``baseline``: the reference design; one small Lua script call per event (RPUSH, LTRIM to the
  cap, EXPIRE, SADD the game into a registry set) through redis-py's ``register_script``, in
  the caller's thread.  It serialises with orjson and prefixes the same 13-digit timestamp as
  the collector, so the comparison is about the write path, not the JSON library.

For each way: every call is timed with ``time.perf_counter_ns`` (p50/p99/p99.9/max), and the
stored rate is N divided by the wall time from the first ``collect()`` until all N events are
in Redis (``flush()`` returned True *and* the shards' ``stored`` counters, or the lists'
lengths for the baseline, reached N).  Caches are warm: each way first stores a few events of
every game (connections open, scripts loaded, game names validated), then the keys are
deleted and the measured run starts.

The sync mode and the baseline pay a network round trip per event, so by default they store
only the first 20,000 of the events (``--sync-events``) to keep the run well under 90 s.

``--keyed`` adds a fourth way, ``keyed``: the background mode with a distinct
``dedup_key`` on every event (nothing merges: every key is remembered, the most memory a key
can take).  Its table adds what Redis holds for the keys (``MEMORY USAGE`` of every game's
``seen`` set over the keys in them) and for the written-once memory (the shards' ``writes``
and ``writers`` over the writes remembered).

    .venv/bin/python -m bench.collect [--events 200000] [--sync-events 20000] [--games 50]
                                      [--server redis|valkey] [--keyed] [--small]

``--small`` stores a few thousand events each way, in seconds: a check that the script works
(``tests/test_benches.py`` runs it), not a measurement.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import orjson
import redis

from bench._harness import (
    command_line,
    describe_server,
    footer,
    header,
    parse,
    server_binary,
    start_server,
)
from collector import Collector
from collector.counters import Counter
from collector.store import KeySchema

Event = Mapping[str, Any]
Work = list[tuple[str, Event]]
CollectFn = Callable[[str, Event], object]

# Targets (see docs/benchmarks.md).
TARGET_P50_US = 5.0
TARGET_P99_US = 50.0
TARGET_STORED_PER_S = 100_000
TARGET_VS_BASELINE = 50.0

EVENT_POOL = 8192  # distinct event dicts, cycled over the N calls
WARMUP_PER_GAME = 4
SMALL = {"events": 5000, "sync_events": 500, "games": 10}  # --small: every way, in seconds
STORE_TIMEOUT_S = 60.0

BASELINE_LUA = """
-- reference design: one call per event.
-- KEYS[1] the game's list, KEYS[2] registry set of games
-- ARGV[1] game, ARGV[2] cap (events), ARGV[3] ttl (s), ARGV[4] entry
local len = redis.call('RPUSH', KEYS[1], ARGV[4])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('SADD', KEYS[2], ARGV[1])
return len
"""
BASELINE_PREFIX = "ref"
BASELINE_TTL_S = 3600


@dataclass
class Outcome:
    """What one way of storing the events measured."""

    name: str
    events: int
    latencies_ns: array[int]
    loop_s: float = 0.0
    wall_s: float = 0.0
    flushed: bool = True
    in_redis: int = 0
    script_commands: int = 0
    lost: dict[str, int] = field(default_factory=dict)
    memory: dict[str, str] = field(default_factory=dict)  # what Redis holds for the keys
    _sorted: list[int] = field(default_factory=list, repr=False)

    def pct_us(self, q: float) -> float:
        if not self._sorted:
            self._sorted = sorted(self.latencies_ns)
        ordered = self._sorted
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] / 1000

    @property
    def rate(self) -> float:
        return self.events / self.wall_s if self.wall_s else 0.0


# -- workload ----------------------------------------------------------------------------------


def make_work(n: int, games: int, seed: int = 20261122) -> Work:
    """N (game, event) pairs: small anti-addiction-style behaviour events, games uniform."""
    rng = random.Random(seed)
    names = [f"game-{i:03d}" for i in range(games)]
    pool: list[tuple[str, Event]] = []
    for i in range(min(n, EVENT_POOL)):
        event = {
            "si": f"{rng.getrandbits(128):032x}",
            "bt": rng.choice((0, 1)),
            "ot": 1_732_243_545 + i,
            "ct": rng.choice((0, 0, 0, 2)),
            "pi": f"1fffbjzos82bs9cfjr{rng.getrandbits(64):016x}",
        }
        pool.append((names[rng.randrange(games)], event))
    return [pool[i % len(pool)] for i in range(n)]


def forget_all_but_markers(client: redis.Redis) -> None:
    """Delete every key but the shards' markers: the measured run starts from empty buffers
    and counters, and the SDK does not take the empty shards for a store that lost its data
    (it would say so in a warning line)."""
    doomed = [key for key in client.scan_iter(count=1000) if not key.endswith(b":marker")]
    for start in range(0, len(doomed), 1000):
        client.delete(*doomed[start : start + 1000])


def warmup_work(work: Work) -> Work:
    first: dict[str, Event] = {}
    for game, event in work:
        first.setdefault(game, event)
    return [(g, e) for g, e in first.items() for _ in range(WARMUP_PER_GAME)]


def timed_calls(fn: CollectFn, work: Work) -> tuple[array[int], int]:
    """Call ``fn`` for every pair, timing each call; return latencies and the start time."""
    lat = array("q", bytes(8 * len(work)))
    clock = time.perf_counter_ns
    start = clock()
    for i, (game, event) in enumerate(work):
        t0 = clock()
        fn(game, event)
        lat[i] = clock() - t0
    return lat, start


def timed_keyed_calls(
    fn: Callable[..., object], work: Work, keys: Sequence[str]
) -> tuple[array[int], int]:
    """``timed_calls``, each call with its dedup key."""
    lat = array("q", bytes(8 * len(work)))
    clock = time.perf_counter_ns
    start = clock()
    for i, (game, event) in enumerate(work):
        key = keys[i]
        t0 = clock()
        fn(game, event, dedup_key=key)
        lat[i] = clock() - t0
    return lat, start


def timer_overhead_ns() -> int:
    """Median cost of the two clock reads around each measured call."""
    clock = time.perf_counter_ns
    samples = []
    for _ in range(20_000):
        t0 = clock()
        samples.append(clock() - t0)
    return sorted(samples)[len(samples) // 2]


# -- the collector ------------------------------------------------------------------------------


def shard_counters(client: redis.Redis, schema: KeySchema) -> dict[str, int]:
    names = (
        Counter.STORED,
        Counter.EVICTED,
        Counter.DROPPED_BUFFER_FULL,
        Counter.DROPPED_TOO_LARGE,
    )
    totals: dict[str, int] = dict.fromkeys(names, 0)
    with client.pipeline(transaction=False) as pipe:
        for shard in schema.all_shards():
            pipe.hgetall(shard.stats)
        for stats in pipe.execute():
            for key, value in stats.items():
                name = key.decode()
                if name in totals:
                    totals[name] += int(value)
    return totals


def script_commands(client: redis.Redis) -> int:
    """EVAL/EVALSHA/SCRIPT commands the server ran since the last CONFIG RESETSTAT."""
    stats = client.info("commandstats")
    return sum(
        int(v["calls"])
        for k, v in stats.items()
        if k.startswith(("cmdstat_eval", "cmdstat_script"))
    )


def list_lengths(client: redis.Redis, keys: Sequence[str]) -> int:
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.llen(key)
        return sum(int(n) for n in pipe.execute())


def key_memory(client: redis.Redis, schema: KeySchema, games: Sequence[str]) -> dict[str, str]:
    """Bytes Redis holds per remembered dedup key and per remembered write (MEMORY USAGE,
    every element counted: SAMPLES 0)."""
    keys = sum(int(client.zcard(schema.for_game(g).seen(g))) for g in games)
    key_bytes = sum(
        int(client.memory_usage(schema.for_game(g).seen(g), samples=0) or 0) for g in games
    )
    writes = sum(
        max(0, int(client.hlen(s.writes)) - int(client.zcard(s.writers)))
        for s in schema.all_shards()
    )
    write_bytes = sum(
        int(client.memory_usage(k, samples=0) or 0)
        for s in schema.all_shards()
        for k in (s.writes, s.writers)
    )
    return {
        "dedup keys remembered": f"{keys:,}",
        "Redis bytes per dedup key": f"{key_bytes / keys:.1f}" if keys else "-",
        "writes remembered (all shards)": f"{writes:,}",
        "written-once bytes (all shards)": f"{write_bytes:,}",
    }


def run_collector(
    mode: str,
    url: str,
    client: redis.Redis,
    work: Work,
    *,
    buffer_events: int,
    cap: int,
    keys: Sequence[str] = (),
) -> Outcome:
    c = Collector(url=url, mode=mode, max_buffer_events=buffer_events, max_events_per_game=cap)
    schema = KeySchema(c.config.redis.key_prefix, c.config.redis.shards)
    games = sorted({g for g, _ in work})
    try:
        for game, event in warmup_work(work):
            c.collect(game, event)
        if not c.flush(STORE_TIMEOUT_S):
            raise RuntimeError(f"{mode}: warm-up flush timed out")
        forget_all_but_markers(client)  # the script cache stays warm
        client.config_resetstat()
        before = c.stats()

        if keys:
            lat, start = timed_keyed_calls(c.collect, work, keys)
        else:
            lat, start = timed_calls(c.collect, work)
        loop_end = time.perf_counter_ns()
        flushed = c.flush(STORE_TIMEOUT_S)
        deadline = time.monotonic() + STORE_TIMEOUT_S
        while (
            shard_counters(client, schema)[Counter.STORED] < len(work)
            and time.monotonic() < deadline
        ):
            time.sleep(0.0005)
        end = time.perf_counter_ns()

        after = c.stats()
        commands = script_commands(client)
        counters = shard_counters(client, schema)
        stored = list_lengths(client, [schema.for_game(g).queue(g) for g in games])
        memory = key_memory(client, schema, games) if keys else {}
    finally:
        c.close()
    lost = {
        "dropped_buffer_full": after["dropped_buffer_full"] - before["dropped_buffer_full"],
        "dropped_too_large": after["dropped_too_large"] - before["dropped_too_large"],
        "dropped_at_close": c.stats()["dropped_at_close"] - before["dropped_at_close"],
        "evicted": after["evicted"] - before["evicted"],
        "backend_errors": after["backend_errors"] - before["backend_errors"],
        "redis: evicted": counters[Counter.EVICTED],
        "redis: dropped in SDK": (
            counters[Counter.DROPPED_BUFFER_FULL] + counters[Counter.DROPPED_TOO_LARGE]
        ),
    }
    if counters[Counter.STORED] != stored:
        lost["redis: stored counter - list lengths"] = counters[Counter.STORED] - stored
    return Outcome(
        "keyed" if keys else mode,
        len(work),
        lat,
        (loop_end - start) / 1e9,
        (end - start) / 1e9,
        flushed,
        stored,
        commands,
        lost,
        memory,
    )


# -- the baseline -------------------------------------------------------------------------------


def run_baseline(url: str, client: redis.Redis, work: Work, cap: int) -> Outcome:
    r = redis.Redis.from_url(url, socket_timeout=5)
    script = r.register_script(BASELINE_LUA)
    registry = f"{BASELINE_PREFIX}:games"
    evicted = 0

    def collect(game: str, event: Event) -> int:
        entry = b"%013d" % (time.time_ns() // 1_000_000) + orjson.dumps(event)
        return int(
            script(
                keys=(f"{BASELINE_PREFIX}:q:{game}", registry),
                args=(game, cap, BASELINE_TTL_S, entry),
            )
        )

    try:
        for game, event in warmup_work(work):
            collect(game, event)
        client.flushall()
        client.config_resetstat()
        lat, start = timed_calls(collect, work)
        end = time.perf_counter_ns()  # each call returned after the server stored the event
        commands = script_commands(client)
        games = sorted({g for g, _ in work})
        stored = list_lengths(client, [f"{BASELINE_PREFIX}:q:{g}" for g in games])
        evicted = len(work) - stored
    finally:
        r.close()
    return Outcome(
        "baseline",
        len(work),
        lat,
        (end - start) / 1e9,
        (end - start) / 1e9,
        True,
        stored,
        commands,
        {"evicted": evicted},
    )


# -- report -------------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def print_table(results: Sequence[Outcome], overhead_ns: int) -> bool:
    """Print the table and the checks; whether every event is in Redis, none dropped."""
    bg, sync, base = results[:3]
    rows: list[tuple[str, Callable[[Outcome], str]]] = [
        ("events", lambda o: f"{o.events:,}"),
        ("collect() p50 (us)", lambda o: f"{o.pct_us(0.50):.2f}"),
        ("collect() p99 (us)", lambda o: f"{o.pct_us(0.99):.2f}"),
        ("collect() p99.9 (us)", lambda o: f"{o.pct_us(0.999):.1f}"),
        ("collect() max (us)", lambda o: f"{o.pct_us(1.0):,.0f}"),
        ("caller loop (s)", lambda o: f"{o.loop_s:.2f}"),
        ("first collect -> all stored (s)", lambda o: f"{o.wall_s:.2f}"),
        ("stored events/s", lambda o: f"{o.rate:,.0f}"),
        ("stored / baseline", lambda o: f"{o.rate / base.rate:.1f}x"),
        ("script commands / event", lambda o: f"{o.script_commands / o.events:.4f}"),
        ("events in Redis (list lengths)", lambda o: f"{o.in_redis:,}"),
        ("flush() returned True", lambda o: "yes" if o.flushed else "NO"),
    ]
    names = sorted({k for o in results for k in o.lost}, key=_lost_order)
    rows += [(name, _lost_cell(name)) for name in names]
    for name in dict.fromkeys(k for o in results for k in o.memory):
        rows.append((name, _memory_cell(name)))
    width = max(len(label) for label, _ in rows) + 2
    print(f"{'':<{width}}" + "".join(f"{o.name:>14}" for o in results))
    for label, cell in rows:
        print(f"{label:<{width}}" + "".join(f"{cell(o):>14}" for o in results))
    print(
        f"(timer overhead per measured call: ~{overhead_ns} ns, included in the figures; "
        "'-' = not applicable)"
    )
    print()
    checks = [
        (
            f"background collect() p50 <= {TARGET_P50_US:g} us",
            f"{bg.pct_us(0.5):.2f} us",
            bg.pct_us(0.5) <= TARGET_P50_US,
        ),
        (
            f"background collect() p99 <= {TARGET_P99_US:g} us",
            f"{bg.pct_us(0.99):.2f} us",
            bg.pct_us(0.99) <= TARGET_P99_US,
        ),
        (
            f"stored >= {TARGET_STORED_PER_S:,} events/s (background)",
            f"{bg.rate:,.0f}/s",
            bg.rate >= TARGET_STORED_PER_S,
        ),
        (
            f"stored >= {TARGET_VS_BASELINE:g}x baseline (background)",
            f"{bg.rate / base.rate:.1f}x",
            bg.rate / base.rate >= TARGET_VS_BASELINE,
        ),
    ]
    lost_nothing = all(o.in_redis == o.events and not any(o.lost.values()) for o in results)
    checks.append(
        (
            "nothing dropped, evicted or missing",
            "all N in Redis" if lost_nothing else "see counters",
            lost_nothing,
        )
    )
    width = max(len(c[0]) for c in checks) + 2
    for label, value, ok in checks:
        print(f"{label:<{width}}{value:>16}  {verdict(ok)}")
    print(
        f"{'sync vs baseline stored events/s (no target)':<{width}}{sync.rate / base.rate:>15.2f}x"
    )
    for keyed in results[3:]:
        print(
            f"{'keyed vs background collect() p50 (no target)':<{width}}"
            f"{keyed.pct_us(0.5) - bg.pct_us(0.5):>+14.2f}us"
            f"  ({keyed.pct_us(0.5) / bg.pct_us(0.5):.2f}x)"
        )
        print(
            f"{'keyed vs background stored events/s (no target)':<{width}}"
            f"{keyed.rate / bg.rate:>15.2f}x"
        )
    return lost_nothing


def _lost_order(name: str) -> tuple[bool, str]:
    return name.startswith("redis"), name


def _lost_cell(name: str) -> Callable[[Outcome], str]:
    return lambda o: f"{o.lost[name]:,}" if name in o.lost else "-"


def _memory_cell(name: str) -> Callable[[Outcome], str]:
    return lambda o: str(o.memory.get(name, "-"))


def describe_machine() -> str:
    try:
        parser = f"hiredis {metadata.version('hiredis')}"
    except metadata.PackageNotFoundError:
        parser = "no hiredis"
    return f"redis-py {redis.__version__} ({parser}), orjson {orjson.__version__}"


# -- main ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = command_line(__doc__, server_option=True)
    p.add_argument("--events", type=int, default=200_000, help="events per mode (200000)")
    p.add_argument(
        "--sync-events",
        type=int,
        default=None,
        help="events for the sync mode and the baseline, which pay a network round "
        "trip per event (default: the smaller of --events and 20000)",
    )
    p.add_argument("--games", type=int, default=50, help="games the events spread over (50)")
    p.add_argument(
        "--keyed",
        action="store_true",
        help="also the background mode with a distinct dedup_key on every event",
    )
    args = parse(p, argv, SMALL)
    if args.sync_events is None:
        args.sync_events = min(args.events, 20_000)
    if min(args.events, args.sync_events, args.games) < 1:
        p.error("--events, --sync-events and --games must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    binary = server_binary(args.server)
    n = args.events
    # Nothing may be dropped or evicted: the buffer holds every event, each list the whole run.
    buffer_events = max(100_000, n)
    cap = max(1000, n)
    work = make_work(n, args.games)
    sync_work = work[: args.sync_events]
    overhead = timer_overhead_ns()

    server = start_server(binary)
    try:
        client = server.client()
        header(
            f"{n:,} events over {args.games} games (sync mode and baseline: the first "
            f"{len(sync_work):,})\nserver: {describe_server(server)}\n"
            f"client: {describe_machine()}\ncollector: max_buffer_events={buffer_events:,}  "
            f"max_events_per_game={cap:,}  other settings default\n"
        )
        results = [
            run_collector(
                "background", server.url, client, work, buffer_events=buffer_events, cap=cap
            ),
            run_collector(
                "sync", server.url, client, sync_work, buffer_events=buffer_events, cap=cap
            ),
            run_baseline(server.url, client, sync_work, cap),
        ]
        if args.keyed:
            keys = [f"{i:032x}/{i & 1}" for i in range(n)]  # as long as an nppa si/bt
            results.append(
                run_collector(
                    "background",
                    server.url,
                    client,
                    work,
                    buffer_events=buffer_events,
                    cap=cap,
                    keys=keys,
                )
            )
        kept = print_table(results, overhead)
        footer()
        client.close()
    finally:
        server.cleanup()
    return 0 if kept else 1  # the speed targets are printed, never the exit status


if __name__ == "__main__":
    sys.exit(main())
