"""Failover soak: a primary killed and a reporter SIGKILLed under load on a 3+3 Redis Cluster.

    make soak-cluster                                   # both runs, wait_for_replicas 0 and 1
    .venv/bin/python -m bench.soak_cluster --wait-for-replicas 1     # one run
    .venv/bin/python -m bench.soak_cluster --small     # both runs, each as short as it goes

The run of issue 10: a local cluster of 3 primaries with a replica each (started here, on
loopback ports), one producer process calling ``collect()`` for 30,000 events paced over
15 s (20 games), three reporter processes (``python -m reporter run``) delivering to a local
endpoint in this process.  Times count from the producer's first event (a loaded host takes
seconds to start a process).  At 5 s the primary serving the first slots is SIGKILLed (its
replica takes over about 4 s later), at 8 s reporter 0 is SIGKILLed (the other two take its
shards over).  Once the replica has been promoted the killed node is started again, as a
supervisor would: it rejoins as the new primary's replica (without it, a promoted primary
has no replica and, with ``wait_for_replicas = 1``, confirms nothing).

On an idle loopback the replica is a fraction of a millisecond behind, so a kill rarely
lands in the replication window; ``--replica-lag-ms N`` opens it as a slow or broken link
would: N ms before the kill the replica is stopped (SIGSTOP, so it cannot reconnect) and the
primary drops its link to it (CLIENT KILL TYPE replica); resumed after the kill, the replica
has everything up to the cut and misses what the primary acknowledged in those N ms.
(Stopping the replica alone is not enough: the kernel keeps what the primary sent in the
socket buffers, and the replica reads it after the kill.)

At the end everything is drained and it prints: delivered (distinct ids the endpoint took),
duplicates (and how many arrived again in the same batch, same Idempotency-Key), lost
(collected, not delivered and not counted anywhere) and counted (dropped or stale, with the
counter that has them).

``--small`` makes one run, with ``wait_for_replicas`` 1 unless given, as short as a failover
allows (a few thousand events over 3 s; the cluster's own timeouts set the rest): a check that
the script works (``tests/test_benches.py`` runs it), not a soak; if it loses events it still
fails.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._harness import (
    command_line,
    footer,
    header,
    module_process,
    parse,
    reporter_process,
    server_binary,
)
from collector import Collector
from collector.config import TelemetryConfig
from collector.counters import Counter as C
from collector.store import open_store
from reporter._demo.endpoint import LocalEndpoint
from reporter._monitoring.accounting import read_totals
from tests.support.servers import Cluster

GAMES = [f"game-{i:02d}" for i in range(20)]
SHARDS = 16
PRODUCE = "--produce"
# --small: one run (wait_for_replicas 1), as short as the failover allows.
SMALL = {"events": 3000, "seconds": 3.0, "kill_primary_at": 1.0, "kill_reporter_at": 1.5}


def produce(url: str, wait: int, events: int, seconds: float, out: str) -> None:
    """Producer process: ``events`` collect() calls paced over ``seconds``, then its stats."""
    collector = Collector(
        url=url,
        cluster=True,
        shards=SHARDS,
        wait_for_replicas=wait,
        wait_timeout_ms=500,
        socket_timeout_seconds=1.0,
        connect_timeout_seconds=0.5,
        retry_max_delay_ms=500,
        max_events_per_game=200_000,
    )
    sent = 0
    print("producing", flush=True)  # the kills are timed from here
    started = time.monotonic()
    pause = threading.Event()
    while sent < events:
        due = min(events, int((time.monotonic() - started) / seconds * events)) - sent
        for _ in range(due):
            collector.collect(GAMES[sent % len(GAMES)], {"id": sent})
            sent += 1
        pause.wait(0.005)
    collector.flush(90)
    collector.close(timeout=90)
    Path(out).write_text(json.dumps(collector.stats()))


def write_config(path: Path, redis_url: str, sink_url: str, wait: int) -> None:
    path.write_text(f"""
