"""Every bench script runs to the end in its small mode (``--small``) and prints its table.

A bench is not a test, so nothing else runs it: when a counter is renamed or a phase breaks,
this is where it shows.  Each script runs as a process of its own, as ``make bench`` runs it
(``python -m bench.<name>`` from the project root), starting its own servers on free loopback
ports; the test checks its exit status, the header every script prints (its name, the date
and the commit its figures are of) and a few labels of what it prints, those a missing counter
or a broken phase would take away.  The scripts run three at a time (most of a small run is
waiting: for processes to start, for a failover, for a rate limit), each test waiting for its
own.

The scripts are modules of the ``bench`` package: none of them edits the import path (a
script that did would import a checkout other than the one it stands in when run from
elsewhere, and hide an import that only works by accident).
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
PARALLEL = 3
RUN_TIMEOUT_S = 240.0
# The first line each script prints: bench.<name>, the date, the commit of the checkout.
HEADER = re.compile(r"\Abench\.(\w+)  \d{4}-\d{2}-\d{2}  commit (\w+)")

# What each script must print; a str is looked for as is, a Pattern anywhere in the output.
# The longest runs first, so that the three at a time end close together.
EXPECTED: dict[str, list[str | re.Pattern[str]]] = {
    "soak_cluster": [
        "wait_for_replicas = 1:",
        "SIGKILL the primary",
        "SIGKILL reporter 0",
        "promoted",
        "counted (dropped, evicted, merged, stale, dead)",
        "SDK unreplicated_writes",
        "reporters 1-2 batches_unreplicated",
        re.compile(r"^ +still buffered or pending +0$", re.M),
    ],
    "pipeline": [
        "endpoint, one client thread",
        "1. drain+POST events/s (1 process)",
        "   events pre-loaded / received",
        "drain+POST ours/base by round",
        "2. offered events/s",
        "   counted drops",
        "   still buffered after settling",
        "   LOST (not delivered, not counted)",
        "3. latency p50 (ms)",
        "   CPU s per 100k events: collector",
        re.compile(r"no loss beyond counted drops +0 lost +PASS"),
    ],
    "scale": [
        "trickle:",
        "every game's events delivered",
        "sweep:",
        "un-register us",
        "memory:",
        "used_memory growth per event",
        "written-once memory:",
        "status --no-shards:",
        "status with dead letters:",
    ],
    "persistence": [
        "setting: none,",
        "setting: aof everysec,",
        "setting: aof always,",
        "reporter resets:",
        "reported lost:",
        "sdk resets:",
    ],
    "soak": [
        "kill the Redis server",
        "endpoint outage",
        "SIGKILL reporter 0",
        "accepted by collect()",
        "dead-lettered",
        "batches retried / reaped",
        "Redis unaccounted",
        ": RECONCILED",
    ],
    "nppa": [
        "items/request",
        "busiest second",
        "full games/s",
        re.compile(r"^backlog ", re.M),
        re.compile(r"^mixed ", re.M),
    ],
    "nppa_rate": [
        "rate: a backlog of",
        "max requests in a sliding second",
        "trickle: busy game",
        "small games' age at the interface s: p50",
        "never delivered 0",
        re.compile(r"^ +2 +[\d,]+ +[\d.]+ +\d+ +\d+$", re.M),
    ],
    "nppa_audit": [
        "ms/request p50",
        re.compile(r"^no trail +[\d.]+ ", re.M),
        re.compile(r"^trail, synced every 1 s +[\d.]+ ", re.M),
        "a day at the full rate",
        "one write and fsync of a line",
    ],
    "nppa_hold": [
        "held: after",
        "status names 1011",
        "at most one request per probe interval",
        "all 600 accepted",
        "600 counted stale, none sent",
        "an hour ahead",
        "a json reporter survives SIGHUP",
        re.compile(r"^PASS$", re.M),
    ],
    "script_cost": [
        "server-side us per call",
        re.compile(r"^  collect.* median .* min .*calls\)$", re.M),
        "claim",
        "ack",
    ],
    "sentinel_failover": [
        "run 1: sentinel failover (kill",
        "total over 1 runs:",
        "missing",
    ],
    "memory_full": [
        "claim growth, entries of",
        "drain at maxmemory",
        "refused_oom",
        "peak used_memory during the drain",
        re.compile(r"delivered ([\d,]+) distinct of \1\n"),
    ],
    "replica_wait": [
        re.compile(r"background +\d+ events +wait_for_replicas=0: .* ratio"),
        re.compile(r"sync +\d+ events +wait_for_replicas=0: .* ratio"),
    ],
    "metrics_flood": [
        "metrics flood:",
        "events collected / delivered",
        "/healthz during the flood: answered",
        "/readyz during the flood: answered",
        "pipelining connections opened",
        "open files: before / during (max) / after",
        "less Redis/endpoint clients: before/after",
        "dropped by the server, over_cap",
        re.compile(r"requests with 60 KB paths: RSS growth +[-\d.]+ MB, ERROR lines \d+"),
    ],
    "ingest": [
        "stored events/s (median)",
        "accepted (202) events/s (median)",
        "request latency p50 / p99 (ms)",
        "ingest CPU s per 100k events",
        re.compile(r"^lost or refused +0$", re.M),
        re.compile(r"^http stored >= 100,000 events/s \(one ingest process\)", re.M),
    ],
    "producers": [
        "collect() ns/call",
        "CPU ns/event until stored",
        "stored events/s",
        "every round's events stored: yes",
    ],
    "write_cost": ["client CPU ns/event", "wall ns/event", "server ns/event"],
    "collect": [
        "background",
        "baseline",
        "collect() p50 (us)",
        "stored events/s",
        "script commands / event",
        "dropped_buffer_full",
        "redis: evicted",
        "nothing dropped, evicted or missing",
    ],
}


@dataclass(repr=False)  # describe() says what went wrong
class Run:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (
            f"{' '.join(self.args)} exited {self.returncode}\n--- stdout (end)\n"
            f"{self.stdout[-4000:]}\n--- stderr (end)\n{self.stderr[-4000:]}"
        )


def run_small(script: str) -> Run:
    """The script in its small mode, in a process group of its own: on a timeout the servers
    and processes it started go with it."""
    args = [sys.executable, "-m", f"bench.{script}", "--small"]
    proc = subprocess.Popen(
        args,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n(killed after {RUN_TIMEOUT_S:g} s)"
    return Run(args, proc.returncode, out, err)


class Runs(dict[str, Future[Run]]):
    """Each script's run, started the first time a test asks for it."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        super().__init__()
        self._pool = pool

    def start(self, script: str) -> Future[Run]:
        run = self[script] = self._pool.submit(run_small, script)
        return run

    def __missing__(self, script: str) -> Future[Run]:
        return self.start(script)


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest) -> Iterator[Runs]:
    """In one process, every selected script started (three at a time) before the first test
    waits.  Under pytest-xdist (``make test``) a process cannot know which of them it will be
    given: each script starts when its test asks, in the process that runs it."""
    here = Path(str(request.node.path))
    selected = [
        item.callspec.params["script"]
        for item in request.session.items
        if Path(str(item.path)) == here
        and hasattr(item, "callspec")
        and "script" in item.callspec.params
    ]
    with ThreadPoolExecutor(PARALLEL, thread_name_prefix="bench") as pool:
        started = Runs(pool)
        if "PYTEST_XDIST_WORKER" not in os.environ:
            for script in selected:
                started.start(script)
        yield started
        pool.shutdown(cancel_futures=True)


