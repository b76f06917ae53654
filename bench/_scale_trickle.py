"""bench/scale.py's trickle run: many active games, one hot game, for minutes.

One collector process offers ``rate`` events/s cycling over ``games`` cold games (each gets a
steady trickle) and the hot game (``hot_share`` of the traffic); one or more reporter
processes deliver to the bench endpoint, which counts unique events per game and keeps a
histogram of receive time - collect time.  The parent samples each reporter's RSS from
/proc every few seconds.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench._fast_endpoint import FastEndpoint
from bench._pipeline_children import Child, collector_main, our_reporter_main
from bench._pipeline_workload import Raw

HOT = "hot-arena"
SAMPLE_SECONDS = 5.0


def schedule(games: int, hot_share: float) -> list[str]:
    """One cycle of game names: every cold game once, and the hot game at ``hot_share``."""
    cold = [f"game-{i:05d}" for i in range(games)]
    hot_every = round(1 / hot_share) if hot_share > 0 else 0
    out: list[str] = []
    for name in cold:  # the hot game takes one slot in hot_every
        out.append(name)
        if hot_every and len(out) % hot_every == hot_every - 1:
            out.append(HOT)
    return out


def expected_per_game(cycle: Sequence[str], sent: int) -> Counter[str]:
    whole, part = divmod(sent, len(cycle))
    counts = Counter(cycle)
    out = Counter({game: n * whole for game, n in counts.items()})
    out.update(cycle[:part])
    return out


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def percentile(histogram: dict[int, int], q: float) -> int:
    total = sum(histogram.values())
    rank, seen = q * total, 0
    for value in sorted(histogram):
        seen += histogram[value]
        if seen >= rank:
            return value
    return 0


@dataclass
class TrickleResult:
    seconds: float
    offered: float
    sent: int
    collector_stats: dict[str, int]
    delivered: int
    duplicates: int
    games_expected: int
    games_short: list[tuple[str, int, int]]  # (game, expected, delivered) of games missing some
    p50_ms: int
    p99_ms: int
    max_ms: int
    drain_after_s: float
    p99_by_minute: list[int] = field(default_factory=list)  # ms, 100 ms resolution
    p99_after_warmup_ms: int = 0  # over the minutes of delivery after the warm-up (100 ms)
    rss: list[tuple[float, list[int]]] = field(default_factory=list)  # (t, KiB per reporter)
    reporter_cpu: list[float] = field(default_factory=list)
    load: list[tuple[float, float]] = field(default_factory=list)  # (t, 1-min load average)


def run_trickle(
    raw: Raw,
    endpoint: FastEndpoint,
    *,
    games: int,
    hot_share: float,
    rate: float,
    seconds: float,
    reporters: int,
    settle: float,
    warmup: float = 0.0,
) -> TrickleResult:
    """``warmup + seconds`` of traffic; the latency after the warm-up's whole minutes is also
    given on its own (every game starts at the same instant, so the first ``linger_ms``
    ends with all of them ready at once: a burst a running system does not see)."""
    import os

    cycle = schedule(games, hot_share)
    endpoint.reset()
    children = [Child(our_reporter_main, raw, name=f"scale-reporter-{i}") for i in range(reporters)]
    collector = Child(
        collector_main, "ours", raw, cycle, rate, warmup + seconds, name="scale-collector"
    )
    rss: list[tuple[float, list[int]]] = []
    load: list[tuple[float, float]] = []
    for child in children:
        child.go()
    start = collector.go()
    generated: dict[str, Any] | None = None
    next_sample = time.time()
    while generated is None:
        if collector.conn.poll(0.5):
            tag, generated = collector.conn.recv()
            assert tag == "generated", tag
        if time.time() >= next_sample:
            rss.append((time.time() - start, [rss_kib(c.pid) for c in children]))
            load.append((time.time() - start, os.getloadavg()[0]))
            next_sample += SAMPLE_SECONDS
            count = endpoint.count()
            print(
                f"  t={time.time() - start:6.0f}s delivered {count['events']:>10,} "
                f"reporter RSS {[k // 1024 for k in rss[-1][1]]} MiB load {load[-1][1]:.1f}",
                flush=True,
            )
    done = collector.expect("done", 120)
    stats = {k: int(v) for k, v in done["stats"].items() if isinstance(v, int)}
    sent = int(generated["sent"])
    stored = stats.get("stored", sent)
    # Wait for the backlog: the last lingering games go out one linger after their last event.
    deadline = time.time() + settle
    while time.time() < deadline and endpoint.count()["events"] < stored:
        time.sleep(0.5)
    drain_after = time.time() - float(generated["end"])
    rss.append((time.time() - start, [rss_kib(c.pid) for c in children]))
    cpu = [float(c.finish(60)["cpu"]) for c in children]
    collector.close()
    for child in children:
        child.close()
    got = endpoint.stats()
    per_game: dict[str, int] = got["per_game"]
    want = expected_per_game(cycle, sent)
    short = [(g, n, per_game.get(g, 0)) for g, n in sorted(want.items()) if per_game.get(g, 0) != n]
    latency = {int(k): int(v) for k, v in got["latency"].items()}
    minutes = {
        int(m): Counter({int(k): int(v) for k, v in h.items()}) for m, h in got["by_minute"].items()
    }
    steady: Counter[int] = Counter()
    for minute, histogram in minutes.items():
        if minute >= int(warmup // 60):
            steady.update(histogram)
    return TrickleResult(
        seconds=float(generated["elapsed"]),
        offered=rate,
        sent=sent,
        collector_stats=stats,
        delivered=int(got["events"]),
        duplicates=int(got["dup_events"]),
        games_expected=len(want),
        games_short=short,
        p50_ms=percentile(latency, 0.50),
        p99_ms=percentile(latency, 0.99),
        max_ms=max(latency, default=0),
        drain_after_s=drain_after,
        p99_by_minute=[percentile(minutes[m], 0.99) for m in sorted(minutes)],
        p99_after_warmup_ms=percentile(steady, 0.99),
        rss=rss,
        reporter_cpu=cpu,
        load=load,
    )


def rss_at(result: TrickleResult, at: float) -> list[int]:
    """The RSS sample nearest to ``at`` seconds into the run."""
    return min(result.rss, key=lambda sample: abs(sample[0] - at))[1]
