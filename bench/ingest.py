"""Benchmark the HTTP ingest: events/s from keep-alive clients posting 100 events a request,
beside ``collect()`` and ``collect_json()`` in the same run.

Three ways of storing the same N events (small anti-addiction-style events over ``--games``
games) in a private server on a free loopback port, alternated over ``--rounds``:

* ``collect``: ``Collector.collect()`` of each event (a dict) in this process, background mode.
* ``collect_json``: ``Collector.collect_json()`` of the events as JSON text, ``--per-request``
  at a time, in this process: what the ingest hands the SDK, without HTTP.
* ``http``: ``telemetry-reporter ingest`` in a process of its own (started afresh each round,
  with a bearer token) and ``--clients`` client processes (``bench._ingest_client``), each
  posting its share of the requests one after the other on one kept-alive connection.

For the two in-process ways the rate is N over the time from the first call until ``flush()``
returned and the shards' ``stored`` counters reached N.  For ``http``: *accepted* is N over the
time from the first request sent to the last 202 read, *stored* N over the time from the first
request until the shards' ``stored`` counters reached N; the ingest's CPU time (user + system,
``/proc``) per 100,000 events and each request's latency (p50, p99) are shown beside.  A
request answered 503 (the buffer full: the flusher behind) is sent again after its
``Retry-After`` (1 s) and counted.  Every request must end answered 202 and every event
stored, with no drop counted: otherwise the run fails.  The clients and the ingest share
the machine's cores with the server and this process.

    .venv/bin/python -m bench.ingest [--events 200000] [--clients 4] [--per-request 100]
                                     [--games 50] [--rounds 3] [--ndjson]
                                     [--server redis|valkey] [--small]

``--small`` stores a few thousand events each way, once: a check that the script works
(``tests/test_benches.py`` runs it), not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import redis

from bench._harness import (
    command_line,
    describe_server,
    exit_status,
    footer,
    header,
    module_process,
    parse,
    server_binary,
    start_server,
)
from bench._ingest_client import requests as client_requests
from collector import Collector
from collector.counters import Counter
from collector.store import KeySchema
from tests.support.servers import Server, free_port

TARGET_HTTP_STORED_PER_S = 100_000
SMALL = {"events": 4000, "clients": 2, "rounds": 1}
TIMEOUT_S = 120.0
TOKEN = "bench-ingest-token-0123456789abcdef"
WAYS = ("collect", "collect_json", "http")
Work = list[tuple[str, list[dict[str, object]]]]


@dataclass
class Round:
    """What one way measured in one round."""

    way: str
    events: int
    stored_s: float
    accepted_s: float = 0.0
    cpu_s: float = 0.0
    busy: int = 0  # requests answered 503 (the buffer full), sent again after Retry-After
    latencies_us: list[int] = field(default_factory=list)
    lost: dict[str, int] = field(default_factory=dict)

    @property
    def stored_rate(self) -> float:
        return self.events / self.stored_s if self.stored_s else 0.0

    @property
    def accepted_rate(self) -> float:
        return self.events / self.accepted_s if self.accepted_s else 0.0


# -- in this process ---------------------------------------------------------------------------


def batches(games: int, per_request: int, total: int) -> Work:
    """The workload as (game, events) batches: the events the clients send, in one list."""
    out = []
    for raw in client_requests(0, total // per_request, per_request, games, TOKEN, ndjson=False):
        head, body = raw.split(b"\r\n\r\n", 1)
        game = head.split(b" ")[1].decode().removeprefix("/v1/games/").removesuffix("/events")
        out.append((game, orjson.loads(body)))
    return out


def stored(client: redis.Redis, schema: KeySchema) -> int:
    with client.pipeline(transaction=False) as pipe:
        for shard in schema.all_shards():
            pipe.hget(shard.stats, str(Counter.STORED))
        return sum(int(v or 0) for v in pipe.execute())


def wait_stored(client: redis.Redis, schema: KeySchema, count: int) -> float:
    """When (``time.time()``) the shards' stored counters reached ``count``."""
    deadline = time.monotonic() + TIMEOUT_S
    while stored(client, schema) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{schema.prefix}: fewer than {count} events stored in time")
        time.sleep(0.002)
    return time.time()


