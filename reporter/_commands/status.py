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
    BackendUnavailable,
    HoldState,
    KeySchema,
    MemoryUse,
    QuarantineRecord,
    Remembered,
    Reporter,
    Store,
    remembered_totals,
)
from collector.text import printable, printable_json
from reporter._config import ReporterConfig
from reporter._monitoring.accounting import Totals, read_totals
from reporter._pacing.send_hold import read_holds
from reporter._sinks.base import HoldScope
from reporter._sinks.registry import make_sink
from reporter._tables import table

# Levels only the full form can give (they need every shard's batches and games).
SHARD_LEVELS_NOTE = (
    "levels (buffered, pending_events, batches_in_flight, batches_retry,\n"
    "batches_dead_listed, unaccounted) need the per-shard reads: run without "
    "--no-shards"
)
CLEAR_SCREEN = "\x1b[H\x1b[2J"


def _age(oldest_ms: int | None, now: float) -> str:
    return "-" if oldest_ms is None else f"{max(0.0, now - oldest_ms / 1000):.1f}s"


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


Held = list[tuple[HoldScope, HoldState]]


def read_sending_holds(store: Store, config: ReporterConfig) -> Held | None:
    """The held scopes of the configured sink, oldest first (None for a sink that is never
    held)."""
    sink = make_sink(config)
    spec = sink.hold()
    return None if spec is None else read_holds(store, spec, sink)


def render_holds(holds: Held | None, config: ReporterConfig) -> list[str]:
    """One line per held scope: since when, why, what to check, the probes."""
    spec = make_sink(config).hold()
    if not holds or spec is None:
        return []
    lines = []
    for scope, hold in holds:
        next_in = max(0.0, (hold.probe_at_ms - hold.now_ms) / 1000)
        why = f"it answered {hold.cause}" if hold.cause[:5] in ("nppa ", "HTTP ") else hold.cause
        lines.append(
            f"HELD: sending to {spec.what} is held for {scope.label} "
            f"for {hold.age_seconds:.0f}s, since {_when(hold.since_ms / 1000)}: "
            f"{why}: {hold.check}; {counted(hold.probes, 'probe')}, the next in "
            f"{next_in:.0f}s" + (f" (game {hold.game})" if hold.game else "")
        )
    return lines


def holds_json(holds: Held | None) -> dict[str, Any]:
    """``{"hold": the oldest, "holds": [every one]}`` for the anti-addiction sink, nothing
    for the others."""
    if holds is None:
        return {}
    every = [
        {
            "held": True,
            "scope": scope.kind,
            "name": scope.name,
            "label": scope.label,
            "cause": hold.cause,
            "check": hold.check,
            "game": hold.game,
            "since": hold.since_ms / 1000,
            "age_seconds": round(hold.age_seconds, 1),
            "probes": hold.probes,
            "next_probe_in_seconds": round(max(0, hold.probe_at_ms - hold.now_ms) / 1000, 1),
        }
        for scope, hold in holds
    ]
    return {"hold": every[0] if every else {"held": False}, "holds": every}


def render_alerts(alerts: Sequence[Alert]) -> list[str]:
    """One line per alert: what an endpoint refused that only the operator can fix."""
    return [f"ALERT {a.name}: {a.message} ({a.count} times, last at {_when(a.at)})" for a in alerts]


# -- the quarantine ----------------------------------------------------------------------------

QUARANTINE_SHOWN = 10  # records per shard read, and shown in all


def render_quarantine(
    records: Sequence[QuarantineRecord], problems: Sequence[str] = ()
) -> list[str]:
    """The newest records the scripts set aside, and junk they have yet to meet."""
    lines = []
    if records:
        rows = [
            (q.shard, q.key, q.field or "-", q.reason, q.script, _when(q.at))
            for q in records[:QUARANTINE_SHOWN]
        ]
        lines += [
            "",
            "quarantine: records the scripts set aside (quarantined_records), newest first",
            table(("shard", "key", "field", "reason", "script", "at"), rows, align="rlllll"),
        ]
    if problems:
        lines += [
            "",
            "junk the scripts will set aside when they meet it:",
            *(f"  {p}" for p in problems),
        ]
    return lines


