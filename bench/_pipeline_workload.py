"""What bench/pipeline.py offers the pipeline: events, games, pacing, and the project config.

The events are small anti-addiction-style behaviour records whose ``t`` is the collect time in
ms (the endpoint measures latency from it); the configuration is the project's defaults with
only what the bench has to set changed, built through the project's own loader.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from collector.config import build_config, raw_settings
from reporter._config import ReporterConfig

Raw = dict[str, dict[str, Any]]
CollectFn = Callable[[str, dict[str, Any]], object]

BATCH = 128
HOT_GAME = "hot-arena"
HOT_THREADS = 2


# -- workload ----------------------------------------------------------------------------------


def make_event(seq: int, now_ms: int) -> dict[str, Any]:
    """A small anti-addiction-style behaviour event; ``t`` is its collect time (ms)."""
    return {
        "t": now_ms,
        "n": seq,
        "si": f"s{seq:031d}",
        "bt": seq & 1,
        "ot": now_ms // 1000,
        "ct": 0,
        "pi": f"1fffbjzos82bs9cfjr{seq:016x}",
    }


def game_schedule(games: int, hot_share: float) -> list[str]:
    """A cycle of 1000 game names: the hot game ``hot_share`` of them, the rest round-robin."""
    cold = [f"game-{i:02d}" for i in range(games - 1)]
    hot_every = max(1, round(1 / hot_share)) if hot_share > 0 else 0
    out: list[str] = []
    for i in range(1000):
        if hot_every and i % hot_every == 0:
            out.append(HOT_GAME)
        else:
            out.append(cold[i % len(cold)])
    return out


def preload_games(games: int) -> list[str]:
    return [f"game-{i:02d}" for i in range(games)]


def paced(
    collect: CollectFn, schedule: Sequence[str], rate: float, seconds: float
) -> tuple[int, float, int]:
    """Call ``collect`` ``rate`` times a second for ``seconds``: (calls, elapsed, worst lag)."""
    clock, stamp = time.monotonic, time.time_ns
    cycle = len(schedule)
    sent = worst = 0
    start = clock()
    end = start + seconds
    while (now := clock()) < end:
        due = int((now - start) * rate) - sent
        if due <= 0:
            time.sleep(0.0005)
            continue
        worst = max(worst, due)
        for _ in range(min(due, 2000)):
            collect(schedule[sent % cycle], make_event(sent, stamp() // 1_000_000))
            sent += 1
    return sent, clock() - start, worst


# -- configuration --------------------------------------------------------------------------------


def our_raw(
    redis_url: str,
    sink_url: str,
    *,
    cap: int,
    linger_ms: int,
    hot_games: Mapping[str, int],
    reporter: Mapping[str, Any] | None = None,
) -> Raw:
    """The project's defaults, with only what the bench has to set changed."""
    raw = raw_settings(ReporterConfig())
    raw["reporter"].update(reporter or {})
    raw["redis"].update(url=redis_url)
    raw["sink"].update(url=sink_url)
    raw["buffer"].update(max_events_per_game=cap)
    raw["collector"].update(max_buffer_events=max(raw["collector"]["max_buffer_events"], cap))
    raw["reporter"].update(linger_ms=linger_ms, hot_games=dict(hot_games))
    return raw


def make_config(raw: Raw) -> ReporterConfig:
    return build_config(raw, "<bench/pipeline.py>", env={}, interpolate=False, cls=ReporterConfig)
