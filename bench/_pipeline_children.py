"""bench/pipeline.py's child processes: the reporter and the collector, and how they are driven.

Every part runs in its own spawned process so no two share a GIL.  A child built by ``Child``
speaks one protocol over a pipe: it sends ``("ready", pid)`` once set up, waits for ``go``,
sends ``("started", wall time)``, works, and on ``stop`` (or when its work is done) sends
``("done", {...})`` with its CPU seconds and counters.  The targets are top-level functions so
that a spawned child can import them.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from bench._baseline import baseline_collect
from bench._pipeline_workload import CollectFn, Raw, make_config, paced
from collector import Collector

MP = multiprocessing.get_context("spawn")  # children start clean: no inherited threads/locks
SETTLE_TIMEOUT_S = 60.0


def our_reporter_main(raw: Raw, conn: Connection) -> None:
    """One reporter process: ReporterService with the bench's config."""
    import logging

    from reporter._service.service import ReporterService

    logging.basicConfig(level=logging.WARNING, format="reporter child: %(levelname)s %(message)s")
    service = ReporterService(make_config(raw))
    conn.send(("ready", os.getpid()))
    conn.recv()
    cpu, wall = time.process_time(), time.time()
    service.start()
    conn.send(("started", wall))
    conn.recv()
    counts = service.stop(grace=10).counts
    conn.send(("done", {"cpu": time.process_time() - cpu, "counts": counts}))


def collector_main(
    kind: str, raw: Raw, schedule: list[str], rate: float, seconds: float, conn: Connection
) -> None:
    """The game side: ``Collector.collect()`` (ours) or a script call per event (baseline)."""
    config = make_config(raw)
    collector: Collector | None = None
    if kind == "ours":
        collector = Collector(config=config)
        collect: CollectFn = collector.collect
    else:
        collect = baseline_collect(config.redis.url, config.buffer.max_events_per_game)
    conn.send(("ready", os.getpid()))
    conn.recv()
    cpu = time.process_time()
    conn.send(("started", time.time()))
    sent, elapsed, worst = paced(collect, schedule, rate, seconds)
    conn.send(
        ("generated", {"sent": sent, "elapsed": elapsed, "worst_lag": worst, "end": time.time()})
    )
    stats: dict[str, int] = {"accepted": sent}
    if collector is not None:
        collector.flush(SETTLE_TIMEOUT_S)
        collector.close(timeout=5)
        stats = collector.stats()
    conn.send(("done", {"cpu": time.process_time() - cpu, "stats": stats}))


class Child:
    """A spawned child that speaks the ready / go / started / stop / done protocol."""

    def __init__(self, target: Callable[..., None], *args: Any, name: str) -> None:
        self.conn, child = MP.Pipe()
        self.proc: BaseProcess = MP.Process(
            target=target, args=(*args, child), daemon=True, name=name
        )
        self.proc.start()
        self.pid = int(self.expect("ready", 60))

    def expect(self, what: str, timeout: float) -> Any:
        if not self.conn.poll(timeout):
            raise RuntimeError(f"{self.proc.name}: no {what!r} within {timeout:g} s")
        tag, value = self.conn.recv()
        if tag != what:
            raise RuntimeError(f"{self.proc.name}: expected {what!r}, got {tag!r}")
        return value

    def go(self) -> float:
        self.conn.send("go")
        return float(self.expect("started", 30))

    def finish(self, timeout: float = 60) -> dict[str, Any]:
        self.conn.send("stop")
        return dict(self.expect("done", timeout))

    def close(self) -> None:
        self.proc.join(15)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
