"""``telemetry-reporter status``: a readable table of shards, games and counters."""

from __future__ import annotations

import time
from collections.abc import Sequence

from collector.store import Alert
from reporter._accounting import Totals
from reporter._config import ReporterConfig
from reporter._tables import table


def _age(oldest_ms: int | None, now: float) -> str:
    return "-" if oldest_ms is None else f"{max(0.0, now - oldest_ms / 1000):.1f}s"


def render_alerts(alerts: Sequence[Alert]) -> list[str]:
    """One line per alert: what an endpoint refused that only the operator can fix."""
    return [f"ALERT {a.name}: {a.message} ({a.count} times, last at "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(a.at))})" for a in alerts]


def render_status(totals: Totals, config: ReporterConfig, now: float | None = None,
                  max_games: int = 50, alerts: Sequence[Alert] = ()) -> str:
    now = time.time() if now is None else now
    hot = config.reporter.hot_games
    shard_rows = [
        (s.shard, s.owner or "-", len(s.games), s.buffered,
         _age(min((g.oldest_ms for g in s.games if g.oldest_ms), default=None), now),
         s.inflight, s.retry, s.dead)
        for s in totals.shards
    ]
    games = sorted((g for s in totals.shards for g in s.games),
                   key=lambda g: (-g.buffered, g.game))
    game_rows = [
        (g.game, g.shard, g.buffered, _age(g.oldest_ms, now),
         f"hot x{hot[g.game]}" if g.game in hot else "")
        for g in games[:max_games]
    ]
    summary = totals.summary()
    counter_rows = [(k, v) for k, v in summary.items()]
    parts = [
        f"config: {config.source}",
        *render_alerts(alerts),
        "",
        "shards",
        table(("shard", "owner", "games", "buffered", "oldest", "in flight", "retry", "dead"),
              shard_rows),
        "",
        f"games ({len(games)} with buffered events"
        + (f", showing {max_games}" if len(games) > max_games else "") + ")",
        table(("game", "shard", "buffered", "oldest", ""), game_rows) if game_rows else "(none)",
        "",
        "hot games: " + (", ".join(f"{g} ({n} threads)" for g, n in hot.items()) or "none"),
        "",
        "counters (events unless named batches)",
        table(("counter", "value"), counter_rows),
    ]
    return "\n".join(parts)
