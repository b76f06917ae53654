"""Benchmark the producers side by side: the cost of ``collect()`` in the Python SDK and in the
Node.js producer (``clients/node``), in one run, against the same private server.

Each round runs one producer in a process of its own (alternating, Python first): it collects
200 events and flushes them (connected, the script loaded, the game names known), then makes
N ``collect()`` calls of the same events (small anti-addiction-style behaviour events of 50
games, as ``bench.collect``'s) into a buffer that holds them all, then flushes until all N are
in Redis.  It reports:

* ``collect() ns/call``: the loop's wall time over N, what the calling code waits per event
  (the Python SDK's flusher thread runs meanwhile and shares the interpreter; the Node.js
  producer writes only once the loop yields to the event loop, after it);
* ``CPU ns/event until stored``: the process's CPU time from the first call until all N are
  stored, over N: the whole cost of an event, writing included;
* ``stored events/s``: N over the wall time from the first call until all are stored.

The best of ``--rounds`` rounds of each is shown, and every round's events must all be stored
(the exit status is 1 otherwise).  Node.js 20 or newer must be on PATH; ``npm ci`` is run in
``clients/node`` if its dependencies are not installed.

    .venv/bin/python -m bench.producers [--events 200000] [--rounds 5] [--server redis|valkey]
                                        [--small]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench._harness import (
    command_line,
    describe_server,
    footer,
    header,
    parse,
    server_binary,
    start_server,
)
from bench.collect import make_work
from tests.support.servers import Server

ROOT = Path(__file__).resolve().parents[1]
NODE_DIR = ROOT / "clients" / "node"
GAMES = 50
POOL = 8192
SMALL = {"events": 5000, "rounds": 1}
ROUND_TIMEOUT_S = 300


def node_command() -> list[str]:
    node = shutil.which("node")
    if node is None:
        raise SystemExit("node is not on PATH: the Node.js producer needs Node.js 20 or newer")
    if not (NODE_DIR / "node_modules" / "ioredis").exists():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline"],
            cwd=NODE_DIR,
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return [node, str(NODE_DIR / "bench" / "collect.js")]


def one_round(command: Sequence[str], server: Server, prefix: str, events: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TELEMETRY_")}
    env.update(
        {
            "TELEMETRY_REDIS_URL": server.url,
            "TELEMETRY_REDIS_KEY_PREFIX": prefix,
            "TELEMETRY_COLLECTOR_MAX_BUFFER_EVENTS": str(2 * events + 1000),
            "TELEMETRY_BUFFER_MAX_EVENTS_PER_GAME": str(2 * events + 1000),
        }
    )
    done = subprocess.run(
        list(command),
        env=env,
        capture_output=True,
        text=True,
        timeout=ROUND_TIMEOUT_S,
        cwd=ROOT,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    server.client().flushall()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line(__doc__, server_option=True)
    parser.add_argument("--events", type=int, default=200_000, help="collect() calls per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each producer")
    args = parse(parser, argv, SMALL)
    producers = {
        "python": [sys.executable, "-m", "bench._producer_python"],
        "node": node_command(),
    }
    server = start_server(server_binary(args.server))
    try:
        header(f"server: {describe_server(server)}; node {node_version()}")
        print(f"{args.events} collect() calls per round, {GAMES} games, best of {args.rounds}")
        with tempfile.TemporaryDirectory(prefix="bench-producers-") as tmp:
            work_file = Path(tmp) / "work.json"
            pool = [[game, event] for game, event in make_work(POOL, GAMES)]
            work_file.write_text(json.dumps(pool), encoding="utf-8")
            results: dict[str, list[dict[str, float]]] = {name: [] for name in producers}
            for n in range(args.rounds):
                for name, command in producers.items():
                    results[name].append(
                        one_round(
                            [*command, str(work_file), str(args.events)],
                            server,
                            f"b{n}{name}",
                            args.events,
                        )
                    )
        kept = report(results, args.events)
    finally:
        server.cleanup()
    footer()
    return 0 if kept else 1


def node_version() -> str:
    return subprocess.run(
        ["node", "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()


def report(results: dict[str, list[dict[str, float]]], events: int) -> bool:
    rows = (
        ("collect() ns/call", "call_ns", min, "{:,.0f}"),
        ("CPU ns/event until stored", "cpu_ns_per_event", min, "{:,.0f}"),
        ("stored events/s", "stored_per_s", max, "{:,.0f}"),
    )
    names = list(results)
    print(f"{'':28}" + "".join(f"{name:>14}" for name in names) + f"{'node/python':>14}")
    for label, key, best, form in rows:
        values = [best(r[key] for r in results[name]) for name in names]
        ratio = values[1] / values[0] if values[0] else 0.0
        print(f"{label:28}" + "".join(f"{form.format(v):>14}" for v in values) + f"{ratio:>13.2f}x")
    lost = {name: [events - int(r["stored"]) for r in rs] for name, rs in results.items()}
    kept = all(n == 0 for ns in lost.values() for n in ns)
    print(
        "every round's events stored: " + ("yes" if kept else f"NO (not stored per round: {lost})")
    )
    return kept


if __name__ == "__main__":
    sys.exit(main())
