"""A Redis at maxmemory (policy noeviction): what a claim costs in memory, and how far over
maxmemory draining a full Redis goes.

    .venv/bin/python -m bench.memory_full [--maxmemory 4mb 16mb] [--events-per-game 2048]
                                          [--small]

For each server binary found (redis-server, valkey-server):

- **claim growth**: 20 games of ``--events-per-game`` events (about 90 and 50 bytes stored
  each) on a server without a limit; one claim of 8 batches of 128 per game, then the acks.
  Prints the memory a claim adds per batch (``used_memory_dataset`` before and after) and
  what the ack frees per event.
- **drain**: for each ``--maxmemory``, a private server with that limit; a ``Collector``
  collects 1.5 times what fits, over 20 games, until its writes are refused (``refused_oom``)
  and the rest waits in its buffer; then a reporter (``ReporterService``, 2 workers, 8
  batches per claim) drains Redis to a local endpoint while a thread polls INFO memory every
  few milliseconds.  Prints what Redis held, the peak of ``used_memory`` over maxmemory
  (polled, and INFO's own ``used_memory_peak``, reset when the reporter starts), the time to
  deliver everything, and whether every event collected was delivered.

``--small`` runs both parts in seconds (one small maxmemory, fewer events per game): a check
that the script works (``tests/test_benches.py`` runs it), not a measurement.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Sequence

import orjson

from bench._harness import command_line, footer, header, parse, start_server
from collector import Collector
from collector.config import build_config, raw_settings
from collector.store import Ack, Claim, Collect, KeySchema, encode_entry, open_store
from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint
from reporter._monitoring.accounting import read_totals
from reporter._service.service import ReporterService
from tests.support.servers import server_binaries

GAMES = [f"game-{i:02d}" for i in range(20)]
PAD = "x" * 40
PREFIX = "memfull"
SMALL = {"maxmemory": ["3mb"], "events_per_game": 256}  # --small: both parts, in seconds


def config(url: str, sink: str) -> ReporterConfig:
    raw = raw_settings(ReporterConfig())
    raw["redis"].update(url=url, key_prefix=PREFIX, shards=4)
    raw["sink"].update(url=sink)
    raw["reporter"].update(
        workers=2,
        max_batches_per_claim=8,
        linger_ms=50,
        poll_interval_ms=20,
        shard_lease_seconds=2.0,
    )
    raw["buffer"].update(max_events_per_game=1_000_000)
    return build_config(raw, "bench", env={}, interpolate=False, cls=ReporterConfig)


def event(game: str, seq: int, pad: str = PAD) -> dict[str, object]:
    return {"game": game, "seq": seq, "pad": pad}


def claim_growth(binary: str, per_game: int, pad: str) -> None:
    server = start_server(binary)
    try:
        cfg = config(server.url, "http://127.0.0.1:9/")
        store = open_store(cfg.redis)
        schema = KeySchema(PREFIX, 4)
        client = server.client()
        now = time.time_ns() // 1_000_000
        for game in GAMES:
            entries = [
                encode_entry(now, orjson.dumps(event(game, s, pad))) for s in range(per_game)
            ]
            for i in range(0, per_game, 1000):
                store.call(Collect(schema.for_game(game), game, entries[i : i + 1000], 10**6, 3600))

        def dataset() -> int:
            return int(client.info("memory")["used_memory_dataset"])

        before = dataset()
        claims = []
        for game in GAMES:
            keys = schema.for_game(game)
            claimed = store.call(
                Claim(keys, game, uuid.uuid4().hex, "t", 128, 8, 60_000, 0, 0, 100)
            )
            claims.append((keys, claimed))
        middle = dataset()
        batches = sum(len(c.batches) for _, c in claims)
        events = sum(len(b.entries) for _, c in claims for b in c.batches)
        for keys, claimed in claims:
            for batch in claimed.batches:
                store.call(Ack(keys, batch.batch_id, "t"))
        after = dataset()
        size = len(encode_entry(now, orjson.dumps(event(GAMES[0], per_game, pad))))
        print(
            f"  claim growth, entries of {size} B: {batches} batches of up to 128 claimed: "
            f"{(middle - before) / batches:+,.0f} B per batch "
            f"({(middle - before) / events:+.1f} B per event); ack frees "
            f"{(middle - after) / events:,.1f} B per event"
        )
        store.close()
    finally:
        server.cleanup()


def overfill(url: str, total: int) -> Collector:
    """A collector that collected ``total`` events, more than Redis takes: once its writes
    are refused, the rest waits in its buffer."""
    sdk = Collector(
        url=url,
        key_prefix=PREFIX,
        shards=4,
        max_buffer_events=total,
        max_buffer_bytes=64 * 1024**3,
        max_events_per_game=10**6,
        flush_interval_ms=10,
        retry_max_delay_ms=200,
    )
    for seq in range(total // len(GAMES)):
        for game in GAMES:
            sdk.collect(game, event(game, seq))
    deadline = time.monotonic() + 30
    while sdk.stats()["refused_oom"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the flusher's retries settle
    return sdk


def drain(binary: str, maxmemory: str) -> bool:
    """Print the drain's figures; whether every event collected was delivered."""
    server = start_server(binary, ["--maxmemory", maxmemory, "--maxmemory-policy", "noeviction"])
    endpoint = LocalEndpoint().start()
    service: ReporterService | None = None
    try:
        client = server.client()
        limit = int(client.info("memory")["maxmemory"])
        total = int(limit / 100 * 1.5) // len(GAMES) * len(GAMES)  # ~100 B per event, all in
        cfg = config(server.url, endpoint.url)
        sdk = overfill(server.url, total)
        held_in_redis = sdk.stats()["stored"]
        client.config_resetstat()
        peak = [0]
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], int(client.info("memory")["used_memory"]))
                stop.wait(0.002)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        start = time.monotonic()
        service = ReporterService(cfg)
        service.start()
        flushed = sdk.flush(timeout=120)
        store = open_store(cfg.redis)
        while time.monotonic() - start < 120:
            summary = read_totals(store).summary()
            if summary["delivered"] == total:
                break
            time.sleep(0.05)
        took = time.monotonic() - start
        stop.set()
        poller.join(5)
        info = client.info("memory")
        with endpoint.lock:
            received = {(e["game"], e["seq"]) for r in endpoint.received for e in r.events}
        stats = sdk.stats()
        sdk.close(timeout=1)
        store.close()
        print(
            f"  drain at maxmemory {maxmemory}: {total:,} collected, {held_in_redis:,} "
            f"stored before the reporter started (the rest refused: refused_oom "
            f"{stats['refused_oom']:,}); all stored after {took:.1f} s: {flushed}; "
            f"delivered {len(received):,} distinct of {total:,}"
        )
        print(
            f"    peak used_memory during the drain: polled {peak[0]:,} B "
            f"({peak[0] - limit:+,} B, {(peak[0] / limit - 1) * 100:+.1f} % of maxmemory); "
            f"INFO used_memory_peak {int(info['used_memory_peak']):,} B "
            f"({int(info['used_memory_peak']) - limit:+,} B)"
        )
        return len(received) == total
    finally:
        if service is not None:
            service.stop(grace=1)
            service.store.close()
        endpoint.stop()
        server.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line(__doc__)
    parser.add_argument("--maxmemory", nargs="+", default=["4mb", "16mb"])
    parser.add_argument("--events-per-game", type=int, default=2048)
    args = parse(parser, argv, SMALL)
    header()
    kept = True
    for name, binary in server_binaries().items():
        print(name)
        for pad in (PAD, ""):
            claim_growth(binary, args.events_per_game, pad)
        for maxmemory in args.maxmemory:
            kept &= drain(binary, maxmemory)
    footer()
    return 0 if kept else 1


if __name__ == "__main__":
    sys.exit(main())
