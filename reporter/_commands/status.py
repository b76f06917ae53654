"""``telemetry-reporter status``: shards, games, counters and live reporters, once or watched.

The full form reads every shard (ring, batch sets, each game's length and head), so its cost
grows with shards, games and batches.  ``--no-shards`` reads only each shard's counters and
lease holder (one HGETALL and one GET per shard, pipelined), the alerts and the reporter
registry: cheap at any size, but without the levels that need the per-shard reads (buffered,
pending, unaccounted...).  Both show each reporter's heartbeat age and shards held, and which
reporter serves each hot game of this config (the holder of the game's shard).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from collector.counters import STORE, Counter
from collector.logs import counted
from collector.store import (
    Alert,
    BackendError,
    MemoryUse,
    QuarantineRecord,
    Remembered,
    Store,
)
from collector.text import printable, printable_json
from reporter._commands.status_sections import (
    QUARANTINE_SHOWN,
    Held,
    age,
    alerts_json,
    holds_json,
    hot_game_entries,
    memory_json,
    owners_not_live,
    quarantine_json,
    read_memory,
    read_sending_holds,
    remembered_json,
    render_alerts,
    render_holds,
    render_hot_games,
    render_memory,
    render_owners_not_live,
    render_quarantine,
    render_remembered,
    render_reporters,
    reporter_entries,
    when,
)
from reporter._config import ReporterConfig
from reporter._monitoring.accounting import Totals, read_totals
from reporter._tables import table

# Levels only the full form can give (they need every shard's batches and games).
SHARD_LEVELS_NOTE = (
    "levels (buffered, pending_events, batches_in_flight, batches_retry,\n"
    "batches_dead_listed, unaccounted) need the per-shard reads: run without "
    "--no-shards"
)
CLEAR_SCREEN = "\x1b[H\x1b[2J"


# -- the full form -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Reading:
    """What the full form read of Redis, at ``now``."""

    totals: Totals
    now: float = field(default_factory=time.time)
    alerts: Sequence[Alert] = ()
    reporters: Sequence[dict[str, Any]] | None = None
    memory: Sequence[MemoryUse] = ()
    hot_games: Sequence[dict[str, Any]] | None = None
    holds: Held | None = None
    quarantine: Sequence[QuarantineRecord] = ()
    remembered: Sequence[Remembered] = ()
    not_live: Sequence[int] = ()


def render_status(reading: Reading, config: ReporterConfig, max_games: int = 50) -> str:
    totals, now, not_live = reading.totals, reading.now, reading.not_live
    remembered, hot_games, reporters = reading.remembered, reading.hot_games, reading.reporters
    hot = config.reporter.hot_games
    kept = {r.shard: r for r in remembered}
    shard_rows = [
        (
            s.shard,
            (f"{s.owner} (not live)" if s.shard in not_live else s.owner) or "-",
            len(s.games),
            s.buffered,
            age(min((g.oldest_ms for g in s.games if g.oldest_ms), default=None), now),
            s.inflight,
            s.retry,
            s.dead,
            *((kept[s.shard].writes, kept[s.shard].dedup_keys) if s.shard in kept else ("-", "-")),
        )
        for s in totals.shards
    ]
    games = sorted((g for s in totals.shards for g in s.games), key=lambda g: (-g.buffered, g.game))
    game_rows = [
        (
            g.game,
            g.shard,
            g.buffered,
            age(g.oldest_ms, now),
            f"hot x{hot[g.game]}" if g.game in hot else "",
        )
        for g in games[:max_games]
    ]
    summary = totals.summary()
    counter_rows = [(k, v) for k, v in summary.items()]
    parts = [
        f"config: {config.source}",
        *render_holds(reading.holds, config),
        *render_memory(reading.memory),
        *render_alerts(reading.alerts),
        *(["", render_reporters(reporters)] if reporters is not None else []),
        *render_owners_not_live(not_live),
        "",
        "shards",
        table(
            (
                "shard",
                "owner",
                "games",
                "buffered",
                "oldest",
                "in flight",
                "retry",
                "dead",
                "writes kept",
                "dedup keys",
            ),
            shard_rows,
        ),
        *render_remembered(remembered),
        "",
        f"games ({len(games)} with buffered events"
        + (f", showing {max_games}" if len(games) > max_games else "")
        + ")",
        table(("game", "shard", "buffered", "oldest", ""), game_rows) if game_rows else "(none)",
        "",
        render_hot_games(hot_games)
        if hot_games is not None
        else "hot games: "
        + (", ".join(f"{g} ({counted(n, 'thread')})" for g, n in hot.items()) or "none"),
        "",
        "counters (events unless named batches)",
        table(("counter", "value"), counter_rows),
        *render_quarantine(reading.quarantine, [p for s in totals.shards for p in s.problems]),
    ]
    return "\n".join(parts)


def _full(store: Store, config: ReporterConfig, as_json: bool, indent: int | None) -> str:
    totals = read_totals(store)
    alerts = store.alerts()
    holds = read_sending_holds(store, config)
    memory = read_memory(store)
    now = time.time()
    owners = Tally(s.owner for s in totals.shards if s.owner)
    # Heartbeats are kept by the server's clock: their liveness is judged by it too.
    reporters = reporter_entries(
        store.reporters(), store.server_ms() / 1000, config.reporter.shard_lease_seconds, owners
    )
    by_shard = [""] * store.schema.shards
    for s in totals.shards:
        by_shard[s.shard] = s.owner
    not_live = owners_not_live(by_shard, reporters)
    hot = hot_game_entries(config, store.schema, by_shard)
    quarantine = store.quarantine(QUARANTINE_SHOWN)
    remembered = store.remembered()
    if as_json:
        return json.dumps(
            {
                **totals.summary(),
                "alerts": alerts_json(alerts),
                "reporters": reporters,
                "redis_memory": memory_json(memory),
                "hot_games": hot,
                "shards_owned_by_no_live_reporter": not_live,
                "quarantine": quarantine_json(quarantine),
                "remembered": remembered_json(remembered),
                "problems": [p for s in totals.shards for p in s.problems],
                **holds_json(holds),
            },
            indent=indent,
        )
    reading = Reading(
        totals,
        now,
        alerts=alerts,
        reporters=reporters,
        memory=memory,
        hot_games=hot,
        holds=holds,
        quarantine=quarantine,
        remembered=remembered,
        not_live=not_live,
    )
    return f"redis: {store.describe()}\n" + render_status(reading, config)


# -- the cheap form (--no-shards) --------------------------------------------------------------


def _cheap(store: Store, config: ReporterConfig, as_json: bool, indent: int | None) -> str:
    found = store.counters()
    counters = {str(name): found.get(name, 0) for name in STORE}
    alerts = store.alerts()
    holds = read_sending_holds(store, config)
    memory = read_memory(store)
    owners = store.shard_owners()
    reporters = reporter_entries(
        store.reporters(),
        store.server_ms() / 1000,  # the clock the heartbeats are kept by
        config.reporter.shard_lease_seconds,
        Tally(o for o in owners if o),
    )
    hot = hot_game_entries(config, store.schema, owners)
    unowned = sum(1 for o in owners if not o)
    not_live = owners_not_live(owners, reporters)
    if as_json:
        return json.dumps(
            {
                **counters,
                "alerts": alerts_json(alerts),
                "reporters": reporters,
                "redis_memory": memory_json(memory),
                "hot_games": hot,
                "shards_without_owner": unowned,
                "shards_owned_by_no_live_reporter": not_live,
                **holds_json(holds),
            },
            indent=indent,
        )
    set_aside = counters[str(Counter.QUARANTINED_RECORDS)]
    return "\n".join(
        [
            f"redis: {store.describe()}",
            f"config: {config.source}",
            *render_holds(holds, config),
            *render_memory(memory),
            *render_alerts(alerts),
            "",
            render_reporters(reporters),
            f"shards without an owner: {unowned} of {store.schema.shards}",
            *render_owners_not_live(not_live),
            render_hot_games(hot),
            "",
            f"counters over {counted(store.schema.shards, 'shard')} (events unless named batches)",
            table(("counter", "value"), list(counters.items())),
            *(
                [
                    f"{set_aside} records set aside in the quarantine: "
                    "run without --no-shards to list the newest"
                ]
                if set_aside
                else []
            ),
            "",
            SHARD_LEVELS_NOTE,
        ]
    )


def status_text(
    store: Store, config: ReporterConfig, as_json: bool, shards: bool = True, indent: int | None = 2
) -> str:
    """``status`` once, as text or JSON (indented by ``indent``, or on one line); what came
    from Redis is escaped where it was read, and the whole text once more here."""
    text = (_full if shards else _cheap)(store, config, as_json, indent)
    return printable_json(text) if as_json else printable(text, keep="\n")


# -- the command -------------------------------------------------------------------------------


def watch(
    render: Callable[[], str],
    seconds: float,
    out: TextIO,
    stop: threading.Event,
    as_json: bool = False,
    rounds: int | None = None,
) -> int:
    """Print ``render()`` every ``seconds`` until ``stop`` (or Ctrl-C, or ``rounds``).

    On a terminal the screen is cleared before each refresh; otherwise each refresh starts
    with a line giving its time (JSON: one compact object per line).  The first refresh
    failing ends the command with that error; later Redis failures are shown in place of the
    status and watching goes on."""
    done = 0
    while True:
        try:
            text = render()
        except BackendError as exc:
            if not done:
                raise
            text = printable(f"Redis unavailable: {exc}")
            print(f"telemetry-reporter: {when(time.time())}: {text}", file=sys.stderr)
            if as_json:
                text = ""
        if as_json:
            out.write(text + "\n" if text else "")
        else:
            head = CLEAR_SCREEN if out.isatty() else ""
            out.write(f"{head}--- {when(time.time())}, every {seconds:g}s (Ctrl-C ends)\n{text}\n")
        out.flush()
        done += 1
        if (rounds is not None and done >= rounds) or stop.wait(seconds):
            return 0


def run_status(
    store: Store,
    config: ReporterConfig,
    args: argparse.Namespace,
    stop: threading.Event | None = None,
    rounds: int | None = None,
) -> int:
    indent = None if args.watch is not None else 2  # watched JSON: one object per line

    def render() -> str:
        return status_text(store, config, args.json, shards=not args.no_shards, indent=indent)

    if args.watch is None:
        print(render())
        return 0
    try:
        return watch(render, args.watch, sys.stdout, stop or threading.Event(), args.json, rounds)
    except KeyboardInterrupt:  # the way to end a watch
        return 0
