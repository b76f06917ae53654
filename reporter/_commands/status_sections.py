"""The sections of ``telemetry-reporter status``: each part of the reading (holds, alerts,
quarantine, memory, reporters and shard owners, hot games, what is kept to answer repeats),
rendered as lines of text and as JSON.  ``reporter._commands.status`` reads and composes them.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Sequence
from typing import Any

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
from reporter._config import ReporterConfig
from reporter._pacing.send_hold import read_holds
from reporter._sinks.base import HoldScope
from reporter._sinks.registry import make_sink
from reporter._tables import table


def age(oldest_ms: int | None, now: float) -> str:
    return "-" if oldest_ms is None else f"{max(0.0, now - oldest_ms / 1000):.1f}s"


def when(at: float) -> str:
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
            f"for {hold.age_seconds:.0f}s, since {when(hold.since_ms / 1000)}: "
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
    return [f"ALERT {a.name}: {a.message} ({a.count} times, last at {when(a.at)})" for a in alerts]


# -- the quarantine ----------------------------------------------------------------------------

QUARANTINE_SHOWN = 10  # records per shard read, and shown in all


def render_quarantine(
    records: Sequence[QuarantineRecord], problems: Sequence[str] = ()
) -> list[str]:
    """The newest records the scripts set aside, and junk they have yet to meet."""
    lines = []
    if records:
        rows = [
            (q.shard, q.key, q.field or "-", q.reason, q.script, when(q.at))
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


def size(size: int) -> str:
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
        f"about {size(t['remembered_bytes_estimate'])} "
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


def alerts_json(alerts: Sequence[Alert]) -> list[dict[str, Any]]:
    return [{"name": a.name, "message": a.message, "at": a.at, "count": a.count} for a in alerts]