[redis]
url = "{redis_url}"
cluster = true
shards = {SHARDS}
socket_timeout_seconds = 1.0
connect_timeout_seconds = 0.5
wait_for_replicas = {wait}
wait_timeout_ms = 500
[buffer]
max_events_per_game = 200000
[reporter]
linger_ms = 200
poll_interval_ms = 50
lease_seconds = 5.0
shard_lease_seconds = 3.0
grace_seconds = 5.0
[sink]
url = "{sink_url}"
timeout_seconds = 2.0
[retry]
initial_delay_ms = 200
max_delay_ms = 2000
max_attempts = 1000
""")


def _kill_left(procs: list[subprocess.Popen[Any]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()


def reporter_counts(log: Path) -> dict[str, int]:
    """The counters of a reporter's "stopped:" line (none for a SIGKILLed reporter)."""
    counts: dict[str, int] = {}
    for line in log.read_text(errors="replace").splitlines():
        if "stopped: " in line:
            for pair in line.split("stopped: ", 1)[1].split(", "):
                name, _, value = pair.partition("=")
                if value.strip().isdigit():
                    counts[name.strip()] = int(value)
    return counts


def run(
    wait: int, events: int, seconds: float, kill_at: float, kill_reporter_at: float, lag: float
) -> dict[str, Any]:
    cluster = Cluster(server_binary(), replicas=1).start()
    endpoint = LocalEndpoint().start()
    tmp = Path(tempfile.mkdtemp(prefix="telemetry-soak-cluster-"))
    config = tmp / "soak.toml"
    # Any node but the one killed: a reporter that starts late (a loaded host) still finds
    # the cluster through it.
    write_config(config, cluster.primaries[1].url, endpoint.url, wait)
    stats_file = tmp / "producer.json"
    t0 = time.monotonic()

    def say(msg: str) -> None:
        print(f"  [{time.monotonic() - t0:5.1f}s] {msg}", flush=True)

    logs = [tmp / f"reporter{i}.log" for i in range(3)]
    reporters = [reporter_process(config, log) for log in logs]
    producer = module_process(
        "bench.soak_cluster",
        PRODUCE,
        cluster.primaries[1].url,
        str(wait),
        str(events),
        str(seconds),
        str(stats_file),
        pipe=True,
    )
    # On a loaded host a process takes seconds to start: the clock starts with the traffic.
    assert producer.stdout is not None and producer.stdout.readline().strip() == b"producing"
    started_after = time.monotonic() - t0
    t0 = time.monotonic()
    say(f"producer started ({started_after:.1f} s after the reporters)")
    victim = cluster.primaries[0]
    replica = cluster.replicas[0]  # the victim's (replicas follow primaries in turn)
    try:
        # The schedule counts from the first delivery, not from the processes' start: a
        # reporter that had not connected yet when the primary dies could not start at all.
        under_way = first_delivery(endpoint, timeout=60)
        t0 = time.monotonic()
        say(f"first events delivered {under_way:.1f} s after the processes started")
        time.sleep(max(0.0, kill_at - lag - (time.monotonic() - t0)))
        if lag:
            say(
                f"cut the link to the replica on port {replica.port} {lag * 1000:g} ms "
                "before the kill"
            )
            assert replica.proc is not None
            replica.proc.send_signal(signal.SIGSTOP)  # so that it cannot reconnect
            victim.client().client_kill_filter(_type="replica")
            time.sleep(lag)
        say(f"SIGKILL the primary on port {victim.port}")
        cluster.kill(victim)
        if lag and replica.proc is not None:
            replica.proc.send_signal(signal.SIGCONT)
        watcher = threading.Thread(target=_failover, args=(cluster, victim, say), daemon=True)
        watcher.start()
        time.sleep(max(0.0, kill_reporter_at - (time.monotonic() - t0)))
        say("SIGKILL reporter 0")
        reporters[0].send_signal(signal.SIGKILL)
        reporters[0].wait()
        watcher.join(60)
        producer.wait(180)
        say("traffic done; draining")
        return reconcile(cluster, endpoint, reporters, logs, stats_file, say)
    finally:
        _kill_left([*reporters, producer])
        endpoint.stop()
        cluster.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def first_delivery(endpoint: LocalEndpoint, timeout: float) -> float:
    """Wait until the endpoint took its first batch; the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        with endpoint.lock:
            if endpoint.received:
                return time.monotonic() - start
        time.sleep(0.02)
    raise RuntimeError(f"nothing delivered within {timeout:g} s of the start")


def _failover(cluster: Cluster, victim: Any, say: Any) -> None:
    promoted = cluster.wait_promoted(victim)
    say(f"replica on port {promoted.port} promoted")
    cluster.rejoin(victim)
    say(f"node on port {victim.port} back, as a replica")


def reconcile(
    cluster: Cluster,
    endpoint: LocalEndpoint,
    reporters: list[Any],
    logs: list[Path],
    stats_file: Path,
    say: Any,
) -> dict[str, Any]:
    settings = TelemetryConfig.default().redis
    settings = type(settings)(
        **{**settings.__dict__, "url": cluster.url, "cluster": True, "shards": SHARDS}
    )
    store = open_store(settings)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        totals = read_totals(store)
        if totals.buffered == 0 and totals.pending_events == 0:
            break
        time.sleep(0.5)
    for proc in reporters[1:]:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    totals = read_totals(store)
    store.close()
    produced = json.loads(stats_file.read_text())
    received = [
        (r.idempotency_key, e["id"]) for r in endpoint.received if r.status == 200 for e in r.events
    ]
    ids = Counter(i for _, i in received)
    keys_of: dict[int, set[str]] = defaultdict(set)
    for key, i in received:
        keys_of[i].add(key)
    same_batch = sum(n - len(keys_of[i]) for i, n in ids.items())
    c = totals.counter
    counted = (
        produced[C.DROPPED_BUFFER_FULL]
        + produced[C.DROPPED_AT_CLOSE]
        + c(C.EVICTED)
        + c(C.MERGED)
        + c(C.STALE)
        + totals.dead_now
    )
    lost = produced[C.ACCEPTED] - len(ids) - counted
    reported = [reporter_counts(log) for log in logs[1:]]
    return {
        "collected": produced[C.ACCEPTED],
        "delivered": len(ids),
        "duplicates": len(received) - len(ids),
        "duplicates, % of delivered": round(100 * (len(received) - len(ids)) / max(len(ids), 1), 2),
        "duplicates in the same batch (same Idempotency-Key)": same_batch,
        "lost": max(lost, 0),
        "counted (dropped, evicted, merged, stale, dead)": counted,
        "SDK unreplicated_writes": produced[C.UNREPLICATED_WRITES],
        "SDK backend_errors": produced[C.BACKEND_ERRORS],
        "reporters 1-2 batches_unreplicated": sum(
            r.get(C.BATCHES_UNREPLICATED, 0) for r in reported
        ),
        "reporters 1-2 acks_unreplicated": sum(r.get(C.ACKS_UNREPLICATED, 0) for r in reported),
        "still buffered or pending": totals.buffered + totals.pending_events,
        "events older than the endpoint saw (wrong ids)": sum(
            1 for i in ids if not 0 <= i < produced[C.ACCEPTED]
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = command_line(__doc__)
    ap.add_argument(
        "--wait-for-replicas",
        type=int,
        action="append",
        help="[redis] wait_for_replicas (repeat for several runs; default: 0 and 1)",
    )
    ap.add_argument("--events", type=int, default=30_000)
    ap.add_argument("--seconds", type=float, default=15.0, help="traffic duration")
    ap.add_argument("--kill-primary-at", type=float, default=5.0)
    ap.add_argument("--kill-reporter-at", type=float, default=8.0)
    ap.add_argument(
        "--replica-lag-ms",
        type=float,
        default=0.0,
        help="cut the killed primary's link to its replica this long before the "
        "kill (a replica that lags, as on a slow or broken link)",
    )
    args = parse(ap, argv, SMALL, also="one run, --wait-for-replicas 1")
    header()
    failed = False
    for wait in args.wait_for_replicas or ([1] if args.small else [0, 1]):
        print(
            f"wait_for_replicas = {wait}: {args.events} events over {args.seconds:g} s, "
            f"3 reporters, primary killed at {args.kill_primary_at:g} s, reporter 0 at "
            f"{args.kill_reporter_at:g} s, replica lag {args.replica_lag_ms:g} ms",
            flush=True,
        )
        rows = run(
            wait,
            args.events,
            args.seconds,
            args.kill_primary_at,
            args.kill_reporter_at,
            args.replica_lag_ms / 1000,
        )
        width = max(map(len, rows))
        for name, value in rows.items():
            print(f"    {name:<{width}}  {value}")
        failed |= wait > 0 and rows["lost"] > 0
    footer()
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == [PRODUCE]:  # the producer process this script starts
        produce(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6])
        sys.exit(0)
    sys.exit(main())
