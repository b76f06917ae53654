"""One round of ``bench.producers`` for the Python SDK, in a process of its own: N
``collect()`` calls of the work file's events, then ``flush()`` until all are in Redis; one
line of JSON with the figures on standard output.  Settings from ``TELEMETRY_*`` variables.

    python -m bench._producer_python WORK_FILE EVENTS
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import orjson

from collector import Collector


def main(work_file: str, events: int) -> int:
    pool = orjson.loads(Path(work_file).read_bytes())
    work = [pool[i % len(pool)] for i in range(events)]
    telemetry = Collector.from_config()
    collect = telemetry.collect
    for game, event in pool[: min(len(pool), 200)]:  # connected, scripts loaded, names known
        collect(game, event)
    if not telemetry.flush(timeout=60):
        raise SystemExit("warm-up: not stored within 60 s")
    warm = telemetry.stats()["stored"]
    cpu0, t0 = time.process_time_ns(), time.perf_counter_ns()
    for game, event in work:
        collect(game, event)
    cpu1, t1 = time.process_time_ns(), time.perf_counter_ns()
    stored = telemetry.flush(timeout=120)
    cpu2, t2 = time.process_time_ns(), time.perf_counter_ns()
    stats = telemetry.stats()
    telemetry.close()
    print(
        orjson.dumps(
            {
                "calls": events,
                "call_ns": (t1 - t0) / events,
                "loop_cpu_ns": (cpu1 - cpu0) / events,
                "cpu_ns_per_event": (cpu2 - cpu0) / events,
                "stored_per_s": events / ((t2 - t0) / 1e9),
                "stored": stats["stored"] - warm if stored else -1,
                "dropped": stats["dropped_buffer_full"],
            }
        ).decode()
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