def drop_keys(client: redis.Redis, prefix: str) -> None:
    with client.pipeline(transaction=False) as pipe:
        for key in client.scan_iter(match=f"{{{prefix}:*", count=1000):
            pipe.unlink(key)
        pipe.execute()


def in_process(way: str, url: str, client: redis.Redis, work: Work, prefix: str) -> Round:
    total = sum(len(events) for _, events in work)
    c = Collector(
        url=url, key_prefix=prefix, max_buffer_events=max(100_000, total), max_events_per_game=total
    )
    schema = KeySchema(prefix, c.config.redis.shards)
    texts = [(game, [orjson.dumps(e) for e in events]) for game, events in work]
    call: Callable[[], None]
    if way == "collect":
        pairs = [(game, e) for game, events in work for e in events]

        def call() -> None:
            collect = c.collect
            for game, event in pairs:
                collect(game, event)
    else:

        def call() -> None:
            collect_json = c.collect_json
            for game, events in texts:
                collect_json(game, events)

    try:
        for game, events in texts[:20]:  # warm: connections, scripts, game names
            c.collect_json(game, events[:1])
        c.flush(TIMEOUT_S)
        warm = stored(client, schema)
        before = c.stats()
        start = time.time()
        call()
        c.flush(TIMEOUT_S)
        end = wait_stored(client, schema, warm + total)
        after = c.stats()
    finally:
        c.close()
        drop_keys(client, prefix)
    lost = {k: after[k] - before[k] for k in ("dropped_buffer_full", "evicted", "backend_errors")}
    return Round(way, total, end - start, lost=lost)


# -- over HTTP -----------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def over_http(
    args: argparse.Namespace, server: Server, client: redis.Redis, prefix: str, tmp: Path
) -> Round:
    port = free_port()
    token = tmp / "token"
    token.write_text(TOKEN)
    config = tmp / f"{prefix}.toml"
    config.write_text(
        f'[redis]\nurl = "{server.url}"\nkey_prefix = "{prefix}"\n'
        f"[buffer]\nmax_events_per_game = {args.events}\n"
        f'[ingest]\nlisten = "127.0.0.1:{port}"\ntoken_file = "{token}"\n'
    )
    log = tmp / f"{prefix}.log"
    ingest = module_process("reporter", "ingest", "--config", str(config), log=log)
    schema = KeySchema(prefix, 16)
    clients: list[subprocess.Popen[bytes]] = []
    try:
        deadline = time.monotonic() + 30
        while "serving" not in log.read_text():
            if ingest.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the ingest did not start:\n{log.read_text()}")
            time.sleep(0.05)
        per_client = args.events // args.per_request // args.clients
        start_at = time.time() + 1.5  # every client connected and its requests built
        clients += [
            module_process(
                "bench._ingest_client",
                "127.0.0.1",
                str(port),
                TOKEN,
                repr(start_at),
                str(n),
                str(per_client),
                str(args.per_request),
                str(args.games),
                *(["--ndjson"] if args.ndjson else []),
                pipe=True,
            )
            for n in range(args.clients)
        ]
        cpu_before = cpu_seconds(ingest.pid)
        total = per_client * args.clients * args.per_request
        end = wait_stored(client, schema, total)
        cpu = cpu_seconds(ingest.pid) - cpu_before
        results = [json.loads(c.communicate(timeout=TIMEOUT_S)[0]) for c in clients]
    except Exception:
        print(f"--- the ingest's log:\n{log.read_text()[-3000:]}", flush=True)
        raise
    finally:
        for child in clients:
            if child.poll() is None:
                child.kill()
                child.wait()
        ingest.terminate()
        ingest.wait(TIMEOUT_S)
        drop_keys(client, prefix)
    first = min(r["started"] for r in results)
    last = max(r["started"] + r["seconds"] for r in results)
    statuses: dict[str, int] = {}
    for r in results:
        for status, n in r["statuses"].items():
            statuses[status] = statuses.get(status, 0) + n
    lost = {f"answered {s}": n for s, n in statuses.items() if s not in ("202", "503")}
    stopped = log.read_text()
    for name in ("dropped_buffer_full", "dropped_at_close"):
        if f"{name}=0" not in stopped:
            lost[name] = 1
    return Round(
        "http",
        total,
        end - first,
        busy=statuses.get("503", 0),
        accepted_s=last - first,
        cpu_s=cpu,
        latencies_us=sorted(x for r in results for x in r["latencies_us"]),
        lost=lost,
    )