def quarantine_json(records: Sequence[QuarantineRecord]) -> list[dict[str, Any]]:
    return [
        {
            "shard": q.shard,
            "key": q.key,
            "field": q.field,
            "found": q.found,
            "reason": q.reason,
            "sample": q.sample,
            "events": q.events,
            "script": q.script,
            "at": q.at,
        }
        for q in records[:QUARANTINE_SHOWN]
    ]


# -- Redis memory -----------------------------------------------------------------------------


def read_memory(store: Store) -> list[MemoryUse]:
    """Each node's memory use; none where INFO is refused (renamed or forbidden by an ACL)."""
    try:
        return store.memory()
    except BackendUnavailable:
        raise
    except BackendError:
        return []


def _mb(size: int) -> str:
    return f"{size / 1_048_576:.1f} MB"


def _size(size: int) -> str:
    return _mb(size) if size >= 1_048_576 else f"{size / 1024:.1f} KB"


def render_memory(memory: Sequence[MemoryUse]) -> list[str]:
    """One line per full node: what Redis does at maxmemory under its policy."""
    lines = []
    for m in memory:
        if not m.full:
            continue
        where = f" ({m.node})" if len(memory) > 1 else ""
        head = f"Redis is full{where}: {_mb(m.used)} used of maxmemory {_mb(m.maximum)}"
        if m.refusing_writes:
            lines.append(
                f"{head} (policy noeviction); writes are refused: the SDKs keep their "
                f"events (refused_oom) until the reporters drain it "
                f"({m.oom_refusals} writes refused since the server started)"
            )
        else:
            lines.append(
                f"{head} (policy {m.policy}); Redis evicts keys, which can delete "
                f"buffered events and batches: set maxmemory-policy noeviction"
            )
    return lines


def memory_json(memory: Sequence[MemoryUse]) -> list[dict[str, Any]]:
    return [
        {
            "node": m.node,
            "used_bytes": m.used,
            "max_bytes": m.maximum,
            "policy": m.policy,
            "oom_refusals": m.oom_refusals,
            "full": m.full,
            "refusing_writes": m.refusing_writes,
        }
        for m in memory
    ]


# -- reporters ---------------------------------------------------------------------------------


def reporter_entries(
    reporters: Sequence[Reporter],
    now: float,
    lease_seconds: float,
    owners: Tally[str] | None = None,
) -> list[dict[str, Any]]:
    """Each registered reporter: its id, whether its heartbeat is live, the heartbeat's age
    (the deadline minus ``lease_seconds``, this config's ``shard_lease_seconds``: every
    reporter is assumed to run with the same) and, when the shards were read, how many it
    holds."""
    out = []
    for r in reporters:
        beat = r.deadline_ms / 1000 - lease_seconds
        entry: dict[str, Any] = {
            "id": r.owner,
            "live": r.deadline_ms / 1000 > now,
            "heartbeat_age_seconds": round(max(0.0, now - beat), 1),
        }
        if owners is not None:
            entry["shards"] = owners.get(r.owner, 0)
        out.append(entry)
    return out


def owners_not_live(owners: Sequence[str], reporters: Sequence[dict[str, Any]]) -> list[int]:
    """Shards whose owner key names a process missing from the live registry (a process
    that died, or a key written by hand): a live reporter takes such a shard over at its
    next lease round (``reporter._service.ownership``), and counts it in
    ``owners_taken_over``."""
    live = {e["id"] for e in reporters if e["live"]}
    return [shard for shard, owner in enumerate(owners) if owner and owner not in live]