def test_every_bench_script_is_run_here() -> None:
    scripts = {p.stem for p in BENCH.glob("*.py") if not p.name.startswith("_")}
    assert scripts == set(EXPECTED)


@pytest.mark.timeout(2 * RUN_TIMEOUT_S)
@pytest.mark.parametrize("script", list(EXPECTED))
def test_small_mode_runs_to_the_end(script: str, runs: Runs) -> None:
    run = runs[script].result()
    assert run.returncode == 0, run.describe()
    missing = [
        e if isinstance(e, str) else e.pattern
        for e in EXPECTED[script]
        if (e not in run.stdout if isinstance(e, str) else not e.search(run.stdout))
    ]
    assert not missing, f"not printed: {missing}\n{run.describe()}"
    header = HEADER.match(run.stdout)
    assert header is not None and header.group(1) == script, f"no header\n{run.describe()}"


def path_edits(source: str) -> list[int]:
    """Lines of ``source`` that touch ``sys.path`` or ``PYTHONPATH``, or import ``path`` from
    ``sys``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "path"
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        ):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "sys":
            lines += [node.lineno for alias in node.names if alias.name == "path"]
        elif isinstance(node, ast.Constant) and node.value == "PYTHONPATH":
            lines.append(node.lineno)
    return lines


def test_path_edits_are_found() -> None:
    assert path_edits("import sys\nsys.path.insert(0, 'x')\n") == [2]
    assert path_edits("from sys import path\n") == [1]
    assert path_edits("env = {'PYTHONPATH': '.'}\n") == [1]
    assert path_edits("import os\nos.path.join('a')\n") == []


def test_no_bench_module_edits_the_import_path() -> None:
    """Every module in bench/ imports as part of the package: no ``sys.path`` edit, no
    ``PYTHONPATH`` for its children, no import placed after code (``noqa: E402``)."""
    found = {
        path.name: edits
        for path in sorted(BENCH.glob("*.py"))
        if (edits := path_edits(text := path.read_text(encoding="utf-8"))) or "E402" in text
    }
    assert not found, f"import path edits or late imports (line numbers): {found}"