# -- the report ----------------------------------------------------------------------------------


def report(rounds: Sequence[Round]) -> bool:
    """Print the table; whether every target was met."""
    by_way = {way: [r for r in rounds if r.way == way] for way in WAYS}
    print(f"{'':34}" + "".join(f"{w:>15}" for w in WAYS))

    def row(label: str, cell: Callable[[list[Round]], str]) -> None:
        print(f"{label:34}" + "".join(f"{cell(by_way[w]):>15}" for w in WAYS))

    row(
        "stored events/s (median)",
        lambda rs: f"{statistics.median(r.stored_rate for r in rs):,.0f}",
    )
    row("stored events/s (best)", lambda rs: f"{max(r.stored_rate for r in rs):,.0f}")
    row(
        "accepted (202) events/s (median)",
        lambda rs: (
            f"{statistics.median(r.accepted_rate for r in rs):,.0f}" if rs[0].way == "http" else "-"
        ),
    )
    http = by_way["http"]
    latencies = sorted(x for r in http for x in r.latencies_us)
    p50 = latencies[len(latencies) // 2] / 1000
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] / 1000
    print(f"{'request latency p50 / p99 (ms)':34}{'':30}{f'{p50:.2f} / {p99:.2f}':>15}")
    cpu = statistics.median(r.cpu_s * 100_000 / r.events for r in http)
    print(f"{'ingest CPU s per 100k events':34}{'':30}{cpu:>15.2f}")
    busy = sum(r.busy for r in http)
    print(f"{'503 answers (sent again after 1 s)':34}{'':30}{busy:>15,}")
    lost = {k: v for r in rounds for k, v in r.lost.items() if v}
    print(f"{'lost or refused':34}{lost or 0!s:>45}")
    rate = statistics.median(r.stored_rate for r in http)
    met = rate >= TARGET_HTTP_STORED_PER_S
    print(
        f"http stored >= {TARGET_HTTP_STORED_PER_S:,} events/s (one ingest process)"
        f"{rate:>14,.0f}/s  {'PASS' if met else 'MISS'}"
    )
    return met


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line(__doc__, server_option=True)
    parser.add_argument("--events", type=int, default=200_000, help="events per way and round")
    parser.add_argument("--clients", type=int, default=4, help="client processes (4)")
    parser.add_argument("--per-request", type=int, default=100, help="events a request (100)")
    parser.add_argument("--games", type=int, default=50, help="games the events spread over")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three ways (3)")
    parser.add_argument("--ndjson", action="store_true", help="post NDJSON, not JSON arrays")
    args = parse(parser, argv, SMALL)
    server = start_server(server_binary(args.server))
    try:
        client = server.client()
        header(
            f"server: {describe_server(server)}\n{args.events:,} events a way and round, "
            f"{args.per_request} a request ({'NDJSON' if args.ndjson else 'JSON arrays'}), "
            f"{args.clients} clients, {args.games} games, {args.rounds} rounds"
        )
        work = batches(args.games, args.per_request, args.events)
        rounds: list[Round] = []
        with tempfile.TemporaryDirectory() as tmp:
            for n in range(args.rounds):
                rounds.append(in_process("collect", server.url, client, work, f"bc{n}"))
                rounds.append(in_process("collect_json", server.url, client, work, f"bj{n}"))
                rounds.append(over_http(args, server, client, f"bh{n}", Path(tmp)))
                print(
                    f"round {n + 1}: "
                    + ", ".join(f"{r.way} {r.stored_rate:,.0f}/s" for r in rounds[-3:]),
                    flush=True,
                )
        print()
        met = report(rounds)
        kept = not any(v for r in rounds for v in r.lost.values())
        footer()
    finally:
        server.cleanup()
    return exit_status(kept=kept, targets=met, small=args.small)


if __name__ == "__main__":
    raise SystemExit(main())