def render_owners_not_live(shards: Sequence[int]) -> list[str]:
    if not shards:
        return []
    return [
        f"shards held by a process missing from the live registry: {_shard_list(shards)} "
        "(a live reporter takes them over at its next lease round)"
    ]


def _shard_list(shards: Sequence[int], most: int = 20) -> str:
    shown = ", ".join(map(str, shards[:most]))
    return shown if len(shards) <= most else f"{shown} and {len(shards) - most} more"


def hot_game_entries(
    config: ReporterConfig, schema: KeySchema, owners: Sequence[str]
) -> list[dict[str, Any]]:
    """This config's hot games: threads, shard, and the reporter serving it (the holder of
    the shard's lease, '' for none; ``owners`` is by shard number)."""
    return [
        {
            "game": game,
            "threads": threads,
            "shard": schema.shard_of(game),
            "served_by": owners[schema.shard_of(game)],
        }
        for game, threads in config.reporter.hot_games.items()
    ]


def render_hot_games(entries: Sequence[dict[str, Any]]) -> str:
    return "hot games: " + (
        ", ".join(
            f"{e['game']} ({counted(e['threads'], 'thread')}, shard {e['shard']}, served by "
            f"{e['served_by'] or 'no reporter'})"
            for e in entries
        )
        or "none"
    )


def render_reporters(entries: Sequence[dict[str, Any]]) -> str:
    live = sum(1 for e in entries if e["live"])
    if not entries:
        return "reporters: none registered (no telemetry-reporter run is heartbeating)"
    with_shards = all("shards" in e for e in entries)
    rows = [
        (
            e["id"],
            "live" if e["live"] else "expired",
            f"{e['heartbeat_age_seconds']}s ago",
            *((e["shards"],) if with_shards else ()),
        )
        for e in entries
    ]
    headers = ("reporter", "state", "last heartbeat", *(("shards",) if with_shards else ()))
    return f"reporters ({live} live)\n" + table(headers, rows, align="llr" + "r" * with_shards)


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
            _age(min((g.oldest_ms for g in s.games if g.oldest_ms), default=None), now),
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
            _age(g.oldest_ms, now),
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


def render_remembered(remembered: Sequence[Remembered]) -> list[str]:
    """What the shards keep to answer repeats (written once, dedup keys), and its memory."""
    if not remembered:
        return []
    t = remembered_totals(remembered)
    return [
        "",
        f"kept to answer repeats: {counted(t['remembered_writes'], 'write')} of "
        f"{counted(t['remembered_writers'], 'SDK writer')}, "
        f"{counted(t['dedup_keys'], 'dedup key')} of {counted(t['dedup_games'], 'game')}: "
        f"about {_size(t['remembered_bytes_estimate'])} "
        "(columns writes kept and dedup keys)",
    ]


def remembered_json(remembered: Sequence[Remembered]) -> dict[str, Any]:
    return {
        **remembered_totals(remembered),
        "shards": [
            {
                "shard": r.shard,
                "writes": r.writes,
                "writers": r.writers,
                "dedup_keys": r.dedup_keys,
                "dedup_games": r.dedup_games,
                "bytes_estimate": r.estimated_bytes,
            }
            for r in remembered
            if r.write_records or r.writers or r.dedup_keys
        ],
    }


def _alerts_json(alerts: Sequence[Alert]) -> list[dict[str, Any]]:
    return [{"name": a.name, "message": a.message, "at": a.at, "count": a.count} for a in alerts]


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
                "alerts": _alerts_json(alerts),
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
                "alerts": _alerts_json(alerts),
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
            print(f"telemetry-reporter: {_when(time.time())}: {text}", file=sys.stderr)
            if as_json:
                text = ""
        if as_json:
            out.write(text + "\n" if text else "")
        else:
            head = CLEAR_SCREEN if out.isatty() else ""
            out.write(f"{head}--- {_when(time.time())}, every {seconds:g}s (Ctrl-C ends)\n{text}\n")
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
