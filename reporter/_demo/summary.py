"""The demo's summary: every row is a figure of the shared vocabulary (collector.counters),
from the SDK or from Redis, or a figure of the endpoint's, named as such; then the verdict
(does every event the SDK accepted end in one state?); the next steps are the sink's."""

from __future__ import annotations

from collections.abc import Mapping

from collector.counters import Counter as C
from collector.counters import Gauge
from reporter._demo.sinks import Figures
from reporter._monitoring.accounting import Totals

# A row: a name of the shared vocabulary (or "endpoint: ..." / "latency ..."), its value,
# what it means.
Row = tuple[str, object, str]


def summary_rows(stats: Mapping[str, int], totals: Totals, figures: Figures) -> list[Row]:
    sdk: list[Row] = [
        (C.ACCEPTED, stats[C.ACCEPTED], "events collect() took (SDK)"),
        (C.DROPPED_BUFFER_FULL, stats[C.DROPPED_BUFFER_FULL], "dropped: the SDK's buffer was full"),
        (C.DROPPED_AT_CLOSE, stats[C.DROPPED_AT_CLOSE], "dropped: not stored by close()"),
    ]
    store: list[Row] = [
        (name, totals.counter(name), meaning)
        for name, meaning in (
            (C.STORED, "events written to Redis"),
            (C.DELIVERED, "events the endpoint accepted, acknowledged"),
            (C.EVICTED, "events pushed out by a game's cap"),
            (C.MERGED, "events not stored: a duplicate dedup key within the window"),
            (C.STALE, "events too old to send, never sent"),
            (C.DEAD_EVENTS, "events in dead letters"),
            (C.REJECTED_ITEMS, "of those, events the endpoint refused one by one"),
            (C.DEAD_BATCHES, "dead letters"),
            (C.BATCHES_DELIVERED, "batches acknowledged as delivered"),
            (C.QUARANTINED_EVENTS, "events set aside with a record Redis could not use"),
        )
    ]
    store += [
        (Gauge.BUFFERED, totals.buffered, "events still waiting in Redis"),
        (Gauge.PENDING_EVENTS, totals.pending_events, "events in batches not finished"),
        (Gauge.UNACCOUNTED, totals.unaccounted, "stored events in none of these states"),
    ]
    f = figures
    endpoint: list[Row] = [
        ("endpoint: events", f.events, "events received, duplicates included"),
        ("endpoint: requests", f.posts, "requests it took"),
        (
            "endpoint: mean batch",
            f"{f.events / f.posts:.1f}" if f.posts else "-",
            "events per request",
        ),
        ("endpoint: largest batch", f.largest, "events in the largest request"),
        ("latency p50", f"{_percentile(f.latencies_ms, 0.50):.0f} ms", "collect() to receipt"),
        ("latency p99", f"{_percentile(f.latencies_ms, 0.99):.0f} ms", "collect() to receipt"),
    ]
    return [*sdk, *store, *endpoint]


def verdict(stats: Mapping[str, int], totals: Totals) -> tuple[bool, str]:
    """Whether the SDK's ``accepted`` equals the sum of the end states (the accounting
    invariant of collector.counters), and the line that says so, or what does not add up."""
    states = [
        ("delivered", totals.counter(C.DELIVERED)),
        ("evicted", totals.counter(C.EVICTED)),
        ("merged", totals.counter(C.MERGED)),
        ("stale", totals.counter(C.STALE)),
        ("dead-lettered", totals.dead_now),
        ("quarantined", totals.counter(C.QUARANTINED_EVENTS)),
        ("dropped in the SDK", stats[C.DROPPED_BUFFER_FULL] + stats[C.DROPPED_AT_CLOSE]),
        (
            "still buffered or pending",
            stats[Gauge.BUFFERED] + totals.buffered + totals.pending_events,
        ),
    ]
    accepted = stats[C.ACCEPTED]
    total = sum(count for _, count in states)
    listed = ", ".join(f"{name} {count}" for name, count in states if count)
    if total == accepted:
        return True, f"all {accepted} events accounted for: {listed or 'none were collected'}"
    gap = accepted - total
    return False, (
        f"events do not add up: the SDK accepted {accepted}, the end states hold "
        f"{total} ({listed or 'none'}): {abs(gap)} "
        f"{'missing' if gap > 0 else 'too many'}"
    )


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
